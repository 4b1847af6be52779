"""The PodDisruptionBudget decisions, table-tested with upstream's cases: the controller's status
(disruption_test.go: integer and percentage budgets over ReplicaSets, Deployments and naked pods,
unready and terminating pods, recently disrupted pods and their DeletionTimeout, the fail-safe) and
the eviction subresource's verdict (eviction_test.go: terminal, pending and terminating pods skip
the budget, several budgets are a 500, a spent budget is a 429 naming it, an unready pod under
IfHealthyBudget / AlwaysAllow, a stale or broken budget), and when a DisruptionTarget condition is
stale (TestStalePodDisruption)."""

from __future__ import annotations

from typing import Any

import pytest
from controllers_objects import NOW, meta, pod, replicaset, ts

from nodeagent.cluster.controllers.common.actions import Event, Patch, UpdateStatus
from nodeagent.cluster.controllers.disruption import eviction, stale, status

SEL = {"matchLabels": {"app": "web"}}


def pdb(name: str = "budget", *, min_available: Any = None, max_unavailable: Any = None, selector: Any = SEL,
        st: dict[str, Any] | None = None, generation: int = 1, policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": selector}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if policy is not None:
        spec["unhealthyPodEvictionPolicy"] = policy
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": meta(name, generation=generation, created=NOW - 60), "spec": spec,
            "status": st if st is not None else {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                                                 "expectedPods": 0}}


def deployment(name: str = "web", replicas: int = 4) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name), "spec": {"replicas": replicas}}


def scales(*owners: dict[str, Any]) -> status.ScaleLookup:
    """The loop's finders over these owners: a ReplicaSet owned by a Deployment counts as it."""
    by_uid = {o["metadata"]["uid"]: o for o in owners}

    def scale_of(ref: Any, _ns: str) -> tuple[str, int] | None:
        o = by_uid.get(ref.get("uid"))
        if o is None:
            return None
        for r in o["metadata"].get("ownerReferences") or []:
            if r.get("controller") and r["uid"] in by_uid:
                d = by_uid[r["uid"]]
                return d["metadata"]["uid"], d["spec"]["replicas"]
        return o["metadata"]["uid"], o["spec"]["replicas"]
    return scale_of


def written(plan: Any) -> dict[str, Any]:
    ups = plan.of_type(UpdateStatus)
    assert len(ups) == 1, plan.actions
    out: dict[str, Any] = ups[0].obj["status"]
    return out


def counts(st: dict[str, Any]) -> tuple[int, int, int, int]:
    return st["expectedPods"], st["desiredHealthy"], st["currentHealthy"], st["disruptionsAllowed"]


RS = replicaset("web", 3)
RS4 = replicaset("web4", 4)
DEP = deployment("dep", 4)
RS_OF_DEP = replicaset("dep-1", 2, owner=DEP)


def rs_pods(n: int, owner: dict[str, Any] = RS, **kw: Any) -> list[dict[str, Any]]:
    return [pod(f"{owner['metadata']['name']}-{i}", owner=owner, **kw) for i in range(n)]


