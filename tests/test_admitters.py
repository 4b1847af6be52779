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
from nodeagent.cluster.admission.quota import PodFacts, parse_resource_quota, resize_delta
from nodeagent.cluster.admission.tolerations import add_default_tolerations
from nodeagent.cluster.admitters.chain import AdmissionChain
from nodeagent.cluster.admitters.quota import QuotaStatus
from nodeagent.cluster.controlplane import Feed
from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.quantity import Quantity, parse_quantity

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


async def test_priority_classes_changed_between_creates_are_seen(reg: Registry) -> None:
    """The plugin keeps the classes it built while none changes: an update, a delete and a new
    default class each show in the very next create."""
    classes = reg.resource("scheduling.k8s.io", "v1", "priorityclasses")
    await classes.create(None, {"metadata": {"name": "base"}, "value": 5, "globalDefault": True}, CTX)
    assert (await pods(reg).create("default", pod("a"), CTX))["spec"]["priority"] == 5
    assert (await pods(reg).create("default", pod("b"), CTX))["spec"]["priority"] == 5  # the kept classes
    await classes.patch(None, "base", "merge", {"globalDefault": False}, CTX)
    assert (await pods(reg).create("default", pod("c"), CTX))["spec"]["priority"] == 0
    await classes.delete(None, "base", DeleteOptions(), CTX)
    e = await refused(pods(reg).create("default", pod("d", priorityClassName="base"), CTX))
    assert e.code == 403
    await classes.create(None, {"metadata": {"name": "base"}, "value": 7, "globalDefault": True}, CTX)
    assert (await pods(reg).create("default", pod("e"), CTX))["spec"]["priority"] == 7


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


