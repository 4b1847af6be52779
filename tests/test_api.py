"""HTTP API against a fake backend: every route, every error path, hostile bodies."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nodeagent.agent.api import AdmissionError, AlreadyExists, create_app
from nodeagent.agent.runtime import logs
from nodeagent.core.errors import FieldError, ValidationErrors

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}, "status": {}}


class FakeBackend:
    """Validates a little, like the real pod manager would, and records what it was asked."""

    def __init__(self, boom: str | None = "boom") -> None:
        self.boom = boom  # this pod name makes create_pod fail with a bug-like exception
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.deleted: list[tuple[str, str, int | None]] = []
        self.log_calls: list[tuple[str | None, bool]] = []
        self.fail = False
        self.log_dir = tempfile.TemporaryDirectory()

    def node(self) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("node status broke")
        return NODE

    def list_pods(self) -> list[dict[str, Any]]:
        return list(self.pods.values())

    def get_pod(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((ns, name))

    async def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest.get("metadata")
        errors = []
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            errors.append(FieldError("metadata.name", "Required value"))
            meta = {}
        ns = meta.get("namespace") or "default"
        if not isinstance(ns, str):
            errors.append(FieldError("metadata.namespace", "must be a string"))
        spec = manifest.get("spec")
        containers = spec.get("containers") if isinstance(spec, dict) else None
        if not isinstance(containers, list) or not containers:
            errors.append(FieldError("spec.containers", "Required value"))
        else:
            for i, c in enumerate(containers):
                if not isinstance(c, dict) or not c.get("name"):
                    errors.append(FieldError(f"spec.containers[{i}].name", "Required value"))
        if errors:
            raise ValidationErrors(errors)
        if meta["name"] == self.boom:
            raise RuntimeError("bug in the pod manager")
        if meta["name"] == "huge":
            raise AdmissionError("OutOfmemory", "Node didn't have enough resource: memory")
        if (ns, meta["name"]) in self.pods:
            raise AlreadyExists(ns, meta["name"])
        pod = {**manifest, "metadata": {**meta, "namespace": ns},
               "status": {"phase": "Pending"}}
        self.pods[(ns, meta["name"])] = pod
        return pod

    async def delete_pod(self, ns: str, name: str, grace: int | None) -> dict[str, Any] | None:
        self.deleted.append((ns, name, grace))
        return self.pods.pop((ns, name), None)

    def log_source(self, ns: str, name: str, container: str | None, previous: bool) -> logs.LogSource | None:
        self.log_calls.append((container, previous))
        if container == "both":
            raise FieldError("container", "a container name must be specified")
        if previous:
            raise logs.LogUnavailable(f'previous terminated container "app" in pod "{name}" not found')
        if (ns, name) not in self.pods or container not in (None, "app"):
            return None
        path = os.path.join(self.log_dir.name, f"{ns}_{name}.log")
        with open(path, "w") as f:
            f.write("one\ntwo\nthree\n")
        return logs.LogSource(path, lambda: False)


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
       "spec": {"containers": [{"name": "app", "image": "x", "command": ["sleep", "60"]}]}}


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
async def client(aiohttp_client: Any, backend: FakeBackend) -> TestClient:
    return await aiohttp_client(create_app(backend, max_body=64 * 1024))


async def status_of(resp: Any, code: int, reason: str) -> dict[str, Any]:
    assert resp.status == code, await resp.text()
    body = await resp.json()
    assert (body["kind"], body["apiVersion"], body["status"]) == ("Status", "v1", "Failure")
    assert (body["code"], body["reason"]) == (code, reason)
    assert body["message"]
    return body


async def test_healthz_node_and_empty_list(client: TestClient) -> None:
    r = await client.get("/healthz")
    assert (r.status, await r.text()) == (200, "ok")
    assert await (await client.get("/api/v1/node")).json() == NODE
    r = await client.get("/api/v1/pods")
    assert await r.json() == {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}


async def test_create_get_list_delete(client: TestClient, backend: FakeBackend) -> None:
    r = await client.post("/api/v1/pods", json=POD)
    assert r.status == 201
    created = await r.json()
    assert created["metadata"] == {"name": "web", "namespace": "default",
                                   "annotations": {"kubernetes.io/config.source": "api"}}
    assert created["status"]["phase"] == "Pending"
    assert (await (await client.get("/api/v1/namespaces/default/pods/web")).json()) == created
    assert [p["metadata"]["name"] for p in (await (await client.get("/api/v1/pods")).json())
            ["items"]] == ["web"]
    assert (await (await client.get("/api/v1/namespaces/other/pods")).json())["items"] == []
    r = await client.delete("/api/v1/namespaces/default/pods/web?gracePeriodSeconds=5")
    assert r.status == 200 and (await r.json())["metadata"]["name"] == "web"
    assert backend.deleted == [("default", "web", 5)]
    r = await client.delete("/api/v1/namespaces/default/pods/web")
    await status_of(r, 404, "NotFound")
    assert backend.deleted[-1] == ("default", "web", None)


@pytest.mark.parametrize("ctype", ["application/yaml", "text/yaml",
                                   "application/yaml; charset=utf-8"])
async def test_create_from_yaml(client: TestClient, ctype: str) -> None:
    r = await client.post("/api/v1/pods", data=yaml.safe_dump(POD),
                          headers={"Content-Type": ctype})
    assert r.status == 201, await r.text()
    assert (await r.json())["spec"] == POD["spec"]


async def test_namespaced_create(client: TestClient) -> None:
    r = await client.post("/api/v1/namespaces/team-a/pods", json=POD)
    assert r.status == 201 and (await r.json())["metadata"]["namespace"] == "team-a"
    same = {**POD, "metadata": {"name": "w2", "namespace": "team-a"}}
    assert (await client.post("/api/v1/namespaces/team-a/pods", json=same)).status == 201
    other = {**POD, "metadata": {"name": "w3", "namespace": "team-b"}}
    body = await status_of(await client.post("/api/v1/namespaces/team-a/pods", json=other),
                           400, "BadRequest")
    assert "does not match" in body["message"]


async def test_client_cannot_claim_static_or_mirror_source(client: TestClient) -> None:
    claims = {"kubernetes.io/config.source": "file", "kubernetes.io/config.mirror": "x",
              "kubernetes.io/config.hash": "y", "nodeagent.io/server-uid": "z", "team": "a"}
    r = await client.post("/api/v1/pods", json={**POD, "metadata": {"name": "sneaky",
                                                                    "annotations": claims}})
    assert (await r.json())["metadata"]["annotations"] == {
        "kubernetes.io/config.source": "api", "team": "a"}


async def test_invalid_pod_names_the_field(client: TestClient) -> None:
    bad = {**POD, "spec": {"containers": [{"image": "x"}]}}
    body = await status_of(await client.post("/api/v1/pods", json=bad), 422, "Invalid")
    assert body["details"]["causes"] == [{"reason": "FieldValueInvalid",
                                          "field": "spec.containers[0].name",
                                          "message": "Required value"}]
    assert "spec.containers[0].name: Required value" in body["message"]
    assert body["details"]["name"] == "web"


async def test_admission_rejection_is_422(client: TestClient) -> None:
    huge = {**POD, "metadata": {"name": "huge"}}
    body = await status_of(await client.post("/api/v1/pods", json=huge), 422, "OutOfmemory")
    assert "memory" in body["message"]


async def test_duplicate_is_409(client: TestClient) -> None:
    assert (await client.post("/api/v1/pods", json=POD)).status == 201
    body = await status_of(await client.post("/api/v1/pods", json=POD), 409, "AlreadyExists")
    assert body["message"] == 'pods "web" already exists in namespace "default"'


@pytest.mark.parametrize("data,ctype,needle", [
    (b'{"metadata": ', "application/json", "invalid JSON"),
    (b"\xff\xfe\x00garbage", "application/json", "not UTF-8"),
    (b"[1, 2]", "application/json", "not a JSON array"),
    (b'"a string"', "application/json", "not a JSON string"),
    (b"null", "application/json", "not a JSON null"),
    (b"", "application/json", "empty"),
    (b'{"a": NaN}', "application/json", "NaN"),
    (b"metadata: [unclosed", "application/yaml", "invalid YAML"),
    (b"a: 1\n---\nb: 2\n", "application/yaml", "single document"),
    (b"- just\n- a list\n", "application/yaml", "not a JSON array"),
    (b"a: !!binary aGVsbG8=\n", "application/yaml", "bytes"),
    (b"a: !!python/object:os.system {}\n", "application/yaml", "invalid YAML"),
    (b"[" * 30_000 + b"]" * 30_000, "application/json", "nesting"),
    (b"[" * 20_000 + b"]" * 20_000, "application/yaml", "nesting"),
    (b'{"a":' * 70 + b"1" + b"}" * 70, "application/json", "nesting"),
    (b"a: [" + b"1," * 25_000 + b"1]", "application/yaml", "more than 20000 nodes"),
    (b"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b, *b, *b]\n", "text/yaml",
     "aliases are not allowed"),
])
async def test_malformed_bodies_are_400(client: TestClient, data: bytes, ctype: str,
                                        needle: str) -> None:
    r = await client.post("/api/v1/pods", data=data, headers={"Content-Type": ctype})
    body = await status_of(r, 400, "BadRequest")
    assert needle in body["message"]


async def test_yaml_timestamps_become_strings(client: TestClient) -> None:
    doc = yaml.safe_dump(POD) + "extra:\n  when: 2024-01-02T03:04:05Z\n  1: one\n"
    r = await client.post("/api/v1/pods", data=doc, headers={"Content-Type": "text/yaml"})
    assert r.status == 201
    assert (await r.json())["extra"] == {"when": "2024-01-02T03:04:05+00:00", "1": "one"}


async def test_body_size_limit_is_413(aiohttp_client: Any, backend: FakeBackend) -> None:
    client = await aiohttp_client(create_app(backend))  # the default 1 MiB limit
    pod = {**POD, "metadata": {"name": "web", "annotations": {"pad": "x" * (1 << 20)}}}
    r = await client.post("/api/v1/pods", json=pod)
    await status_of(r, 413, "RequestEntityTooLarge")
    assert backend.pods == {}
    assert (await client.get("/healthz")).status == 200


async def test_get_unknown_pod_is_404(client: TestClient) -> None:
    body = await status_of(await client.get("/api/v1/namespaces/default/pods/nope"),
                           404, "NotFound")
    assert body["details"] == {"name": "nope", "kind": "pods"}


@pytest.mark.parametrize("query", ["-1", "abc", "1.5", "٣", "99999999999999999999"])
async def test_bad_grace_period_is_400(client: TestClient, backend: FakeBackend,
                                       query: str) -> None:
    r = await client.delete("/api/v1/namespaces/default/pods/web",
                            params={"gracePeriodSeconds": query})
    body = await status_of(r, 400, "BadRequest")
    assert "gracePeriodSeconds" in body["message"]
    assert backend.deleted == []


async def test_logs(client: TestClient, backend: FakeBackend) -> None:
    await client.post("/api/v1/pods", json=POD)
    base = "/api/v1/namespaces/default/pods/web/log"
    r = await client.get(base)
    assert (r.status, r.content_type, await r.text()) == (200, "text/plain", "one\ntwo\nthree\n")
    r = await client.get(base, params={"container": "app", "tailLines": "2"})
    assert await r.text() == "two\nthree\n"
    assert backend.log_calls[-1] == ("app", False)
    r = await client.get(base, params={"limitBytes": "6"})
    assert (r.status, await r.text()) == (200, "one\ntw")
    r = await client.get(base, params={"tailLines": "2", "limitBytes": "100", "follow": "true"})
    assert await r.text() == "two\nthree\n"  # the run is over: following ends at its end
    body = await status_of(await client.get(base, params={"previous": "true"}), 400, "BadRequest")
    assert body["message"] == 'previous terminated container "app" in pod "web" not found'
    path = os.path.join(backend.log_dir.name, "default_web.log")  # times: a side file beside the log
    with open(path + ".times", "w") as f:
        f.write(f"4 {1_700_000_000 * 10**9}\n8 {1_700_000_001 * 10**9 + 5}\n")
    r = await client.get(base, params={"timestamps": "true"})  # "three" is not marked: the file's mtime
    first, second, third = (await r.text()).splitlines()
    assert (first, second) == ("2023-11-14T22:13:20.000000000Z one", "2023-11-14T22:13:21.000000005Z two")
    assert third.endswith("Z three") and third[:4] >= "2026"
    r = await client.get(base, params={"sinceTime": "2023-11-14T22:13:20.5Z"})
    assert await r.text() == "two\nthree\n"
    r = await client.get(base, params={"sinceSeconds": "10", "tailLines": "1"})
    assert await r.text() == "three\n"
    for bad in ({"limitBytes": "0"}, {"follow": "maybe"}, {"timestamps": "maybe"}, {"sinceSeconds": "x"},
                {"sinceTime": "yesterday"}):
        await status_of(await client.get(base, params=bad), 400, "BadRequest")
    await status_of(await client.get(base, params={"container": "nope"}), 404, "NotFound")
    await status_of(await client.get(base, params={"tailLines": "-3"}), 400, "BadRequest")
    body = await status_of(await client.get(base, params={"container": "both"}), 400,
                           "BadRequest")
    assert body["message"] == "container: a container name must be specified"
    assert await (await client.get(base, params={"tailLines": "0"})).text() == ""
    await status_of(await client.get("/api/v1/namespaces/default/pods/x/log"), 404, "NotFound")


async def test_unknown_route_and_method(client: TestClient) -> None:
    await status_of(await client.get("/api/v2/whatever"), 404, "NotFound")
    await status_of(await client.put("/api/v1/pods", json=POD), 405, "MethodNotAllowed")


async def test_unexpected_exception_is_500_and_server_survives(client: TestClient,
                                                               backend: FakeBackend) -> None:
    with capture_logs() as logs:
        r = await client.post("/api/v1/pods", json={**POD, "metadata": {"name": "boom"}})
        await status_of(r, 500, "InternalError")
        backend.fail = True
        await status_of(await client.get("/api/v1/node"), 500, "InternalError")
    assert [e["event"] for e in logs] == ["api_unhandled_error"] * 2
    assert "bug in the pod manager" not in (await r.text())
    assert (await client.post("/api/v1/pods", json=POD)).status == 201


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                             max_size=4),
    max_leaves=20)
names = st.sampled_from(["web", "huge", "x", ""]) | st.text(max_size=10) | json_values
pod_like = st.fixed_dictionaries({
    "metadata": st.one_of(json_values, st.fixed_dictionaries(
        {"name": names, "namespace": st.sampled_from([None, "", "default", "x"]) | json_values})),
    "spec": st.one_of(json_values, st.fixed_dictionaries(
        {"containers": st.lists(st.one_of(json_values, st.fixed_dictionaries(
            {"name": names})), min_size=1, max_size=3)})),
})
bodies = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    json_values.map(lambda v: json.dumps(v).encode()),
    pod_like.map(lambda v: json.dumps(v).encode()),
    pod_like.map(lambda v: yaml.safe_dump(v).encode()),
    st.sampled_from(["web", "huge", "a.b"]).map(
        lambda n: json.dumps({**POD, "metadata": {"name": n}}).encode()),
)
ctypes = st.sampled_from(["application/json", "application/yaml", "text/yaml", "text/plain",
                          "", "application/x-www-form-urlencoded"])
paths = st.sampled_from(["/api/v1/pods", "/api/v1/namespaces/default/pods",
                         "/api/v1/namespaces/x/pods"])


async def _post(app: web.Application, path: str, body: bytes, ctype: str,
                grace: str) -> tuple[int, int, int]:
    async with TestClient(TestServer(app)) as c:
        headers = {"Content-Type": ctype} if ctype else {}
        r1 = await c.post(path, data=body, headers=headers)
        r2 = await c.post(path, data=body, headers=headers)  # again: 409 when r1 was 201
        r3 = await c.delete("/api/v1/namespaces/default/pods/x",
                            params={"gracePeriodSeconds": grace})
        return r1.status, r2.status, r3.status


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=paths, body=bodies, ctype=ctypes, grace=st.text(max_size=6))
def test_random_bodies_never_5xx(path: str, body: bytes, ctype: str, grace: str) -> None:
    codes = asyncio.run(_post(create_app(FakeBackend(boom=None)), path, body, ctype, grace))
    event(f"POST -> {codes[0]}, {codes[1]}")
    assert all(c < 500 for c in codes), codes
