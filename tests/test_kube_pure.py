"""Pure parts of the API machinery, table-tested: request info, negotiation, Status shapes,
human durations, each kind's columns and field attributes, the catalog."""

from __future__ import annotations

import pytest

from nodeagent.cluster.apiserver.negotiation import choose_output, wants_aggregated_discovery
from nodeagent.cluster.apiserver.requestinfo import request_info
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import Catalog, Subresource
from nodeagent.cluster.registry.kinds import BUILTIN
from nodeagent.cluster.registry.kinds.events import EventStrategy
from nodeagent.cluster.registry.kinds.nodes import NodeStrategy
from nodeagent.cluster.registry.kinds.pods import PodStrategy, pod_status_reason
from nodeagent.cluster.registry.kinds.rbac import RoleBindingStrategy, RoleStrategy
from nodeagent.cluster.registry.table import human_duration
from nodeagent.core.errors import FieldError


@pytest.mark.parametrize(("method", "path", "watch", "want"), [
    ("GET", "/api/v1/pods", None, ("list", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns/pods", "true", ("watch", "", "v1", "ns", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces/ns/pods", None, ("watch", "", "v1", "ns", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns/pods/p", None, ("get", "", "v1", "ns", "pods", "p", "")),
    ("PUT", "/api/v1/namespaces/ns/pods/p/status", None, ("update", "", "v1", "ns", "pods", "p", "status")),
    ("GET", "/api/v1/namespaces/ns", None, ("get", "", "v1", "ns", "namespaces", "ns", "")),
    ("PUT", "/api/v1/namespaces/ns/finalize", None, ("update", "", "v1", "ns", "namespaces", "ns", "finalize")),
    ("PATCH", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", None,
     ("patch", "coordination.k8s.io", "v1", "kube-node-lease", "leases", "n1", "")),
    ("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterroles", None,
     ("deletecollection", "rbac.authorization.k8s.io", "v1", "", "clusterroles", "", "")),
    ("DELETE", "/api/v1/nodes/n1", None, ("delete", "", "v1", "", "nodes", "n1", "")),
    ("POST", "/api/v1/namespaces/ns/pods", None, ("create", "", "v1", "ns", "pods", "", "")),
])
def test_request_info(method, path, watch, want) -> None:
    ri = request_info(method, path, watch)
    assert ri.resource_request
    assert (ri.verb, ri.group, ri.version, ri.namespace, ri.resource, ri.name, ri.subresource) == want


@pytest.mark.parametrize("path", ["/api", "/apis", "/api/v1", "/apis/apps", "/apis/apps/v1", "/version", "/healthz",
                                  "/openapi/v3", "/"])
def test_non_resource_paths(path) -> None:
    assert not request_info("GET", path).resource_request


@pytest.mark.parametrize(("accept", "table", "version"), [
    ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", True, "v1"),
    ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", True, "v1beta1"),
    ("application/json", False, "v1"),
    (None, False, "v1"),
    ("*/*", False, "v1"),
    ("application/vnd.kubernetes.protobuf,application/json", False, "v1"),
    ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json", False, "v1"),
])
def test_choose_output(accept, table, version) -> None:
    out = choose_output(accept)
    assert (out.table, out.table_version) == (table, version)


def test_not_acceptable() -> None:
    with pytest.raises(errors.StatusError) as e:
        choose_output("application/vnd.kubernetes.protobuf")
    assert e.value.code == 406


@pytest.mark.parametrize(("accept", "want"), [
    ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", "v2"),
    ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", "v2beta1"),
    ("application/json", None), (None, None),
])
def test_discovery_negotiation(accept, want) -> None:
    assert wants_aggregated_discovery(accept) == want


def test_status_shapes() -> None:
    assert errors.not_found("leases", "coordination.k8s.io", "n1").status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'leases.coordination.k8s.io "n1" not found', "reason": "NotFound",
        "details": {"name": "n1", "group": "coordination.k8s.io", "kind": "leases"}, "code": 404}
    inv = errors.invalid("Pod", "", "p", [FieldError("spec.a", "Required value"), FieldError("spec.b", "Invalid value: 1")])
    assert inv.message == 'Pod "p" is invalid: [spec.a: Required value, spec.b: Invalid value: 1]'
    assert [c["reason"] for c in inv.status["details"]["causes"]] == ["FieldValueRequired", "FieldValueInvalid"]
    assert errors.too_old(5, 10).status["reason"] == "Expired" and errors.too_old(5, 10).code == 410
    assert errors.too_large(9, 3).status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    assert errors.stale("configmaps", "", "c").reason == "Conflict"


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (59, "59s"), (119, "119s"), (120, "2m"), (150, "2m30s"),
    (600, "10m"), (3 * 3600 - 1, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"),
    (47 * 3600, "47h"), (48 * 3600, "2d"), (49 * 3600, "2d1h"), (8 * 86400, "8d"), (2 * 365 * 86400, "2y"),
    (2 * 365 * 86400 + 86400, "2y1d"), (9 * 365 * 86400, "9y"),
])
def test_human_duration(seconds, text) -> None:
    assert human_duration(seconds) == text


def test_every_kind_has_a_unique_path_and_columns_match_cells() -> None:
    catalog = Catalog()
    for cls in BUILTIN:
        catalog.add(cls.info)
        strategy = cls()
        obj = {"apiVersion": cls.info.api_version, "kind": cls.info.kind,
               "metadata": {"name": "x", "namespace": "ns", "creationTimestamp": "2023-11-14T22:00:00Z"}}
        assert len(strategy.cells(obj, 1_700_000_000.0)) == len(strategy.columns), cls.__name__
        assert strategy.fields(obj)["metadata.name"] == "x"
    with pytest.raises(ValueError):
        catalog.add(PodStrategy.info)
    catalog.add_subresource(PodStrategy.info, Subresource("log", "Pod", ("get",)))
    assert [s.name for s in catalog.subresources(PodStrategy.info)] == ["status", "resize", "log"]
    assert catalog.group_versions()[0] == ("", "v1")


@pytest.mark.parametrize(("status", "deleting", "want"), [
    ({"phase": "Running"}, False, "Running"),
    ({"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}, False,
     "CrashLoopBackOff"),
    ({"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 3}}}]}, False, "ExitCode:3"),
    ({"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"reason": "Completed"}}}]}, False,
     "Completed"),
    ({"phase": "Running"}, True, "Terminating"),
    ({"phase": "Failed", "reason": "Evicted"}, False, "Evicted"),
])
def test_pod_status_column(status, deleting, want) -> None:
    meta = {"name": "p", **({"deletionTimestamp": "2024-01-01T00:00:00Z"} if deleting else {})}
    assert pod_status_reason({"metadata": meta, "status": status}) == want


def test_pod_cells_and_fields() -> None:
    pod = {"metadata": {"name": "p", "creationTimestamp": "2023-11-14T22:00:00Z"},
           "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1", "hostNetwork": True},
           "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
               {"ready": True, "restartCount": 2}, {"ready": False, "restartCount": 1}]}}
    cells = PodStrategy().cells(pod, 1_700_000_000.0 + 3600)
    assert cells[:4] == ["p", "1/2", "Running", 3] and cells[5:7] == ["10.0.0.5", "n1"]
    fields = PodStrategy().fields(pod)
    assert fields["spec.nodeName"] == "n1" and fields["spec.hostNetwork"] == "true" and fields["status.phase"] == "Running"


def test_node_cells() -> None:
    node = {"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.37.0"},
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}
    cells = NodeStrategy().cells(node, 0)
    assert cells[1:3] == ["Ready,SchedulingDisabled", "control-plane"] and cells[4:6] == ["v1.37.0", "10.0.0.1"]


def test_event_cells_and_rbac_validation() -> None:
    ev = {"metadata": {"name": "e"}, "type": "Warning", "reason": "BackOff", "message": "m",
          "involvedObject": {"kind": "Pod", "name": "p"}, "source": {"component": "kubelet", "host": "n1"}, "count": 4}
    cells = EventStrategy().cells(ev, 0)
    assert cells[1:4] == ["Warning", "BackOff", "pod/p"] and cells[5] == "kubelet, n1" and cells[8] == 4
    assert [e.path for e in RoleStrategy().validate({"rules": [{"resources": ["pods"]}]})] == ["rules[0].verbs", "rules[0].apiGroups"]
    assert [e.path for e in RoleStrategy().validate({"rules": [{"verbs": ["get"], "resources": ["pods"]}]})] == \
        ["rules[0].apiGroups"]
    binding = {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
               "subjects": [{"kind": "Robot", "name": "x"}]}
    assert [e.path for e in RoleBindingStrategy().validate(binding)] == ["subjects[0].kind"]
    changed = {**binding, "roleRef": {**binding["roleRef"], "name": "other"}}
    assert "roleRef" in [e.path for e in RoleBindingStrategy().validate_update(changed, binding)]


def test_protobuf_decoder_refuses_garbage() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from nodeagent.cluster.apiserver.protobuf import MAGIC, ProtobufError, decode

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=64))
    def run(tail: bytes) -> None:
        try:
            out = decode(MAGIC + tail)
        except ProtobufError:
            return
        assert isinstance(out, dict) and "kind" in out

    run()
    # a Namespace as kubectl encodes it: Unknown{typeMeta{v1, Namespace}, raw: Namespace{metadata{name}}}
    raw = b"\x0a\x06\x0a\x04demo"
    body = MAGIC + b"\x0a\x0f\x0a\x02v1\x12\x09Namespace" + b"\x12" + bytes([len(raw)]) + raw
    assert decode(body) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}
