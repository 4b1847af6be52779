"""Job decisions against upstream's behaviour (job_controller_test.go: TestControllerSyncJob cases
for parallelism/completions, backoff limit, active deadline, suspend; TestTrackJobStatusAndRemoveFinalizers;
backoff_utils_test.go; pod_failure_policy_test.go; indexed_job_utils_test.go; ttlafterfinished)."""

from __future__ import annotations

from typing import Any

import pytest
from controllers_objects import NOW, meta, pod, ts

from nodeagent.cluster.controllers.common.actions import Delete, Event, Patch, SlowStart, UpdateStatus
from nodeagent.cluster.controllers.job import backoff, failurepolicy, indexes, ttl
from nodeagent.cluster.controllers.job import reconcile as jc

FIN = [jc.TRACKING_FINALIZER]


def job(completions: int | None = 3, parallelism: int = 2, *, mode: str | None = None, backoff_limit: int = 6, status: dict | None = None,
        deadline: int | None = None, suspend: bool = False, policy: dict | None = None, ttl_after: int | None = None) -> dict[str, Any]:
    sp: dict[str, Any] = {"parallelism": parallelism, "backoffLimit": backoff_limit, "selector": {"matchLabels": {"job-name": "pi"}},
                          "template": {"metadata": {"labels": {"job-name": "pi"}},
                                       "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
    if completions is not None:
        sp["completions"] = completions
    if mode:
        sp["completionMode"] = mode
    if deadline is not None:
        sp["activeDeadlineSeconds"] = deadline
    if suspend:
        sp["suspend"] = True
    if policy:
        sp["podFailurePolicy"] = policy
    if ttl_after is not None:
        sp["ttlSecondsAfterFinished"] = ttl_after
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("pi", uid="job-uid"), "spec": sp,
            "status": status if status is not None else {"startTime": ts(NOW - 60)}}


def jpod(j, name, phase="Running", *, index=None, finished=None, exit_code=None, fin=True, **kw):
    ann = {indexes.COMPLETION_INDEX: str(index)} if index is not None else None
    cs = None
    if finished is not None or exit_code is not None:
        cs = [{"name": "c", "restartCount": 0, "state": {"terminated": {"exitCode": exit_code or 0, "finishedAt": ts(finished or NOW)}}}]
    return pod(name, phase=phase, owner=j, labels={"job-name": "pi"}, annotations=ann, finalizers=FIN if fin else None,
               container_statuses=cs, **kw)


def creates(sync) -> list[dict]:
    return [c.obj for s in sync.plan.of_type(SlowStart) for c in s.creates]


def final_status(sync) -> dict:
    patches = [p for p in sync.plan.of_type(Patch) if p.subresource == "status"]
    if patches:
        return patches[-1].patch["status"]
    (u,) = sync.plan.of_type(UpdateStatus)
    return u.obj["status"]


def test_creates_parallelism_pods_with_the_tracking_finalizer() -> None:
    j = job(3, 2)
    s = jc.sync(j, [], now=NOW)
    pods = creates(s)
    assert len(pods) == 2 and s.expect_creations == 2
    assert pods[0]["metadata"]["generateName"] == "pi-" and pods[0]["metadata"]["finalizers"] == FIN
    assert pods[0]["metadata"]["ownerReferences"][0]["uid"] == "job-uid"


def test_never_more_active_than_remaining_completions() -> None:
    j = job(3, 5, status={"startTime": ts(NOW - 60), "succeeded": 2})
    assert len(creates(jc.sync(j, [], now=NOW))) == 1


def test_indexed_pods_carry_their_index() -> None:
    j = job(4, 2, mode="Indexed", status={"startTime": ts(NOW - 60), "completedIndexes": "0", "succeeded": 1})
    s = jc.sync(j, [jpod(j, "pi-1", index=1)], now=NOW)
    (p,) = creates(s)
    assert p["metadata"]["annotations"][indexes.COMPLETION_INDEX] == "2" and p["metadata"]["labels"][indexes.COMPLETION_INDEX] == "2"
    assert p["metadata"]["generateName"] == "pi-2-" and p["spec"]["hostname"] == "pi-2"
    assert p["spec"]["containers"][0]["env"] == [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}}]