@pytest.mark.parametrize(("case", "budget", "pods", "owners", "want"), [
    ("minAvailable int counts the pods themselves (TestNakedPod)", pdb(min_available=1), [pod("naked")], (),
     (1, 1, 1, 0)),
    ("minAvailable int, three ready", pdb(min_available=2), rs_pods(3), (RS,), (3, 2, 3, 1)),
    ("maxUnavailable int over a ReplicaSet's scale", pdb(max_unavailable=1), rs_pods(3), (RS,), (3, 2, 3, 1)),
    ("maxUnavailable takes the scale, not the pods seen", pdb(max_unavailable=1), rs_pods(2), (RS,), (3, 2, 2, 0)),
    ("minAvailable 28% of 3 rounds up to 1", pdb(min_available="28%"), rs_pods(3), (RS,), (3, 1, 3, 2)),
    ("maxUnavailable 34% of 3 rounds up to 2 unavailable", pdb(max_unavailable="34%"), rs_pods(3), (RS,),
     (3, 1, 3, 2)),
    ("minAvailable 50% of a ReplicaSet of 4", pdb(min_available="50%"), rs_pods(4, RS4), (RS4,), (4, 2, 4, 2)),
    ("a Deployment's scale through its ReplicaSet", pdb(min_available="50%"), rs_pods(2, RS_OF_DEP),
     (DEP, RS_OF_DEP), (4, 2, 2, 0)),
    ("unready pods are not healthy", pdb(min_available=2), [*rs_pods(2), pod("web-x", owner=RS, ready=False)], (RS,), (3, 2, 2, 0)),
    ("terminating pods are not healthy", pdb(min_available=1),
     [*rs_pods(2), pod("web-t", owner=RS, deleting=NOW + 30)], (RS,), (3, 1, 2, 1)),
    ("maxUnavailable over more than the scale clamps desired at 0", pdb(max_unavailable=5), rs_pods(3), (RS,),
     (3, 0, 3, 3)),
    ("no pods: nothing expected, nothing allowed", pdb(max_unavailable=1), [], (), (0, 0, 0, 0)),
    ("minAvailable over the pods there: never negative", pdb(min_available=5), rs_pods(3), (RS,), (3, 5, 3, 0)),
    ("pods the selector leaves out do not count", pdb(min_available=1),
     [*rs_pods(2), pod("other", labels={"app": "db"})], (RS,), (2, 1, 2, 1)),
])
def test_status(case: str, budget: dict[str, Any], pods: list[dict[str, Any]], owners: tuple[dict[str, Any], ...],
                want: tuple[int, int, int, int]) -> None:
    st = written(status.sync(budget, pods, scales(*owners), now=NOW))
    assert counts(st) == want, case
    assert st["observedGeneration"] == 1
    (cond,) = st["conditions"]
    allowed = want[3] > 0
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "DisruptionAllowed", "True" if allowed else "False", "SufficientPods" if allowed else "InsufficientPods"), case


def test_selector_semantics_nil_selects_nothing_and_empty_selects_the_namespace() -> None:
    pods = rs_pods(3)
    assert counts(written(status.sync(pdb(min_available=1, selector=None), pods, scales(RS), now=NOW))) == (0, 1, 0, 0)
    assert counts(written(status.sync(pdb(min_available=1, selector={}), pods, scales(RS), now=NOW))) == (3, 1, 3, 2)


def test_no_pods_records_the_event() -> None:
    plan = status.sync(pdb(min_available=1), [], scales(), now=NOW)
    assert [(e.type, e.reason, e.message) for e in plan.of_type(Event)] == [("Normal", "NoPods",
                                                                             "No matching pods found")]


def test_an_unchanged_status_is_not_written() -> None:
    first = status.sync(pdb(min_available=2), rs_pods(3), scales(RS), now=NOW)
    again = status.sync(pdb(min_available=2, st=written(first)), rs_pods(3), scales(RS), now=NOW + 10)
    assert again.of_type(UpdateStatus) == []


def test_a_pod_without_a_found_controller_fails_safe() -> None:
    """getExpectedScale's error: disruptionsAllowed 0 and DisruptionAllowed=False SyncFailed."""
    budget = pdb(max_unavailable=1, st={"disruptionsAllowed": 3, "currentHealthy": 3, "desiredHealthy": 2,
                                        "expectedPods": 3, "observedGeneration": 1})
    plan = status.sync(budget, rs_pods(3), scales(), now=NOW)
    st = written(plan)
    assert st["disruptionsAllowed"] == 0 and st["currentHealthy"] == 3  # the rest is left as it was
    (cond,) = st["conditions"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "SyncFailed",
                                                                 'found no controllers for pod "web-0"')
    assert plan.of_type(UpdateStatus)[0].reason == "PDBFailSafe"
    assert [e.reason for e in plan.of_type(Event)] == ["CalculateExpectedPodCountFailed"]


def test_unmanaged_pods_with_a_percentage_warn_and_count_only_the_managed() -> None:
    plan = status.sync(pdb(max_unavailable="50%"), [*rs_pods(3), pod("naked")], scales(RS), now=NOW)
    assert counts(written(plan)) == (3, 1, 4, 3)
    assert [e.reason for e in plan.of_type(Event)] == ["UnmanagedPods"]


