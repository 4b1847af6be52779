"""The pods/eviction subresource over HTTP (in process, fake clock): a budget is spent by a
compare-and-swap before the delete, a spent budget answers upstream's 429 with its DisruptionBudget
cause and leaves the pod alone, terminal pods go without a budget, two budgets are a 500, unready
pods follow unhealthyPodEvictionPolicy, a lost race re-reads the budget, dry runs write nothing, and
discovery lists pods/eviction as policy/v1 Eviction (what `kubectl drain` looks for)."""

from __future__ import annotations

from typing import Any

import pytest
from kube.fixtures import make_registry

from nodeagent.cluster.apiserver.eviction import add_eviction
from nodeagent.cluster.apiserver.kubeapi import create_kube_app
from nodeagent.cluster.apiserver.resources import ApiSettings

PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
MERGE = {"Content-Type": "application/merge-patch+json"}
DENIED = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture
async def env(aiohttp_client: Any) -> Any:
    reg, _store, clock = await make_registry()
    settings = ApiSettings(clock)
    add_eviction(reg, settings)
    client = await aiohttp_client(create_kube_app(reg, settings))
    client.registry = reg
    yield client
    await reg.close()


async def make_pod(api: Any, name: str, *, ready: bool = True, phase: str = "Running",
                   labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}]}}
    resp = await api.post(PODS, json=body)
    assert resp.status == 201, await resp.text()
    conds = [{"type": "Ready", "status": "True" if ready else "False"}] if phase == "Running" else []
    resp = await api.patch(f"{PODS}/{name}/status", json={"status": {"phase": phase, "conditions": conds}},
                           headers=MERGE)
    assert resp.status == 200, await resp.text()
    out: dict[str, Any] = await resp.json()
    return out


async def make_pdb(api: Any, name: str = "budget", *, allowed: int, healthy: int, desired: int,
                   policy: str | None = None, selector: dict[str, Any] | None = None,
                   observed: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"minAvailable": desired, "selector": selector or {"matchLabels": {"app": "web"}}}
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    resp = await api.post(PDBS, json={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                      "metadata": {"name": name}, "spec": spec})
    assert resp.status == 201, await resp.text()
    pdb = await resp.json()
    st = {"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": desired,
          "expectedPods": healthy, "observedGeneration": observed}
    resp = await api.put(f"{PDBS}/{name}/status", json={**pdb, "status": st})  # what the controller writes
    assert resp.status == 200, await resp.text()
    out: dict[str, Any] = await resp.json()
    return out


def eviction(name: str, api_version: str = "policy/v1", **delete_options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": api_version, "kind": "Eviction", "metadata": {"name": name}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


async def evict(api: Any, name: str, body: dict[str, Any] | None = None, query: str = "") -> tuple[int, Any]:
    resp = await api.post(f"{PODS}/{name}/eviction{query}", json=body or eviction(name))
    return resp.status, await resp.json()


async def get(api: Any, path: str) -> tuple[int, Any]:
    resp = await api.get(path)
    return resp.status, await resp.json()


async def test_a_budget_is_spent_then_refuses_with_429(env: Any) -> None:
    for i in range(3):
        await make_pod(env, f"p{i}")
    await make_pdb(env, allowed=1, healthy=3, desired=2)
    code, body = await evict(env, "p0")
    assert code == 201 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                    "code": 201}
    _, pdb = await get(env, f"{PDBS}/budget")
    st = pdb["status"]
    assert st["disruptionsAllowed"] == 0 and list(st["disruptedPods"]) == ["p0"]
    assert [(c["type"], c["status"], c["reason"]) for c in st["conditions"]] == [
        ("DisruptionAllowed", "False", "InsufficientPods")]
    _, p0 = await get(env, f"{PODS}/p0")  # graceful: terminating, marked as the eviction's target
    assert p0["metadata"]["deletionTimestamp"] and p0["metadata"]["deletionGracePeriodSeconds"] == 30
    assert {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting"}.items() <= next(
        c for c in p0["status"]["conditions"] if c["type"] == "DisruptionTarget").items()
    code, body = await evict(env, "p1")
    assert code == 429
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": DENIED,
                    "reason": "TooManyRequests", "code": 429,
                    "details": {"causes": [{"reason": "DisruptionBudget",  # the controller has not recounted yet
                                            "message": "The disruption budget budget does not allow evicting pods "
                                                       "currently"}]}}
    _, p1 = await get(env, f"{PODS}/p1")
    assert "deletionTimestamp" not in p1["metadata"]
    # evicting the terminating pod again needs no budget (canIgnorePDB)
    code, _ = await evict(env, "p0", eviction("p0", gracePeriodSeconds=0))
    assert code == 201
    assert (await get(env, f"{PODS}/p0"))[0] == 404


async def test_terminal_pods_go_without_a_budget_and_other_pods_without_one(env: Any) -> None:
    await make_pod(env, "done", phase="Succeeded")
    await make_pod(env, "free", labels={"app": "other"})
    await make_pdb(env, allowed=0, healthy=0, desired=2)
    assert (await evict(env, "done"))[0] == 201
    assert (await get(env, f"{PODS}/done"))[0] == 404  # terminal: deleted at once
    assert (await evict(env, "free", eviction("free", gracePeriodSeconds=0)))[0] == 201
    assert (await get(env, f"{PODS}/free"))[0] == 404
    assert (await evict(env, "gone"))[0] == 404


