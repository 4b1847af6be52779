"""The cluster API over HTTP (aiohttp test server, in-memory agents): every route, Kubernetes
Status errors with the API server's wording, YAML bodies, and the agent's auth rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from test_scheduler_support import FakeAgents, make_service, node_report, pod_manifest, settle

from nodeagent.cluster.apiserver.app import create_app
from nodeagent.cluster.server import SchedulerService

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PCS = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[tuple[TestClient, SchedulerService, FakeAgents]]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    fake = FakeAgents()
    for n in ("n0", "n1"):
        fake.add_node(n)
    svc = make_service(fake, authentication={"tokenFile": str(token)})
    await svc.start(serve=False)
    client = TestClient(TestServer(create_app(svc)))
    await client.start_server()
    try:
        yield client, svc, fake
    finally:
        await client.close()
        await svc.stop()


async def call(client: TestClient, method: str, path: str, body: Any = None, *, status: int,
               yaml_body: bool = False, headers: dict[str, str] | None = None) -> dict[str, Any]:
    kw: dict[str, Any] = {"headers": {**AUTH, **(headers or {})}}
    if body is not None:
        if yaml_body:
            kw["data"] = yaml.safe_dump(body)
            kw["headers"]["Content-Type"] = "application/yaml"
        else:
            kw["json"] = body
    resp = await client.request(method, path, **kw)
    data = await resp.json()
    assert resp.status == status, data
    return data


def status_of(data: dict[str, Any]) -> tuple[int, str, str]:
    assert data["kind"] == "Status" and data["status"] == "Failure"
    return data["code"], data["reason"], data["message"]


async def test_namespaces(env: Any) -> None:
    client, svc, _ = env
    listed = await call(client, "GET", "/api/v1/namespaces", status=200)
    assert [n["metadata"]["name"] for n in listed["items"]] == ["default", "kube-system"]
    ns = await call(client, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": "team"}}, status=201)
    assert ns["status"]["phase"] == "Active" and ns["metadata"]["uid"]
    dup = await call(client, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}}, status=409)
    assert status_of(dup) == (409, "AlreadyExists", 'namespaces "team" already exists')
    bad = await call(client, "POST", "/api/v1/namespaces", {"metadata": {"name": "Team_1"}}, status=422)
    assert bad["reason"] == "Invalid" and bad["details"]["causes"][0]["field"] == "metadata.name"
    assert status_of(await call(client, "DELETE", "/api/v1/namespaces/default", status=403))[2] == \
        'namespaces "default" is forbidden: this namespace may not be deleted'
    await call(client, "POST", "/api/v1/namespaces/team/pods", pod_manifest("p"), status=201)
    await settle(svc)
    gone = await call(client, "DELETE", "/api/v1/namespaces/team", status=200)
    assert gone["status"]["phase"] == "Terminating"
    refused = await call(client, "POST", "/api/v1/namespaces/team/pods", pod_manifest("q"), status=403)
    assert "being terminated" in refused["message"]
    await settle(svc)
    await svc.finish_namespaces()
    assert status_of(await call(client, "GET", "/api/v1/namespaces/team", status=404))[2] == \
        'namespaces "team" not found'


async def test_pods(env: Any) -> None:
    client, svc, fake = env
    created = await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("web"), status=201)
    assert created["metadata"]["uid"] and created["status"]["phase"] == "Pending"
    assert created["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    await call(client, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}}, status=201)
    await call(client, "POST", "/api/v1/namespaces/team/pods", pod_manifest("db", cpu="300m"),
               status=201, yaml_body=True)
    gen = await call(client, "POST", "/api/v1/namespaces/team/pods",
                     {**pod_manifest("x"), "metadata": {"generateName": "job-"}}, status=201)
    assert gen["metadata"]["name"].startswith("job-") and len(gen["metadata"]["name"]) == 9
    await settle(svc)
    every = await call(client, "GET", "/api/v1/pods", status=200)
    assert [p["metadata"]["namespace"] + "/" + p["metadata"]["name"] for p in every["items"]] == \
        ["default/web", "team/db", gen["metadata"]["namespace"] + "/" + gen["metadata"]["name"]]
    team = await call(client, "GET", "/api/v1/namespaces/team/pods", status=200)
    assert team["kind"] == "PodList" and len(team["items"]) == 2
    web = await call(client, "GET", "/api/v1/namespaces/default/pods/web", status=200)
    assert web["spec"]["nodeName"] in ("n0", "n1") and web["status"]["phase"] == "Running"
    assert fake.where("default/web") == [web["spec"]["nodeName"]]
    deleted = await call(client, "DELETE", "/api/v1/namespaces/default/pods/web?gracePeriodSeconds=3", status=200)
    assert deleted["metadata"]["deletionGracePeriodSeconds"] == 3
    await settle(svc)
    missing = await call(client, "GET", "/api/v1/namespaces/default/pods/web", status=404)
    assert status_of(missing) == (404, "NotFound", 'pods "web" not found')
    assert missing["details"] == {"name": "web", "kind": "pods"}


async def test_pod_errors(env: Any) -> None:
    client, _, _ = env
    r = await call(client, "POST", "/api/v1/namespaces/nope/pods", pod_manifest("a"), status=404)
    assert r["message"] == 'namespaces "nope" not found'
    r = await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("a", namespace="other"), status=400)
    assert "does not match the namespace sent on the request (default)" in r["message"]
    bad = pod_manifest("a")
    bad["spec"]["containers"][0]["name"] = "Bad_Name"
    r = await call(client, "POST", "/api/v1/namespaces/default/pods", bad, status=422)
    assert r["message"].startswith('Pod "a" is invalid: spec.containers[0].name: Invalid value: "Bad_Name"')
    r = await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("a", priority_class="gold"), status=403)
    assert r["message"] == 'pods "a" is forbidden: no PriorityClass with name gold was found'
    r = await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("a", nodeName="n0"), status=422)
    assert r["details"]["causes"][0]["field"] == "spec.nodeName"
    r = await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("a", priority=7), status=403)
    assert "the integer value of priority (7) must not be provided in pod spec" in r["message"]
    await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("a"), status=201)
    r = await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("a"), status=409)
    assert status_of(r) == (409, "AlreadyExists", 'pods "a" already exists')
    r = await call(client, "POST", "/api/v1/namespaces/default/pods", None, status=400)
    assert r["message"] == "request body is empty"
    r = await call(client, "DELETE", "/api/v1/namespaces/default/pods/a?gracePeriodSeconds=-1", status=400)
    assert "gracePeriodSeconds" in r["message"]
    r = await call(client, "GET", "/api/v1/nothing", status=404)
    assert r["kind"] == "Status"


async def test_nodes_and_cordon(env: Any) -> None:
    client, svc, _ = env
    nodes = await call(client, "GET", "/api/v1/nodes", status=200)
    assert [n["metadata"]["name"] for n in nodes["items"]] == ["n0", "n1"]
    n0 = await call(client, "GET", "/api/v1/nodes/n0", status=200)
    assert n0["status"]["allocatable"]["cpu"] == "1" and n0["spec"] == {}
    cordoned = await call(client, "PATCH", "/api/v1/nodes/n0", {"spec": {"unschedulable": True}}, status=200,
                          headers={"Content-Type": "application/merge-patch+json"})
    assert cordoned["spec"] == {"unschedulable": True, "taints": [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}
    await call(client, "POST", "/api/v1/nodes/n1/cordon", status=200)
    await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("p"), status=201)
    await settle(svc)
    assert "2 node(s) were unschedulable" in svc.state.pods["default/p"].status["conditions"][0]["message"]
    assert (await call(client, "POST", "/api/v1/nodes/n1/uncordon", status=200))["spec"] == {}
    await settle(svc, rounds=10)
    assert svc.state.pods["default/p"].node == "n1"
    r = await call(client, "PATCH", "/api/v1/nodes/n0", {"spec": {"taints": []}}, status=422)
    assert "only spec.unschedulable" in r["message"]
    assert status_of(await call(client, "GET", "/api/v1/nodes/zz", status=404))[2] == 'nodes "zz" not found'


async def test_node_status_registration(env: Any) -> None:
    client, svc, fake = env
    fake.add_node("n7")
    report = node_report("n7", cpu="4")
    report["metadata"]["annotations"] = {"nodeagent.io/api-url": "http://127.0.0.1:1"}
    node = await call(client, "POST", "/api/v1/nodes/n7/status", report, status=200)
    assert node["metadata"]["annotations"]["nodeagent.io/api-url"] == "http://127.0.0.1:1"
    assert svc.state.table.spec("n7").ready
    r = await call(client, "PUT", "/api/v1/nodes/other/status", report, status=422)
    assert "metadata.name" in r["message"]
    resp = await client.post("/api/v1/nodes/n7/status", json=report)  # no token
    assert resp.status == 401


async def test_priority_classes(env: Any) -> None:
    client, svc, _ = env
    listed = await call(client, "GET", PCS, status=200)
    assert {(p["metadata"]["name"], p["value"]) for p in listed["items"]} == {
        ("system-cluster-critical", 2000000000), ("system-node-critical", 2000001000)}
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "base"},
            "value": 100, "globalDefault": True}
    created = await call(client, "POST", PCS, body, status=201)
    assert created["globalDefault"] is True and created["metadata"]["uid"]
    assert status_of(await call(client, "POST", PCS, body, status=409))[0] == 409
    r = await call(client, "POST", PCS, {**body, "metadata": {"name": "huge"}, "value": 2000000001,
                                         "globalDefault": False}, status=422)
    assert "maximum allowed value of a user defined priority is 1000000000" in r["message"]
    r = await call(client, "POST", PCS, {**body, "metadata": {"name": "second"}}, status=403)
    assert "base is already marked as default" in r["message"]
    pod = await call(client, "POST", "/api/v1/namespaces/default/pods", pod_manifest("p"), status=201)
    assert (pod["spec"]["priority"], pod["spec"]["priorityClassName"]) == (100, "base")
    assert svc.state.pods["default/p"].info.priority == 100
    r = await call(client, "DELETE", PCS + "/system-node-critical", status=403)
    assert "is a system priority class" in r["message"]
    await call(client, "DELETE", PCS + "/base", status=200)
    await call(client, "GET", PCS + "/base", status=404)


async def test_resource_quotas(env: Any) -> None:
    client, svc, _ = env
    await call(client, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}}, status=201)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
             "spec": {"hard": {"requests.cpu": "500m", "pods": "3", "count/replicasets": "2"}}}
    q = await call(client, "POST", "/api/v1/namespaces/team/resourcequotas", quota, status=201)
    assert q["status"]["used"] == {"requests.cpu": "0", "pods": "0", "count/replicasets": "0"}
    await call(client, "POST", "/api/v1/namespaces/team/pods", pod_manifest("a", cpu="300m"), status=201)
    r = await call(client, "POST", "/api/v1/namespaces/team/pods", pod_manifest("b", cpu="300m"), status=403)
    assert status_of(r) == (403, "Forbidden", 'pods "b" is forbidden: exceeded quota: compute, requested: '
                            "requests.cpu=300m, used: requests.cpu=300m, limited: requests.cpu=500m")
    r = await call(client, "POST", "/api/v1/namespaces/team/pods", pod_manifest("c", cpu=None), status=403)
    assert r["message"] == 'pods "c" is forbidden: failed quota: compute: must specify requests.cpu for: c'
    await call(client, "POST", "/api/v1/namespaces/team/pods", pod_manifest("d", cpu="200m"), status=201)
    got = await call(client, "GET", "/api/v1/namespaces/team/resourcequotas/compute", status=200)
    assert got["status"] == {"hard": {"requests.cpu": "500m", "pods": "3", "count/replicasets": "2"},
                             "used": {"requests.cpu": "500m", "pods": "2", "count/replicasets": "0"}}
    await settle(svc)
    await call(client, "DELETE", "/api/v1/namespaces/team/pods/a", status=200)
    got = await call(client, "GET", "/api/v1/namespaces/team/resourcequotas/compute", status=200)
    assert got["status"]["used"]["requests.cpu"] == "200m"  # a terminating pod no longer counts
    quota["spec"]["hard"]["pods"] = "1"
    replaced = await call(client, "PUT", "/api/v1/namespaces/team/resourcequotas/compute", quota, status=200)
    assert replaced["status"]["hard"]["pods"] == "1" and replaced["metadata"]["uid"] == q["metadata"]["uid"]
    bad = {**quota, "metadata": {"name": "bad"}, "spec": {"hard": {"cpu": "lots"}}}
    r = await call(client, "POST", "/api/v1/namespaces/team/resourcequotas", bad, status=422)
    assert r["details"]["causes"][0]["field"] == "spec.hard[cpu]"
    every = await call(client, "GET", "/api/v1/resourcequotas", status=200)
    assert [i["metadata"]["name"] for i in every["items"]] == ["compute"]
    await call(client, "DELETE", "/api/v1/namespaces/team/resourcequotas/compute", status=200)
    await call(client, "POST", "/api/v1/namespaces/team/pods", pod_manifest("e", cpu="5"), status=201)


async def test_auth_rules(env: Any) -> None:
    client, _, _ = env
    resp = await client.get("/api/v1/pods")  # anonymous read from loopback
    assert resp.status == 200
    resp = await client.post("/api/v1/namespaces/default/pods", json=pod_manifest("a"))
    body = await resp.json()
    assert resp.status == 401 and body["kind"] == "Status"
    resp = await client.post("/api/v1/namespaces/default/pods", json=pod_manifest("a"),
                             headers={"Authorization": "Bearer wrong"})
    assert resp.status == 401
    resp = await client.get("/healthz")
    assert resp.status == 200 and await resp.text() == "ok"
    info = await call(client, "GET", "/api/v1/scheduler", status=200)
    assert set(info) == {"queue", "counters", "nominations", "pods", "nodes"}