def test_recently_disrupted_pods_are_not_healthy_until_the_deletion_timeout() -> None:
    """buildDisruptedPodMap: an eviction 30 s ago holds the pod out of currentHealthy and asks for a
    look again when its 2 minutes are over; one older than that counts again and leaves the map."""
    fresh, old = ts(NOW - 30), ts(NOW - 200)
    budget = pdb(min_available=1, st={"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 1,
                                      "expectedPods": 3, "disruptedPods": {"web-0": fresh, "web-1": old}})
    plan = status.sync(budget, rs_pods(3), scales(RS), now=NOW)
    st = written(plan)
    assert counts(st) == (3, 1, 2, 1)
    assert st["disruptedPods"] == {"web-0": fresh}
    assert plan.requeue_after == pytest.approx(90.0)
    # once the pod is gone (or being deleted) it leaves the map
    gone = status.sync(pdb(min_available=1, st=st), rs_pods(3)[1:], scales(RS), now=NOW + 1)
    assert "disruptedPods" not in written(gone) and gone.requeue_after is None


# ---- the eviction decision ----
READY_BUDGET = {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3,
                "observedGeneration": 1}
SPENT = {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2, "observedGeneration": 1}


@pytest.mark.parametrize(("case", "the_pod", "budgets", "want"), [
    ("a succeeded pod is deleted without a budget", pod("p", phase="Succeeded"), [pdb(st=SPENT)],
     {"ignored_budget": True, "precondition": False}),
    ("a failed pod likewise", pod("p", phase="Failed"), [pdb(st=SPENT)], {"ignored_budget": True}),
    ("a pending pod too, but with its resourceVersion", pod("p", phase="Pending", ready=False), [pdb(st=SPENT)],
     {"ignored_budget": True, "precondition": True}),
    ("a terminating pod is deleted again", pod("p", deleting=NOW + 30), [pdb(st=SPENT)],
     {"ignored_budget": True, "precondition": False}),
    ("no budget selects it", pod("p", labels={"app": "db"}), [pdb(st=SPENT)], {"budget_name": ""}),
    ("a nil selector selects nothing", pod("p"), [pdb(st=SPENT, selector=None)], {"budget_name": ""}),
    ("two budgets: 500", pod("p"), [pdb("a", st=SPENT), pdb("b", st=SPENT)],
     {"status": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 500,
                 "message": eviction.MULTIPLE}}),
    ("a ready pod spends the budget", pod("p"), [pdb(st=SPENT)], {"budget_name": "budget", "precondition": False}),
    ("an unready pod under AlwaysAllow goes without spending", pod("p", ready=False),
     [pdb(st=SPENT, policy="AlwaysAllow")], {"budget": None, "precondition": True, "budget_name": "budget"}),
    ("an unready pod of a whole application goes (IfHealthyBudget)", pod("p", ready=False),
     [pdb(st=SPENT, policy="IfHealthyBudget")], {"budget": None, "precondition": True}),
    ("an unready pod when the application is short spends the budget", pod("p", ready=False),
     [pdb(st={**SPENT, "currentHealthy": 1})], {"budget_name": "budget", "precondition": False}),
    ("desiredHealthy 0 does not count as whole", pod("p", ready=False),
     [pdb(st={**SPENT, "currentHealthy": 0, "desiredHealthy": 0})], {"budget_name": "budget"}),
])
def test_decide(case: str, the_pod: dict[str, Any], budgets: list[dict[str, Any]], want: dict[str, Any]) -> None:
    v = eviction.decide(the_pod, budgets)
    for field, value in want.items():
        assert getattr(v, field) == value, (case, field, v)
    if want.get("budget_name") == "budget" and "budget" not in want:
        assert v.budget is not None and v.budget["metadata"]["name"] == "budget"