# ---- pods/resize: LimitRanger and ResourceQuota check the new resources -----------------------------
async def resize(reg: Registry, name: str, requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    current = await pods(reg).get("default", name)
    current["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": limits}
    got, _ = await pods(reg).update("default", name, current, CTX, subresource="resize")
    assert isinstance(got, dict)
    return got


@pytest.mark.parametrize(("requests", "limits", "message"), [
    # LimitRanger (LIMITS: cpu min 50m, max 1, limit/request at most 10)
    ({"cpu": "40m", "memory": "128Mi"}, {"cpu": "100m", "memory": "256Mi"},
     "minimum cpu usage per Container is 50m, but request is 40m"),
    ({"cpu": "200m", "memory": "128Mi"}, {"cpu": "1500m", "memory": "256Mi"},
     "maximum cpu usage per Container is 1, but limit is 1500m"),
    ({"cpu": "60m", "memory": "128Mi"}, {"cpu": "1", "memory": "256Mi"}, "cpu max limit to request ratio per Container is 10, but provided ratio is "
                                   "16.666667"),
    # ResourceQuota q: requests.cpu 1, limits.memory 1Gi; the other pod uses 300m and 256Mi
    ({"cpu": "800m", "memory": "128Mi"}, {"cpu": "1", "memory": "256Mi"},
     "exceeded quota: q, requested: requests.cpu=600m, used: requests.cpu=500m, limited: requests.cpu=1"),
    ({"cpu": "200m", "memory": "128Mi"}, {"cpu": "1", "memory": "900Mi"},
     "exceeded quota: q, requested: limits.memory=644Mi, used: limits.memory=512Mi, limited: limits.memory=1Gi"),
    ({"cpu": "800m", "memory": "128Mi"}, {"cpu": "1", "memory": "900Mi"},
     "exceeded quota: q, requested: limits.memory=644Mi,requests.cpu=600m, used: limits.memory=512Mi,"
     "requests.cpu=500m, limited: limits.memory=1Gi,requests.cpu=1"),
    # within everything: admitted (and a shrink is never refused, whatever the quota says)
    ({"cpu": "700m", "memory": "128Mi"}, {"cpu": "1", "memory": "768Mi"}, None),
    ({"cpu": "100m", "memory": "128Mi"}, {"cpu": "1", "memory": "200Mi"}, None),
])
async def test_a_resize_is_checked_against_limit_ranges_and_quotas(
        reg: Registry, requests: dict[str, str], limits: dict[str, str], message: str | None) -> None:
    """Upstream's LimitRanger takes UPDATE on pods/resize, and the quota admission charges a resize's
    growth, usage(new) - usage(old): both 403 with their words; nothing is written when refused."""
    await pods(reg).create("default", pod("other", requests={"cpu": "300m", "memory": "128Mi"},
                                          limits={"cpu": "1", "memory": "256Mi"}), CTX)
    await pods(reg).create("default", pod("web", requests={"cpu": "200m", "memory": "128Mi"},
                                          limits={"cpu": "1", "memory": "256Mi"}), CTX)
    await reg.resource("", "v1", "limitranges").create("default", LIMITS, CTX)
    quotas = reg.resource("", "v1", "resourcequotas")
    await quotas.create("default", quota("q", {"requests.cpu": "1", "limits.memory": "1Gi"}), CTX)
    if message is None:
        got = await resize(reg, "web", requests, limits)
        assert got["spec"]["containers"][0]["resources"]["requests"] == requests
        assert got["metadata"]["generation"] == 2
        return
    e = await refused(resize(reg, "web", requests, limits))
    assert (e.code, e.status["reason"]) == (403, "Forbidden")
    assert e.status["message"] == f'pods "web" is forbidden: {message}'
    kept = await pods(reg).get("default", "web")
    assert kept["metadata"]["generation"] == 1
    assert kept["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "200m", "memory": "128Mi"}


async def test_resizes_admitted_one_after_the_other_are_counted_at_their_new_size(reg: Registry) -> None:
    """The ledger caches a pod's usage by (uid, generation) and keeps an admitted resize in flight
    until the store shows it: a second resize, or a new pod, sees the first one's growth."""
    quotas = reg.resource("", "v1", "resourcequotas")
    await quotas.create("default", quota("q", {"requests.cpu": "1"}), CTX)
    await pods(reg).create("default", pod("a", requests={"cpu": "200m"}, limits={"cpu": "1"}), CTX)
    await pods(reg).create("default", pod("b", requests={"cpu": "200m"}, limits={"cpu": "1"}), CTX)
    await resize(reg, "a", {"cpu": "500m"}, {"cpu": "1"})  # used 700m
    e = await refused(resize(reg, "b", {"cpu": "600m"}, {"cpu": "1"}))
    assert e.status["message"] == ('pods "b" is forbidden: exceeded quota: q, requested: requests.cpu=400m, '
                                   "used: requests.cpu=700m, limited: requests.cpu=1")
    e = await refused(pods(reg).create("default", pod("c", requests={"cpu": "400m"}, limits={"cpu": "1"}), CTX))
    assert "used: requests.cpu=700m" in e.status["message"]
    await resize(reg, "b", {"cpu": "500m"}, {"cpu": "1"})  # exactly 1
    await resize(reg, "a", {"cpu": "100m"}, {"cpu": "1"})  # a shrink frees 400m
    await pods(reg).create("default", pod("c", requests={"cpu": "400m"}, limits={"cpu": "1"}), CTX)


async def test_concurrent_resizes_cannot_both_take_the_last_room(reg: Registry) -> None:
    quotas = reg.resource("", "v1", "resourcequotas")
    await quotas.create("default", quota("q", {"requests.cpu": "1"}), CTX)
    for name in ("a", "b"):
        await pods(reg).create("default", pod(name, requests={"cpu": "200m"}, limits={"cpu": "1"}), CTX)
    results = await asyncio.gather(resize(reg, "a", {"cpu": "700m"}, {"cpu": "1"}),
                                   resize(reg, "b", {"cpu": "700m"}, {"cpu": "1"}), return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["StatusError", "dict"], results
    e = next(r for r in results if isinstance(r, StatusError))
    assert "requested: requests.cpu=500m, used: requests.cpu=900m" in e.status["message"]


def test_resize_delta_is_the_growth_only() -> None:
    def qs(**values: str) -> dict[str, Quantity]:
        return {k.replace("_", "."): parse_quantity(v) for k, v in values.items()}

    assert resize_delta(qs(requests_cpu="500m", limits_memory="1Gi", pods="1"),
                        qs(requests_cpu="200m", limits_memory="2Gi", pods="1")) == qs(requests_cpu="300m")
    assert resize_delta(qs(requests_cpu="100m"), qs(requests_cpu="200m")) == {}
    assert resize_delta(qs(limits_cpu="1"), {}) == qs(limits_cpu="1")