def test_duplicate_and_invalid_indexes_are_removed() -> None:
    j = job(2, 2, mode="Indexed")
    pods = [jpod(j, "a", index=0, ready=False), jpod(j, "b", index=0), jpod(j, "c", index=5), jpod(j, "d", index=1)]
    s = jc.sync(j, pods, now=NOW)
    assert sorted(d.ref.name for d in s.plan.of_type(Delete)) == ["a", "c"]


def test_a_succeeded_pod_is_counted_through_uncounted_then_finalizer_then_counter() -> None:
    j = job(1, 1)
    done = jpod(j, "pi-a", "Succeeded", finished=NOW - 5)
    s = jc.sync(j, [done], now=NOW)
    (u,) = s.plan.of_type(UpdateStatus)
    assert u.obj["status"]["uncountedTerminatedPods"]["succeeded"] == [done["metadata"]["uid"]]
    conds = {c["type"]: c for c in u.obj["status"]["conditions"]}
    assert (conds["SuccessCriteriaMet"]["reason"], conds["SuccessCriteriaMet"]["message"]) == ("CompletionsReached", "Reached expected number of succeeded pods")
    rm = [p for p in s.plan.of_type(Patch) if p.subresource == ""]
    assert [p.ref.name for p in rm] == ["pi-a"] and rm[0].patch == {"metadata": {"$deleteFromPrimitiveList/finalizers": FIN}}
    st = final_status(s)
    assert st["succeeded"] == 1 and st["uncountedTerminatedPods"] == {"succeeded": None, "failed": None}  # merge patch: removed
    assert [c["type"] for c in st["conditions"]] == ["SuccessCriteriaMet", "Complete"] and st["completionTime"] == ts(NOW)
    order = [type(a).__name__ + ":" + getattr(a, "subresource", "") for a in s.plan.actions]
    assert order.index("UpdateStatus:") < order.index("Patch:") < order.index("Patch:status")   # crash-safe order


def test_finished_jobs_are_left_alone() -> None:
    j = job(status={"conditions": [{"type": "Complete", "status": "True"}]})
    assert jc.sync(j, [], now=NOW).plan.actions == []


@pytest.mark.parametrize(("failures", "want"), [(0, 0), (1, 10), (2, 20), (3, 40), (6, 320), (7, 600), (30, 600)])
def test_pod_failure_backoff_doubles_from_10s_capped(failures, want) -> None:
    assert backoff.delay(failures) == want
    assert backoff.delay(failures, cap=360) == min(want, 360)   # the docs' six minutes, as a parameter


def test_backoff_record_counts_failures_after_the_last_success() -> None:
    j = job()
    f1, f2 = jpod(j, "f1", "Failed", finished=NOW - 30), jpod(j, "f2", "Failed", finished=NOW - 10)
    ok = jpod(j, "ok", "Succeeded", finished=NOW - 20)
    r = backoff.next_record(backoff.BackoffRecord(), [], [f1, f2])
    assert r == backoff.BackoffRecord(2, NOW - 10)
    assert backoff.next_record(r, [ok], [f1, f2]) == backoff.BackoffRecord(1, NOW - 10)
    assert backoff.next_record(r, [ok], []) == backoff.BackoffRecord(0, None)
    assert backoff.remaining(backoff.BackoffRecord(2, NOW - 5), NOW) == 15


def test_replacement_waits_for_the_backoff_and_requeues() -> None:
    j = job(3, 1, status={"startTime": ts(NOW - 60), "failed": 1})
    s = jc.sync(j, [jpod(j, "f", "Failed", finished=NOW - 4)], now=NOW, record=backoff.BackoffRecord(1, NOW - 30))
    assert not creates(s) and s.plan.requeue_after == pytest.approx(16)   # 2 failures: 20 s after the last, 4 s ago
    assert s.backoff == backoff.BackoffRecord(2, NOW - 4)