@pytest.mark.parametrize(("case", "st", "generation", "code", "cause"), [
    ("spent: 429 naming the budget's counts", SPENT, 1, 429,
     "The disruption budget budget needs 2 healthy pods and has 2 currently"),
    ("its status older than its spec: 429, retry in 10 s", READY_BUDGET, 2, 429,
     "The disruption budget budget is still being processed by the server."),
    ("a failed sync is named first", {**SPENT, "currentHealthy": 5, "conditions": [
        {"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed", "message": "hoge"}]}, 1, 429,
     "The disruption budget budget does not allow evicting pods currently because it failed sync: hoge"),
    ("another False reason with a message", {**SPENT, "currentHealthy": 5, "conditions": [
        {"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "fuga"}]}, 1,
     429, "The disruption budget budget does not allow evicting pods currently (InsufficientPods): fuga"),
    ("no reason to give", {**SPENT, "currentHealthy": 5}, 1, 429,
     "The disruption budget budget does not allow evicting pods currently"),
    ("negative: 403", {**READY_BUDGET, "disruptionsAllowed": -1}, 1, 403,
     "The disruption budget budget does not allow evicting pods currently: pdb disruptions allowed is negative"),
    ("too many unconfirmed evictions: 403", {**READY_BUDGET, "disruptedPods": {f"p{i}": ts(NOW) for i in range(2001)}},
     1, 403, "The disruption budget budget does not allow evicting pods currently: DisruptedPods map too big - too "
             "many evictions not confirmed by PDB controller"),
])
def test_check_and_decrement_refusals(case: str, st: dict[str, Any], generation: int, code: int, cause: str) -> None:
    with pytest.raises(eviction.Denied) as e:
        eviction.check_and_decrement(pdb(st=st, generation=generation), "p", now=NOW)
    body = e.value.status
    assert body["code"] == code and body["details"]["causes"] == [{"reason": "DisruptionBudget", "message": cause}]
    if code == 429:
        assert body["reason"] == "TooManyRequests" and body["message"] == eviction.DENIED
        assert body["details"].get("retryAfterSeconds", 0) == (10 if generation == 2 else 0)
        assert "name" not in body["details"]  # NewTooManyRequests carries no object
    else:
        assert body["reason"] == "Forbidden" and body["message"].startswith('poddisruptionbudget.policy "budget" is '
                                                                            "forbidden: ")


def test_check_and_decrement_spends_one_and_records_the_pod() -> None:
    new = eviction.check_and_decrement(pdb(st=READY_BUDGET), "p", now=NOW)
    st = new["status"]
    assert st["disruptionsAllowed"] == 0 and st["disruptedPods"] == {"p": ts(NOW)}
    assert [(c["type"], c["status"], c["reason"]) for c in st["conditions"]] == [
        ("DisruptionAllowed", "False", "InsufficientPods")]
    two = eviction.check_and_decrement(pdb(st={**READY_BUDGET, "disruptionsAllowed": 2}), "p", now=NOW)
    assert two["status"]["disruptionsAllowed"] == 1 and "conditions" not in two["status"]  # only when it hits 0
    dry = eviction.check_and_decrement(pdb(st=READY_BUDGET), "p", now=NOW, dry_run=True)
    assert "disruptedPods" not in dry["status"]


def test_the_disruption_target_condition() -> None:
    marked = eviction.with_disruption_target(pod("p"), NOW)
    (cond,) = [c for c in marked["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "EvictionByEvictionAPI",
                                                                 "Eviction API: evicting")
    assert eviction.with_disruption_target(marked, NOW + 5)["status"]["conditions"] == marked["status"]["conditions"]


def target(status_: str = "True", reason: str = "EvictionByEvictionAPI", since: float = NOW - 30) -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": status_, "reason": reason, "lastTransitionTime": ts(since)}


@pytest.mark.parametrize(("case", "the_pod", "want"), [
    ("no condition", pod("p"), None),
    ("marked 30 s ago: stale in 90 s", pod("p", conditions=[target()]), 90.0),
    ("marked 3 min ago: stale now", pod("p", conditions=[target(since=NOW - 180)]), 0.0),
    ("by preemption too", pod("p", conditions=[target(reason="PreemptionByScheduler", since=NOW - 120)]), 0.0),
    ("already False", pod("p", conditions=[target("False", since=NOW - 600)]), None),
    ("the kubelet's own is never stale", pod("p", conditions=[target(reason="TerminationByKubelet")]), None),
    ("being deleted: the disruption is happening", pod("p", conditions=[target()], deleting=NOW + 30), None),
    ("terminal pods keep it", pod("p", phase="Failed", conditions=[target(since=NOW - 600)]), None),
])
def test_stale_disruption_target(case: str, the_pod: dict[str, Any], want: float | None) -> None:
    assert stale.stale_in(the_pod, NOW) == want, case
    plan = stale.reset(the_pod, NOW)
    if want == 0.0:
        (patch,) = plan.of_type(Patch)
        assert patch.subresource == "status" and patch.patch["status"]["conditions"] == [
            {"type": "DisruptionTarget", "status": "False", "lastTransitionTime": ts(NOW)}]
        assert patch.patch["metadata"]["resourceVersion"] == the_pod["metadata"].get("resourceVersion", "")
    else:
        assert plan.of_type(Patch) == [] and plan.requeue_after == want, case
