"""OpenAPI v3 documents: the index with content hashes, per group-version documents with the paths,
extensions and parameters kubectl reads, and schemas in OpenAPI 3.0 form whose references resolve."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from nodeagent.cluster.schema.definitions import Definitions, definitions
from nodeagent.cluster.schema.model import Gvk
from nodeagent.cluster.schema.openapi import (
    OpenAPIError,
    ServedResource,
    Subresource,
    build_documents,
    openapi_documents,
)

STATUS = Subresource("status", ("get", "update", "patch"))
SERVED = (
    ServedResource("", "v1", "Pod", "pods", True, subresources=(
        STATUS, Subresource("binding", ("create",), Gvk("", "v1", "Binding")),
        Subresource("eviction", ("create",), Gvk("policy", "v1", "Eviction")), Subresource("log", ("get",)),
        Subresource("exec", ("get", "create"), Gvk("", "v1", "PodExecOptions"), connect=True))),
    ServedResource("", "v1", "Node", "nodes", False, subresources=(STATUS,)),
    ServedResource("", "v1", "Namespace", "namespaces", False, subresources=(STATUS,)),
    ServedResource("", "v1", "ConfigMap", "configmaps", True),
    ServedResource("", "v1", "Secret", "secrets", True),
    ServedResource("", "v1", "ResourceQuota", "resourcequotas", True, subresources=(STATUS,)),
    ServedResource("", "v1", "LimitRange", "limitranges", True),
    ServedResource("", "v1", "Event", "events", True),
    ServedResource("", "v1", "ServiceAccount", "serviceaccounts", True),
    ServedResource("coordination.k8s.io", "v1", "Lease", "leases", True),
    ServedResource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False,
                   verbs=("get", "list", "watch", "create", "update", "patch", "delete")),
    ServedResource("apps", "v1", "Deployment", "deployments", True, subresources=(
        STATUS, Subresource("scale", ("get", "update", "patch"), Gvk("autoscaling", "v1", "Scale")))),
)


@pytest.fixture(scope="module")
def docs() -> Any:
    return openapi_documents(SERVED)


def load(docs: Any, gv: str) -> dict[str, Any]:
    doc = docs.get(gv)
    assert doc is not None, gv
    return json.loads(doc.body)


def test_index_points_at_every_group_version_with_its_content_hash(docs: Any) -> None:
    index = json.loads(docs.index.body)
    assert sorted(index["paths"]) == ["api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1", "apis/scheduling.k8s.io/v1"]
    for gv, entry in index["paths"].items():
        doc = docs.get(gv)
        assert doc.hash == hashlib.sha512(doc.body).hexdigest().upper()
        assert entry == {"serverRelativeURL": f"/openapi/v3/{gv}?hash={doc.hash}"}
        assert doc.etag == f'"{doc.hash}"'
    assert docs.get("/api/v1/") is docs.get("api/v1")
    assert docs.get("apis/nope/v1") is None


def test_built_once_per_set_of_resources_in_any_order(docs: Any) -> None:
    assert openapi_documents(reversed(SERVED)) is docs
    assert openapi_documents(SERVED[:3]) is not docs


def test_hash_changes_with_the_content() -> None:
    a = openapi_documents(SERVED[:2])
    b = openapi_documents(SERVED[:3])
    assert a.get("api/v1").hash != b.get("api/v1").hash


def test_patch_of_every_kind_has_its_gvk_and_the_field_validation_parameter(docs: Any) -> None:
    for r in SERVED:
        doc = load(docs, r.group_version_path)
        patches = [op["patch"] for op in doc["paths"].values() if "patch" in op
                   and op["patch"]["x-kubernetes-group-version-kind"] == {"group": r.group, "version": r.version, "kind": r.kind}]
        assert patches, r.kind
        for patch in patches:
            assert {"name": "fieldValidation", "in": "query"}.items() <= next(
                p for p in patch["parameters"] if p["name"] == "fieldValidation").items()
            assert patch["x-kubernetes-action"] == "patch"
            assert sorted(patch["requestBody"]["content"]) == [
                "application/apply-patch+yaml", "application/json-patch+json",
                "application/merge-patch+json", "application/strategic-merge-patch+json"]


def test_pod_paths_and_actions(docs: Any) -> None:
    paths = load(docs, "api/v1")["paths"]
    ns = "/api/v1/namespaces/{namespace}/pods"
    assert {m: op["x-kubernetes-action"] for m, op in paths[ns].items() if m != "parameters"} == {
        "get": "list", "post": "post", "delete": "deletecollection"}
    assert {m: op["x-kubernetes-action"] for m, op in paths[ns + "/{name}"].items() if m != "parameters"} == {
        "get": "get", "put": "put", "patch": "patch", "delete": "delete"}
    assert paths["/api/v1/pods"]["get"]["operationId"] == "listCoreV1PodForAllNamespaces"
    assert paths[ns + "/{name}"]["patch"]["operationId"] == "patchCoreV1NamespacedPod"
    assert set(paths[ns + "/{name}/status"]) == {"get", "put", "patch", "parameters"}
    assert paths[ns + "/{name}/binding"]["post"]["x-kubernetes-group-version-kind"]["kind"] == "Binding"
    assert paths[ns + "/{name}/eviction"]["post"]["x-kubernetes-group-version-kind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert paths[ns + "/{name}/exec"]["get"]["x-kubernetes-action"] == "connect"
    assert "text/plain" in paths[ns + "/{name}/log"]["get"]["responses"]["200"]["content"]
    assert "/api/v1/nodes/{name}" in paths and "/api/v1/namespaces/{namespace}/nodes" not in paths
    listing = paths[ns]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {"watch", "labelSelector", "fieldSelector", "limit", "continue",
                                                           "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "allowWatchBookmarks"}
    assert listing["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/io.k8s.api.core.v1.PodList"}


def test_verbs_limit_the_operations(docs: Any) -> None:
    paths = load(docs, "apis/scheduling.k8s.io/v1")["paths"]
    assert "delete" not in paths["/apis/scheduling.k8s.io/v1/priorityclasses"]
    scale = load(docs, "apis/apps/v1")["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]
    assert scale["patch"]["x-kubernetes-group-version-kind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        out = [value["$ref"]] if "$ref" in value else []
        return out + [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def _types(value: Any) -> list[Any]:
    if isinstance(value, dict):
        out = [value["type"]] if "type" in value and not isinstance(value["type"], dict) else []
        return out + [t for v in value.values() for t in _types(v)]
    if isinstance(value, list):
        return [t for v in value for t in _types(v)]
    return []


@pytest.mark.parametrize("gv", ["api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1", "apis/scheduling.k8s.io/v1"])
def test_every_reference_resolves_and_types_are_openapi_3_0(docs: Any, gv: str) -> None:
    doc = load(docs, gv)
    schemas = doc["components"]["schemas"]
    for ref in _refs(doc):
        assert ref.startswith("#/components/schemas/") and ref.removeprefix("#/components/schemas/") in schemas, ref
    assert all(isinstance(t, str) and t != "null" for t in _types(schemas))
    assert doc["openapi"] == "3.0.0"


def test_schemas_are_the_closure_of_the_served_kinds(docs: Any) -> None:
    core = load(docs, "api/v1")["components"]["schemas"]
    for name in ("io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.PodList", "io.k8s.api.core.v1.Container",
                 "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
                 "io.k8s.apimachinery.pkg.apis.meta.v1.Status", "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
                 "io.k8s.api.core.v1.Binding", "io.k8s.api.policy.v1.Eviction"):
        assert name in core, name
    assert "io.k8s.api.apps.v1.Deployment" not in core
    assert "io.k8s.api.coordination.v1.Lease" not in core
    apps = load(docs, "apis/apps/v1")["components"]["schemas"]
    assert "io.k8s.api.autoscaling.v1.Scale" in apps and "io.k8s.api.core.v1.PodSpec" in apps


def test_schema_form_kubectl_reads(docs: Any) -> None:
    s = load(docs, "api/v1")["components"]["schemas"]
    pod = s["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    assert pod["description"].startswith("Pod is a collection of containers")
    assert "enum" not in pod["properties"]["apiVersion"]
    assert pod["properties"]["spec"] == {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}],
                                         "description": pod["properties"]["spec"]["description"]}
    containers = s["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name" and containers["x-kubernetes-patch-strategy"] == "merge"
    assert containers["x-kubernetes-list-type"] == "map" and containers["items"] == {"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}
    assert "nullable" not in containers  # required: not nullable in the source
    assert s["io.k8s.api.core.v1.PodSpec"]["properties"]["nodeName"] == {
        "type": "string", "nullable": True, "description": s["io.k8s.api.core.v1.PodSpec"]["properties"]["nodeName"]["description"]}
    assert s["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["type"] == "string"
    assert s["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"] == "int-or-string"
    assert s["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"] == "string"
    assert s["io.k8s.api.core.v1.Secret"]["properties"]["data"]["additionalProperties"]["format"] == "byte"
    assert s["io.k8s.apimachinery.pkg.runtime.RawExtension"]["type"] == "object"


def test_a_resource_without_a_schema_is_refused() -> None:
    with pytest.raises(OpenAPIError, match="no schema for example.com/v1, Kind=Widget"):
        build_documents([ServedResource("example.com", "v1", "Widget", "widgets", True)], definitions())


def test_build_from_small_definitions() -> None:
    defs = Definitions.from_raw({
        "x.W": {"type": "object", "properties": {"spec": {"type": ["object", "null"], "properties": {"n": {"type": ["integer", "null"], "format": "int32"}}}},
                "x-kubernetes-group-version-kind": [{"group": "x.io", "version": "v1", "kind": "W"}]},
    })
    docs = build_documents([ServedResource("x.io", "v1", "W", "ws", False)], defs)
    doc = json.loads(docs.get("apis/x.io/v1").body)
    assert doc["components"]["schemas"]["x.W"]["properties"]["spec"]["properties"]["n"] == {"type": "integer", "format": "int32", "nullable": True}
    assert set(doc["paths"]) == {"/apis/x.io/v1/ws", "/apis/x.io/v1/ws/{name}"}
