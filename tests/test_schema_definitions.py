"""Schema lookup: by GVK and reference, walking paths, list and map merge semantics (1.37 definitions)."""

from __future__ import annotations

import pytest

from nodeagent.cluster.schema.definitions import Definitions, definitions, parse_path, semantics_at, walk
from nodeagent.cluster.schema.model import Gvk, ListType, MapType, Shape

POD = Gvk("", "v1", "Pod")


@pytest.fixture(scope="module")
def defs() -> Definitions:
    return definitions()


def test_loaded_once_and_kept() -> None:
    assert definitions() is definitions()
    assert len(definitions()) > 800


@pytest.mark.parametrize(
    ("gvk", "name"),
    [
        (Gvk("", "v1", "Pod"), "io.k8s.api.core.v1.Pod"),
        (Gvk("apps", "v1", "Deployment"), "io.k8s.api.apps.v1.Deployment"),
        (Gvk("coordination.k8s.io", "v1", "Lease"), "io.k8s.api.coordination.v1.Lease"),
        (Gvk("", "v1", "ResourceQuota"), "io.k8s.api.core.v1.ResourceQuota"),
        (Gvk("scheduling.k8s.io", "v1", "PriorityClass"), "io.k8s.api.scheduling.v1.PriorityClass"),
        (Gvk("", "v1", "DeleteOptions"), "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"),
    ],
)
def test_by_gvk(defs: Definitions, gvk: Gvk, name: str) -> None:
    node = defs.by_gvk(gvk)
    assert node is not None and node.name == name
    assert gvk in node.gvks


def test_unknown_gvk_and_ref(defs: Definitions) -> None:
    assert defs.by_gvk(Gvk("", "v1", "Nope")) is None
    assert defs.by_gvk(Gvk("apps", "v2", "Deployment")) is None
    assert defs.by_ref("io.k8s.api.core.v1.Nope") is None


@pytest.mark.parametrize(
    "ref",
    [
        "io.k8s.api.core.v1.PodSpec",
        "#/$defs/io.k8s.api.core.v1.PodSpec",
        "#/definitions/io.k8s.api.core.v1.PodSpec",
        "#/components/schemas/io.k8s.api.core.v1.PodSpec",
    ],
)
def test_by_ref_forms(defs: Definitions, ref: str) -> None:
    node = defs.by_ref(ref)
    assert node is not None and node.name == "io.k8s.api.core.v1.PodSpec"
    assert node.shape == Shape.STRUCT and "containers" in node.properties


@pytest.mark.parametrize(
    ("path", "shape", "name"),
    [
        ("spec", Shape.STRUCT, "io.k8s.api.core.v1.PodSpec"),
        ("spec.containers", Shape.LIST, None),
        ("spec.containers[0]", Shape.STRUCT, "io.k8s.api.core.v1.Container"),
        ("spec.containers[*].name", Shape.STRING, None),
        ("spec.containers[3].resources.limits", Shape.MAP, None),
        ("spec.containers[3].resources.limits.cpu", Shape.QUANTITY, "io.k8s.apimachinery.pkg.api.resource.Quantity"),
        ("spec.containers[0].ports[0].containerPort", Shape.INTEGER, None),
        ("spec.containers[0].livenessProbe.httpGet.port", Shape.INT_OR_STRING, "io.k8s.apimachinery.pkg.util.intstr.IntOrString"),
        ("metadata.labels", Shape.MAP, None),
        ("metadata.labels.app", Shape.STRING, None),
        ("metadata.creationTimestamp", Shape.STRING, "io.k8s.apimachinery.pkg.apis.meta.v1.Time"),
        ("metadata.managedFields[0].fieldsV1", Shape.ANY, "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1"),
        ("metadata.managedFields[0].fieldsV1.f:spec.anything", Shape.ANY, "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1"),
        ("spec.securityContext.runAsNonRoot", Shape.BOOLEAN, None),
    ],
)
def test_walk(defs: Definitions, path: str, shape: Shape, name: str | None) -> None:
    pod = defs.by_gvk(POD)
    assert pod is not None
    node = walk(pod, path)
    assert node is not None, path
    assert node.shape == shape
    assert node.target.name == name


@pytest.mark.parametrize(
    "path",
    ["nope", "spec.nope", "spec.containers.name", "spec[0]", "spec.containers[0].name.x", "metadata.labels[0]"],
)
def test_walk_off_the_schema(defs: Definitions, path: str) -> None:
    pod = defs.by_gvk(POD)
    assert pod is not None
    assert walk(pod, path) is None


def test_parse_path() -> None:
    assert parse_path("spec.containers[0].name") == ["spec", "containers", 0, "name"]
    assert parse_path("a[*][2]") == ["a", "*", 2]
    assert parse_path(["a", 1]) == ["a", 1]
    with pytest.raises(ValueError, match="invalid field path"):
        parse_path("a..b")
    with pytest.raises(ValueError, match="invalid field path"):
        parse_path("a[x]")


