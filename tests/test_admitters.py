"""Admission in Kubernetes' order over the registry (cluster/admitters) and its pure rules
(cluster/admission: limitrange, tolerations, quota scopes): in process, a registry over the
MemoryStore with the chain plugged in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kube.fixtures import make_registry

from nodeagent.cluster.admission.limitrange import apply_defaults, parse_items, validate
from nodeagent.cluster.admission.quota import PodFacts, parse_resource_quota
from nodeagent.cluster.admission.tolerations import add_default_tolerations
from nodeagent.cluster.admitters.chain import AdmissionChain
from nodeagent.cluster.admitters.quota import QuotaStatus
from nodeagent.cluster.controlplane import Feed
from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.core.errors import ValidationErrors

CTX = Context(field_manager="test")


def pod(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "command": ["sleep", "1"], "resources": res}], **spec}}


def quota(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name}, "spec": {"hard": hard, **spec}}


@pytest.fixture
async def reg() -> AsyncIterator[Registry]:
    registry, _store, _clock = await make_registry()
    registry.plugins.admitter = AdmissionChain(registry)
    yield registry
    await registry.close()


def pods(reg: Registry) -> Any:
    return reg.resource("", "v1", "pods")


async def refused(coro: Any) -> StatusError:
    with pytest.raises(StatusError) as e:
        await coro
    return e.value


# ---- LimitRanger -----------------------------------------------------------------------------------
LIMITS = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "lr"},
          "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
                               "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "1"}, "min": {"cpu": "50m"},
                               "maxLimitRequestRatio": {"cpu": "10"}}]}}


async def test_limitranger_defaults_a_container_and_annotates_the_pod(reg: Registry) -> None:
    await reg.resource("", "v1", "limitranges").create("default", LIMITS, CTX)
    created = await pods(reg).create("default", pod("web"), CTX)
    res = created["spec"]["containers"][0]["resources"]
    assert res == {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}}
    assert created["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == \
        "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c"
    assert created["status"]["qosClass"] == "Burstable"
    kept = await pods(reg).create("default", pod("own", requests={"cpu": "200m"}, limits={"cpu": "400m"}), CTX)
    assert kept["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"


@pytest.mark.parametrize(("requests", "limits", "message"), [
    ({"cpu": "20m"}, {"cpu": "100m"}, "minimum cpu usage per Container is 50m, but request is 20m"),
    ({"cpu": "100m"}, {"cpu": "2"}, "[maximum cpu usage per Container is 1, but limit is 2, cpu max limit to request "
                                    "ratio per Container is 10, but provided ratio is 20.000000]"),
    ({"cpu": "200m"}, {"cpu": "2"}, "maximum cpu usage per Container is 1, but limit is 2"),  # ratio 10 is allowed
    ({"cpu": "60m"}, {"cpu": "1"}, "cpu max limit to request ratio per Container is 10, but provided ratio is "
                                   "16.666667"),
])
async def test_limitranger_refuses_with_403_and_kubes_words(reg: Registry, requests: dict[str, str],
                                                           limits: dict[str, str], message: str) -> None:
    await reg.resource("", "v1", "limitranges").create("default", LIMITS, CTX)
    e = await refused(pods(reg).create("default", pod("bad", requests=requests, limits=limits), CTX))
    assert e.code == 403 and e.status["reason"] == "Forbidden"
    assert e.status["message"] == f'pods "bad" is forbidden: {message}'
    assert not (await pods(reg).list("default", ListOptions())).items


def test_limitrange_pure_pod_items_and_item_defaulting() -> None:
    items = parse_items({"spec": {"limits": [{"type": "Container", "max": {"memory": "1Gi"}},
                                             {"type": "Pod", "max": {"cpu": "1"}, "min": {"memory": "64Mi"}}]}})
    assert str(items[0].default["memory"]) == "1Gi" and str(items[0].default_request["memory"]) == "1Gi"
    p = pod("x", requests={"cpu": "600m", "memory": "32Mi"}, limits={"cpu": "600m"})
    p["spec"]["containers"].append({"name": "d", "resources": {"limits": {"cpu": "600m"}}})
    assert validate(p, items[1:]) == ["minimum memory usage per Pod is 64Mi.  No request is specified",
                                      "maximum cpu usage per Pod is 1, but limit is 1200m"]
    assert apply_defaults(p, items[:1])
    assert p["spec"]["containers"][1]["resources"]["limits"] == {"cpu": "600m", "memory": "1Gi"}


# ---- Priority ----------------------------------------------------------------------------------------
async def test_priority_comes_from_the_class_or_the_global_default(reg: Registry) -> None:
    classes = reg.resource("scheduling.k8s.io", "v1", "priorityclasses")
    await classes.create(None, {"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"}, CTX)
    got = await pods(reg).create("default", pod("a", priorityClassName="high"), CTX)
    assert (got["spec"]["priority"], got["spec"]["preemptionPolicy"]) == (1000, "Never")
    assert (await pods(reg).create("default", pod("b"), CTX))["spec"]["priority"] == 0
    await classes.create(None, {"metadata": {"name": "base"}, "value": 5, "globalDefault": True}, CTX)
    got = await pods(reg).create("default", pod("c"), CTX)
    assert (got["spec"]["priority"], got["spec"]["priorityClassName"]) == (5, "base")
    assert (await pods(reg).create("default", pod("d", priorityClassName="system-node-critical"),
                                   CTX))["spec"]["priority"] == 2000001000
    e = await refused(pods(reg).create("default", pod("e", priorityClassName="nope"), CTX))
    assert (e.code, e.status["message"]) == (403, 'pods "e" is forbidden: no PriorityClass with name nope was found')
    e = await refused(pods(reg).create("default", pod("f", priorityClassName="high", priority=7), CTX))
    assert e.status["message"] == 'pods "f" is forbidden: the integer value of priority (7) must not be provided ' \
                                  'in pod spec; priority admission controller computed 1000 from the given ' \
                                  'PriorityClass name'
    e = await refused(classes.create(None, {"metadata": {"name": "other"}, "value": 1, "globalDefault": True}, CTX))
    assert e.code == 403 and "PriorityClass base is already marked as default. Only one default can exist" \
        in e.status["message"]


# ---- DefaultTolerationSeconds --------------------------------------------------------------------------
async def test_default_toleration_seconds_added_unless_tolerated(reg: Registry) -> None:
    got = await pods(reg).create("default", pod("t"), CTX)
    assert got["spec"]["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300}]
    own = {"spec": {"tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 5}]}}
    assert add_default_tolerations(own)
    assert [t["key"] for t in own["spec"]["tolerations"]] == ["node.kubernetes.io/unreachable",
                                                              "node.kubernetes.io/not-ready"]
    everything = {"spec": {"tolerations": [{"operator": "Exists"}]}}
    assert not add_default_tolerations(everything)


# ---- ResourceQuota -----------------------------------------------------------------------------------
async def test_quota_refuses_beyond_hard_with_the_upstream_message(reg: Registry) -> None:
    quotas = reg.resource("", "v1", "resourcequotas")
    await quotas.create("default", quota("q", {"pods": "2", "requests.cpu": "1", "count/configmaps": "1"}), CTX)
    await pods(reg).create("default", pod("a", requests={"cpu": "400m"}, limits={"cpu": "400m"}), CTX)
    e = await refused(pods(reg).create("default", pod("b", requests={"cpu": "700m"}, limits={"cpu": "1"}), CTX))
    assert (e.code, e.status["message"]) == (403, 'pods "b" is forbidden: exceeded quota: q, requested: '
                                                  'requests.cpu=700m, used: requests.cpu=400m, limited: requests.cpu=1')
    e = await refused(pods(reg).create("default", pod("c"), CTX))
    assert e.status["message"] == 'pods "c" is forbidden: failed quota: q: must specify requests.cpu for: c'
    cms = reg.resource("", "v1", "configmaps")
    await cms.create("default", {"metadata": {"name": "one"}}, CTX)
    e = await refused(cms.create("default", {"metadata": {"name": "two"}}, CTX))
    assert e.status["message"] == 'configmaps "two" is forbidden: exceeded quota: q, requested: count/configmaps=1, ' \
                                  'used: count/configmaps=1, limited: count/configmaps=1'


async def test_quota_scopes_pick_the_pods_they_count(reg: Registry) -> None:
    quotas = reg.resource("", "v1", "resourcequotas")
    await quotas.create("default", quota("be", {"pods": "1"}, scopes=["BestEffort"]), CTX)
    await quotas.create("default", quota("term", {"pods": "1"}, scopes=["Terminating"]), CTX)
    await reg.resource("scheduling.k8s.io", "v1", "priorityclasses").create(
        None, {"metadata": {"name": "gold"}, "value": 10}, CTX)
    await quotas.create("default", quota("gold", {"pods": "1"}, scopeSelector={"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["gold"]}]}), CTX)
    burst = {"requests": {"cpu": "10m"}}
    await pods(reg).create("default", pod("be1"), CTX)
    assert "exceeded quota: be" in (await refused(pods(reg).create("default", pod("be2"), CTX))).status["message"]
    await pods(reg).create("default", pod("nb1", **burst), CTX)  # NotBestEffort, not terminating, no class: no quota
    await pods(reg).create("default", pod("nb2", **burst), CTX)
    await pods(reg).create("default", pod("t1", activeDeadlineSeconds=60, **burst), CTX)
    assert "exceeded quota: term" in (await refused(pods(reg).create(
        "default", pod("t2", activeDeadlineSeconds=60, **burst), CTX))).status["message"]
    await pods(reg).create("default", pod("g1", priorityClassName="gold", **burst), CTX)
    assert "exceeded quota: gold" in (await refused(pods(reg).create(
        "default", pod("g2", priorityClassName="gold", **burst), CTX))).status["message"]


def test_quota_scope_validation_and_matching() -> None:
    def parse(**spec: Any) -> Any:
        return parse_resource_quota({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
                                     "spec": spec})

    with pytest.raises(ValidationErrors, match="conflicting scopes"):
        parse(hard={"pods": "1"}, scopes=["Terminating", "NotTerminating"])
    with pytest.raises(ValidationErrors, match="unsupported scope applied to resource"):
        parse(hard={"cpu": "1"}, scopes=["BestEffort"])
    with pytest.raises(ValidationErrors, match="must be at least one value"):
        parse(hard={"pods": "1"}, scopeSelector={"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]})
    q = parse(hard={"pods": "1"}, scopeSelector={"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["a"]}, {"scopeName": "NotBestEffort",
                                                                              "operator": "Exists"}]})
    assert q.matches(PodFacts(False, False, "b")) and not q.matches(PodFacts(False, False, "a"))
    assert not q.matches(PodFacts(False, True, "b")) and not q.matches(None)


async def test_quota_used_is_exact_under_concurrent_creates_and_drops_on_delete(reg: Registry) -> None:
    chain = reg.plugins.admitter
    assert isinstance(chain, AdmissionChain)
    status = QuotaStatus(chain.quota.ledger)
    feed = Feed(pods(reg), status.observe)
    await feed.relist()
    runners = [asyncio.create_task(status.run()), asyncio.create_task(feed.run())]
    try:
        quotas = reg.resource("", "v1", "resourcequotas")
        await quotas.create("default", quota("q", {"pods": "7", "requests.cpu": "700m"}), CTX)
        results = await asyncio.gather(*(pods(reg).create("default", pod(f"p{i}", requests={"cpu": "100m"}), CTX)
                                         for i in range(30)), return_exceptions=True)
        made = [r for r in results if isinstance(r, dict)]
        assert len(made) == 7
        assert all(isinstance(r, StatusError) and r.code == 403 for r in results if not isinstance(r, dict))

        async def used() -> dict[str, str]:
            for _ in range(200):
                await asyncio.sleep(0.01)
                got = (await quotas.get("default", "q")).get("status") or {}
                if got.get("used") and not chain.quota.ledger.dirty:
                    return dict(got["used"])
            return {}

        assert await used() == {"pods": "7", "requests.cpu": "700m"}
        await pods(reg).delete("default", made[0]["metadata"]["name"], DeleteOptions(), CTX)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if (await quotas.get("default", "q"))["status"]["used"]["pods"] == "6":
                break
        assert (await quotas.get("default", "q"))["status"] == {"hard": {"pods": "7", "requests.cpu": "700m"},
                                                                 "used": {"pods": "6", "requests.cpu": "600m"}}
        await pods(reg).create("default", pod("again", requests={"cpu": "100m"}), CTX)
    finally:
        for r in runners:
            r.cancel()