def test_backoff_limit_exceeded_fails_after_active_pods_are_gone() -> None:
    j = job(3, 2, backoff_limit=1, status={"startTime": ts(NOW - 60), "failed": 1})
    running = jpod(j, "r", "Running")
    s = jc.sync(j, [running, jpod(j, "f", "Failed", finished=NOW)], now=NOW)
    assert [d.ref.name for d in s.plan.of_type(Delete)] == ["r"]
    (u,) = s.plan.of_type(UpdateStatus)
    ft = next(c for c in u.obj["status"]["conditions"] if c["type"] == "FailureTarget")
    assert (ft["reason"], ft["message"]) == ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert not any(c["type"] == "Failed" for c in final_status(s).get("conditions", []))   # a pod is still terminating
    later = job(3, 2, backoff_limit=1, status=final_status(s))
    s2 = jc.sync(later, [], now=NOW + 30)
    failed = next(c for c in final_status(s2)["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and [e.reason for e in s2.plan.of_type(Event)] == ["BackoffLimitExceeded"]


def test_active_deadline() -> None:
    j = job(3, 1, deadline=100, status={"startTime": ts(NOW - 40)})
    assert jc.sync(j, [jpod(j, "r")], now=NOW).plan.requeue_after == pytest.approx(60)
    s = jc.sync(j, [jpod(j, "r")], now=NOW + 60)
    ft = next(c for c in final_status(s)["conditions"] if c["type"] == "FailureTarget")
    assert (ft["reason"], ft["message"]) == ("DeadlineExceeded", "Job was active longer than specified deadline")


@pytest.mark.parametrize(("rules", "code", "want"), [
    ([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}], 42,
     ("Container c for pod default/f failed with exit code 42 matching FailJob rule at index 0", True, "FailJob")),
    ([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}}], 1, (None, False, "Ignore")),
    ([{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [42]}}], 1, (None, True, "Count")),
    ([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}], 1, (None, True, None)),
])
def test_pod_failure_policy_exit_codes(rules, code, want) -> None:
    p = pod("f", phase="Failed", container_statuses=[{"name": "c", "state": {"terminated": {"exitCode": code}}}])
    assert failurepolicy.match({"rules": rules}, p) == want


def test_pod_failure_policy_conditions_and_the_job_failing() -> None:
    rules = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                       {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]}
    disrupted = pod("d", phase="Failed", conditions=[{"type": "DisruptionTarget", "status": "True"}])
    assert failurepolicy.match(rules, disrupted) == (None, False, "Ignore")
    j = job(2, 1, policy=rules)
    s = jc.sync(j, [jpod(j, "f", "Failed", exit_code=3)], now=NOW)
    ft = next(c for c in final_status(s)["conditions"] if c["type"] == "FailureTarget")
    assert ft["reason"] == "PodFailurePolicy" and "matching FailJob rule at index 1" in ft["message"]


def test_suspend_deletes_active_pods_and_says_so() -> None:
    j = job(3, 2, suspend=True)
    s = jc.sync(j, [jpod(j, "a"), jpod(j, "b")], now=NOW)
    assert len(s.plan.of_type(Delete)) == 2 and not creates(s)
    (u,) = s.plan.of_type(UpdateStatus)
    sus = next(c for c in u.obj["status"]["conditions"] if c["type"] == "Suspended")
    assert (sus["status"], sus["reason"]) == ("True", "JobSuspended")


def test_intervals_round_trip() -> None:
    assert indexes.format_intervals([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert indexes.parse("0-2,5,7-8", 8) == {0, 1, 2, 5, 7}
    assert indexes.generate_name("x" * 60, 12) == "x" * 54 + "-12-"


def test_ttl_after_finished() -> None:
    done = job(ttl_after=100, status={"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": ts(NOW - 30)}]})
    assert ttl.decide(done, NOW).requeue_after == 70
    (d,) = ttl.decide(done, NOW + 70).of_type(Delete)
    assert d.propagation == "Foreground" and d.ref.uid == "job-uid"
    assert ttl.decide(job(ttl_after=100), NOW).actions == []