async def test_two_budgets_are_a_500_and_the_pod_stays(env: Any) -> None:
    await make_pod(env, "p")
    await make_pdb(env, "a", allowed=1, healthy=1, desired=0)
    await make_pdb(env, "b", allowed=1, healthy=1, desired=0)
    code, body = await evict(env, "p")
    assert code == 500 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                    "code": 500, "message": "This pod has more than one PodDisruptionBudget, which "
                                                            "the eviction subresource does not support."}
    assert "deletionTimestamp" not in (await get(env, f"{PODS}/p"))[1]["metadata"]


@pytest.mark.parametrize(("policy", "healthy", "want"), [
    ("AlwaysAllow", 1, 201),  # an unready pod never spends the budget
    ("IfHealthyBudget", 2, 201),  # the application is whole without it
    ("IfHealthyBudget", 1, 429),  # short of healthy pods: the spent budget decides
    (None, 1, 429),
])
async def test_unready_pods_follow_the_unhealthy_pod_eviction_policy(env: Any, policy: str | None, healthy: int,
                                                                      want: int) -> None:
    await make_pod(env, "sick", ready=False)
    await make_pdb(env, allowed=0, healthy=healthy, desired=2, policy=policy)
    code, _ = await evict(env, "sick", eviction("sick", gracePeriodSeconds=0))
    assert code == want
    assert (await get(env, f"{PODS}/sick"))[0] == (404 if want == 201 else 200)
    _, pdb = await get(env, f"{PDBS}/budget")
    assert "disruptedPods" not in pdb["status"]  # the budget was not spent either way


async def test_a_budget_not_yet_observed_asks_to_retry_in_10s(env: Any) -> None:
    await make_pod(env, "p")
    await make_pdb(env, allowed=3, healthy=3, desired=0, observed=0)
    code, body = await evict(env, "p")
    assert code == 429 and body["details"] == {
        "causes": [{"reason": "DisruptionBudget",
                    "message": "The disruption budget budget is still being processed by the server."}],
        "retryAfterSeconds": 10}


async def test_a_lost_race_rereads_the_budget(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another eviction spends the budget between this one's read and its compare-and-swap: the
    write fails, the budget is read again and checked again, and both spends are kept."""
    for i in range(3):
        await make_pod(env, f"p{i}")
    await make_pdb(env, allowed=2, healthy=3, desired=1)
    pdbs = env.registry.resource("policy", "v1", "poddisruptionbudgets")
    real_put, raced = pdbs._txn_put, []

    async def racing_put(key: str, value: bytes, mod_revision: int) -> int | None:
        if not raced:
            raced.append(key)
            code, _ = await evict(env, "p1")  # the competitor wins the budget first
            assert code == 201
        return await real_put(key, value, mod_revision)

    monkeypatch.setattr(pdbs, "_txn_put", racing_put)
    code, _ = await evict(env, "p0")
    assert code == 201 and raced
    _, pdb = await get(env, f"{PDBS}/budget")
    assert pdb["status"]["disruptionsAllowed"] == 0 and sorted(pdb["status"]["disruptedPods"]) == ["p0", "p1"]
    monkeypatch.setattr(pdbs, "_txn_put", real_put)
    raced.clear()

    async def spending_put(key: str, value: bytes, mod_revision: int) -> int | None:
        if not raced:
            raced.append(key)
            resp = await env.patch(f"{PDBS}/other/status", json={"status": {"disruptionsAllowed": 0}},
                                   headers=MERGE)
            assert resp.status == 200
        return await real_put(key, value, mod_revision)

    await make_pdb(env, "other", allowed=1, healthy=1, desired=0, selector={"matchLabels": {"app": "db"}})
    await make_pod(env, "db", labels={"app": "db"})
    monkeypatch.setattr(pdbs, "_txn_put", spending_put)
    code, body = await evict(env, "db")
    assert code == 429 and raced, body  # the fresh read says the budget is spent: no delete
    assert "deletionTimestamp" not in (await get(env, f"{PODS}/db"))[1]["metadata"]


async def test_dry_run_writes_nothing_and_v1beta1_is_accepted(env: Any) -> None:
    await make_pod(env, "p")
    before = await make_pdb(env, allowed=1, healthy=1, desired=0)
    code, _ = await evict(env, "p", query="?dryRun=All")
    assert code == 201
    _, pdb = await get(env, f"{PDBS}/budget")
    assert pdb["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    _, p = await get(env, f"{PODS}/p")
    assert "deletionTimestamp" not in p["metadata"] and all(
        c["type"] != "DisruptionTarget" for c in p["status"]["conditions"])
    code, _ = await evict(env, "p", eviction("p", "policy/v1beta1", gracePeriodSeconds=0))
    assert code == 201 and (await get(env, f"{PODS}/p"))[0] == 404


async def test_bad_evictions_and_discovery(env: Any) -> None:
    await make_pod(env, "p")
    code, body = await evict(env, "p", eviction("q"))
    assert code == 400 and body["message"] == "name in URL does not match name in Eviction object"
    code, body = await evict(env, "p", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    assert code == 400 and "expected kind (Eviction)" in body["message"]
    code, body = await evict(env, "p", eviction("p", propagationPolicy="Sideways"))
    assert code == 422 and body["details"]["causes"][0]["field"] == "propagationPolicy"
    assert (await get(env, f"{PODS}/p/eviction"))[0] == 405
    _, resources = await get(env, "/api/v1")
    (entry,) = [r for r in resources["resources"] if r["name"] == "pods/eviction"]
    assert (entry["group"], entry["version"], entry["kind"], entry["verbs"]) == ("policy", "v1", "Eviction",
                                                                                 ["create"])