# (kind, path, patch strategies, merge key, list type, list map keys, map type), from the 1.37 API
SEMANTICS = [
    (POD, "spec.containers", ("merge",), "name", ListType.MAP, ("name",), MapType.GRANULAR),
    (POD, "spec.containers[0].env", ("merge",), "name", ListType.MAP, ("name",), MapType.GRANULAR),
    (POD, "spec.containers[0].ports", ("merge",), "containerPort", ListType.MAP, ("containerPort", "protocol"), MapType.GRANULAR),
    (POD, "spec.containers[0].volumeMounts", ("merge",), "mountPath", ListType.MAP, ("mountPath",), MapType.GRANULAR),
    (POD, "spec.volumes", ("merge", "retainKeys"), "name", ListType.MAP, ("name",), MapType.GRANULAR),
    (POD, "spec.tolerations", (), None, ListType.ATOMIC, (), MapType.GRANULAR),
    (POD, "spec.containers[0].args", (), None, ListType.ATOMIC, (), MapType.GRANULAR),
    (POD, "spec.containers[0].command", (), None, ListType.ATOMIC, (), MapType.GRANULAR),
    (POD, "metadata.finalizers", ("merge",), None, ListType.SET, (), MapType.GRANULAR),
    (POD, "metadata.ownerReferences", ("merge",), "uid", ListType.MAP, ("uid",), MapType.GRANULAR),
    (POD, "status.conditions", ("merge",), "type", ListType.MAP, ("type",), MapType.GRANULAR),
    (POD, "spec.imagePullSecrets", ("merge",), "name", ListType.MAP, ("name",), MapType.GRANULAR),
    (POD, "spec.nodeSelector", (), None, ListType.ATOMIC, (), MapType.ATOMIC),
    (POD, "metadata.labels", (), None, ListType.ATOMIC, (), MapType.GRANULAR),
    (POD, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", (), None, ListType.ATOMIC, (), MapType.ATOMIC),
    (Gvk("apps", "v1", "Deployment"), "spec.strategy", ("retainKeys",), None, ListType.ATOMIC, (), MapType.GRANULAR),
    (Gvk("apps", "v1", "Deployment"), "spec.selector", (), None, ListType.ATOMIC, (), MapType.ATOMIC),
    (Gvk("", "v1", "Node"), "spec.taints", (), None, ListType.ATOMIC, (), MapType.GRANULAR),
]


@pytest.mark.parametrize(("gvk", "path", "strategies", "merge_key", "list_type", "map_keys", "map_type"), SEMANTICS)
def test_merge_semantics(defs: Definitions, gvk: Gvk, path: str, strategies: tuple[str, ...], merge_key: str | None,
                         list_type: ListType, map_keys: tuple[str, ...], map_type: MapType) -> None:
    root = defs.by_gvk(gvk)
    assert root is not None
    sem = semantics_at(root, path)
    assert sem is not None
    assert (sem.patch_strategies, sem.merge_key, sem.list_type, sem.list_map_keys, sem.map_type) == (
        strategies, merge_key, list_type, map_keys, map_type)
    assert sem.strategic_merge == ("merge" in strategies)
    assert sem.retain_keys == ("retainKeys" in strategies)


def test_closure_of_pod_reaches_its_types_only(defs: Definitions) -> None:
    pod = defs.by_gvk(POD)
    assert pod is not None
    names = defs.closure([pod])
    assert "io.k8s.api.core.v1.Container" in names
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in names
    assert "io.k8s.api.apps.v1.Deployment" not in names
    assert names == sorted(names)


SMALL = {
    "x.Obj": {
        "type": ["object", "null"],
        "properties": {
            "spec": {"$ref": "#/$defs/x.Spec", "description": "the spec"},
            "raw": {"$ref": "#/$defs/io.k8s.apimachinery.pkg.runtime.RawExtension"},
        },
        "x-kubernetes-group-version-kind": [{"group": "x.io", "version": "v1", "kind": "Obj"}],
    },
    "x.Spec": {
        "type": "object",
        "properties": {
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "ios": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "crdIos": {"x-kubernetes-int-or-string": True},
            "q": {"oneOf": [{"type": ["string", "null"]}, {"type": ["number", "null"]}]},
            "emb": {"type": "object", "x-kubernetes-embedded-resource": True},
            "inline": {"type": "object"},
        },
    },
    "x.Empty": {"type": "object"},
    "io.k8s.apimachinery.pkg.runtime.RawExtension": {"type": "object"},
}


def test_small_definitions_shapes() -> None:
    d = Definitions.from_raw(SMALL)
    obj = d.by_gvk(Gvk("x.io", "v1", "Obj"))
    assert obj is not None and obj.nullable
    spec = walk(obj, "spec")
    assert spec is not None and spec.description == "the spec" and spec.target.name == "x.Spec"
    assert walk(obj, "raw").shape == Shape.ANY  # type: ignore[union-attr]
    assert walk(obj, "spec.free").shape == Shape.ANY  # type: ignore[union-attr]
    assert walk(obj, "spec.free").preserve_unknown_fields  # type: ignore[union-attr]
    assert walk(obj, "spec.ios").shape == Shape.INT_OR_STRING  # type: ignore[union-attr]
    assert walk(obj, "spec.crdIos").shape == Shape.INT_OR_STRING  # type: ignore[union-attr]
    q = walk(obj, "spec.q")
    assert q is not None and q.shape == Shape.QUANTITY and q.nullable
    emb = walk(obj, "spec.emb")
    assert emb is not None and emb.shape == Shape.STRUCT and emb.embedded_resource
    assert walk(obj, "spec.inline").shape == Shape.ANY  # type: ignore[union-attr]
    empty = d.by_ref("x.Empty")
    assert empty is not None and empty.shape == Shape.STRUCT and not empty.properties


def test_unknown_ref_is_a_source_error() -> None:
    from nodeagent.cluster.schema.loader import SchemaSourceError

    with pytest.raises(SchemaSourceError, match="unknown definition"):
        Definitions.from_raw({"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/nope"}}}})