def test_a_finished_jobs_active_pods_are_deleted_with_their_finalizers_kept() -> None:
    """deleteActivePods preserves finalizers (tracking removes them) and sets no expectations;
    manageJob's deleteJobPods removes the finalizer first and expects the deletion."""
    j = job(3, 2, backoff_limit=0, status={"startTime": ts(NOW - 60)})
    running = jpod(j, "r")
    s = jc.sync(j, [running, jpod(j, "f", "Failed", finished=NOW)], now=NOW, satisfied=False)
    acts = [(type(a).__name__, a.ref.name) for a in s.plan.actions[: s.tracking_from] if isinstance(a, Patch | Delete)]
    assert acts == [("Delete", "r")] and s.expect_deletions == []
    suspended = job(3, 2, suspend=True)
    s = jc.sync(suspended, [jpod(suspended, "a")], now=NOW)
    acts = [(type(a).__name__, a.ref.name) for a in s.plan.actions[: s.tracking_from] if isinstance(a, Patch | Delete)]
    assert acts == [("Patch", "a"), ("Delete", "a")] and s.expect_deletions == ["default/a"]


def test_uncounted_pods_whose_finalizer_removal_is_expected_are_counted() -> None:
    """cleanUncountedPodsWithoutFinalizers: a uid whose removal was sent counts as without finalizer."""
    j = job(3, 1)
    done = jpod(j, "d", "Succeeded", finished=NOW - 5)
    j["status"]["uncountedTerminatedPods"] = {"succeeded": [done["metadata"]["uid"]]}
    s = jc.sync(j, [done, jpod(j, "r")], now=NOW, expected_removed=frozenset({done["metadata"]["uid"]}))
    st = final_status(s)
    assert st["succeeded"] == 1 and st["uncountedTerminatedPods"] == {"succeeded": None, "failed": None}
    assert s.expect_finalizer_removals == []   # not patched twice
    # a crash after the finalizer came off and before the counters were written: counted on the next sync
    released = jpod(j, "d", "Succeeded", finished=NOW - 5, fin=False)
    j["status"]["uncountedTerminatedPods"] = {"succeeded": [released["metadata"]["uid"]]}
    st = final_status(jc.sync(j, [released, jpod(j, "r")], now=NOW))
    assert st["succeeded"] == 1 and st["uncountedTerminatedPods"] == {"succeeded": None, "failed": None}


def test_empty_uncounted_lists_are_omitted_as_the_api_serializes_them() -> None:
    j = job(3, 1, status={"startTime": ts(NOW - 60)})
    (u,) = jc.sync(j, [], now=NOW).plan.of_type(UpdateStatus)
    assert u.obj["status"]["uncountedTerminatedPods"] == {}


@pytest.mark.parametrize(("owner", "job_state", "removed"), [
    (None, None, True),                                              # released, or the collector dropped the reference
    ("Job", None, True),                                             # its Job is gone
    ("Job", "finished", True),                                       # its Job is finished: syncJob will not remove it
    ("Job", "running", False),                                       # ours, running: syncJob's business
    ("ReplicaSet", None, False),                                     # not a Job's pod: not ours to touch
])
def test_orphan_pod_finalizer(owner, job_state, removed) -> None:
    j = job(status={"conditions": [{"type": "Complete", "status": "True"}]} if job_state == "finished" else None)
    p = jpod(j, "p", "Succeeded")
    if owner is None:
        p["metadata"].pop("ownerReferences")
    elif owner == "ReplicaSet":
        p["metadata"]["ownerReferences"][0].update(apiVersion="apps/v1", kind="ReplicaSet")
    plan = jc.orphan_pod_plan(p, j if job_state else None)
    assert [a.patch for a in plan.of_type(Patch)] == ([{"metadata": {"$deleteFromPrimitiveList/finalizers": FIN}}]
                                                      if removed else [])
    p["metadata"].pop("finalizers")
    assert jc.orphan_pod_plan(p, None).actions == []
