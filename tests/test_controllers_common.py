"""The controllers' shared vocabulary: selectors, IntOrString rounding, pod predicates and the
ActivePodsWithRanks order (cases from controller_utils_test.go TestSortingActivePodsWithRanks),
conditions, claiming (controller_ref_manager_test.go), expectations, hashing, taints, affinity."""

from __future__ import annotations

import pytest
from controllers_objects import NOW, pod, replicaset
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.cluster.controllers.common import conditions, hashing, intstr, nodeaffinity, ownership, selectors, taints
from nodeagent.cluster.controllers.common.actions import Create, SlowStart, batch_sizes
from nodeagent.cluster.controllers.common.backoff import Backoff
from nodeagent.cluster.controllers.common.expectations import EXPECTATIONS_TIMEOUT, Expectations
from nodeagent.cluster.controllers.common.meta import parse_time
from nodeagent.cluster.controllers.common.pods import deletion_cost, is_available, ranked_cmp, sort_active

HOUR = 3600.0
MONTH = 30 * 86400.0


@pytest.mark.parametrize(("sel", "lbls", "want"), [
    (None, {"a": "1"}, False),                       # nil selects nothing
    ({}, {"a": "1"}, True),                          # empty selects everything
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, {"a": ""}, False),
])
def test_label_selector_matching(sel, lbls, want) -> None:
    assert selectors.matches(sel, lbls) is want


def test_selector_errors_name_the_field() -> None:
    errs = selectors.selector_errors({"matchExpressions": [{"key": "a", "operator": "In"}]})
    assert [e.path for e in errs] == ["spec.selector.matchExpressions[0].values"]
    assert [e.path for e in selectors.selector_errors({"matchExpressions": [{"key": "a", "operator": "Near"}]})] == \
        ["spec.selector.matchExpressions[0].operator"]


@pytest.mark.parametrize(("value", "total", "up", "want"), [
    (3, 10, True, 3), ("25%", 10, True, 3), ("25%", 10, False, 2), ("25%", 4, False, 1), ("1%", 2, False, 0),
    ("1%", 2, True, 1), ("0%", 5, True, 0), ("100%", 7, False, 7), ("33%", 3, True, 1), (None, 5, True, 0),
])
def test_intstr_rounding(value, total, up, want) -> None:
    assert intstr.scaled_value(value, total, up) == want


@pytest.mark.parametrize("bad", ["25", "abc%", "%", True, 2.5])
def test_intstr_rejects_non_percentages(bad) -> None:
    with pytest.raises(intstr.IntOrStringError):
        intstr.scaled_value(bad, 10, True)


def test_parse_time_reads_seconds_fractions_and_offsets() -> None:
    assert parse_time("2023-11-14T22:13:20Z") == NOW
    assert parse_time("2023-11-14T22:13:20.500000Z") == NOW + 0.5
    assert parse_time("2023-11-14T23:13:20+01:00") == NOW
    assert parse_time("") is None and parse_time(None) is None and parse_time("yesterday") is None


@pytest.mark.parametrize(("text", "want"), [("10", 10), ("-5", -5), ("+7", 7), ("1_0", 0), (" 1", 0), ("2147483648", 0), ("x", 0)])
def test_deletion_cost_is_an_int32_or_zero(text, want) -> None:
    assert deletion_cost(pod("p", annotations={"controller.kubernetes.io/pod-deletion-cost": text})) == want


def test_available_needs_min_ready_seconds_strictly_passed() -> None:
    p = pod("p", ready_since=NOW - 10)
    assert is_available(p, 0, NOW) and is_available(p, 9, NOW)
    assert not is_available(p, 10, NOW) and not is_available(pod("q", ready=False), 0, NOW)


def _p(name, node, phase, ready, restarts, ready_since, created, cost=None):
    return pod(name, node=node, phase=phase, ready=ready, restarts=restarts, ready_since=ready_since, created=created, uid="",
               annotations={"controller.kubernetes.io/pod-deletion-cost": cost} if cost else None)


unscheduled = _p("unscheduled", "", "Pending", False, 0, None, None)
pending = _p("pending", "node", "Pending", False, 0, None, None)
unknown = _p("unknown-phase", "node", "Unknown", False, 0, None, None)
not_ready = _p("not-ready", "node", "Running", False, 0, None, None)
ready_no_ltt = _p("ready-no-ltt", "node", "Running", True, 0, None, None)
ready_now = _p("ready-now", "node", "Running", True, 0, NOW, NOW)
ready_then = _p("ready-then", "node", "Running", True, 0, NOW - MONTH, NOW - MONTH)
ready_restarts = _p("ready-high-restarts", "node", "Running", True, 9001, NOW, NOW)
ready_now_created_then = _p("ready-now-created-then", "node", "Running", True, 0, NOW, NOW - MONTH)
low_cost = _p("low-cost", "node", "Running", True, 0, NOW, NOW - MONTH, "10")
high_cost = _p("high-cost", "node", "Running", True, 0, NOW, NOW - MONTH, "100")
unscheduled_5h = _p("u5", "", "Pending", False, 0, NOW - 5 * HOUR, NOW - 5 * HOUR)
unscheduled_8h = _p("u8", "", "Pending", False, 0, NOW - 8 * HOUR, NOW - 8 * HOUR)
ready_2h = _p("r2", "", "Running", True, 0, NOW - 2 * HOUR, NOW - MONTH)
ready_5h = _p("r5", "", "Running", True, 0, NOW - 5 * HOUR, NOW - MONTH)
ready_8h = _p("r8", "", "Running", True, 0, NOW - 8 * HOUR, NOW - MONTH)


@pytest.mark.parametrize(("a", "b"), [
    (unscheduled, unscheduled), (pending, pending), (ready_now, ready_now), (ready_restarts, ready_restarts),
    (unscheduled_5h, unscheduled_8h),   # same log2 bucket and the same (empty) uid: equal
    (ready_5h, ready_8h),
])
def test_ranked_order_equalities(a, b) -> None:
    assert ranked_cmp((a, 1), (b, 1), NOW) == 0 and ranked_cmp((b, 1), (a, 1), NOW) == 0


@pytest.mark.parametrize(("lesser", "greater"), [
    ((unscheduled, 1), (pending, 2)), ((unscheduled, 2), (pending, 1)),   # 1: unassigned first, whatever the rank
    ((pending, 1), (unknown, 2)), ((unknown, 1), (not_ready, 2)),          # 2: Pending < Unknown < Running
    ((not_ready, 1), (ready_no_ltt, 1)),                                   # 3: not ready first
    ((low_cost, 2), (high_cost, 1)),                                       # 4: deletion cost beats rank
    ((ready_no_ltt, 1), (ready_now, 1)),                                   # 6: zero ready time first
    ((ready_now, 2), (ready_no_ltt, 1)),                                   # 5: higher rank first
    ((ready_now, 1), (ready_then, 1)), ((ready_now, 2), (ready_then, 1)),
    ((ready_restarts, 1), (ready_now, 1)), ((ready_now, 2), (ready_restarts, 1)),   # 7: restarts
    ((ready_now, 1), (ready_now_created_then, 1)),                          # 8: newer first
    ((ready_now_created_then, 2), (ready_now, 1)),
    ((ready_2h, 1), (ready_5h, 1)),                                        # log scale: 2 h and 5 h differ
])
def test_ranked_order_inequalities(lesser, greater) -> None:
    assert ranked_cmp(lesser, greater, NOW) == -1
    assert ranked_cmp(greater, lesser, NOW) == 1


def test_log_scale_tie_goes_to_the_smaller_uid() -> None:
    a = pod("a", ready_since=NOW - 5 * HOUR, uid="bbb")
    b = pod("b", ready_since=NOW - 7 * HOUR, uid="aaa")
    assert ranked_cmp((b, 0), (a, 0), NOW) == -1       # same bucket: uid "aaa" < "bbb"
    assert ranked_cmp((a, 0), (b, 0), None) == -1      # without log scale: the more recently ready


def test_active_pods_order_is_the_unranked_one() -> None:
    got = sort_active([ready_then, ready_now, not_ready, unscheduled, pending])
    assert [p["metadata"]["name"] for p in got] == ["unscheduled", "pending", "not-ready", "ready-now", "ready-then"]


def test_conditions_keep_transition_time_when_only_the_reason_changes() -> None:
    c1 = conditions.new_condition("Progressing", "True", "A", "m", NOW, update_time=True)
    c2 = conditions.new_condition("Progressing", "True", "B", "m", NOW + 60, update_time=True)
    out = conditions.set_condition([c1], c2)
    assert out[0]["reason"] == "B" and out[0]["lastTransitionTime"] == c1["lastTransitionTime"]
    assert conditions.set_condition(out, conditions.new_condition("Progressing", "True", "B", "x", NOW + 99)) == out
    st_ = conditions.set_status_condition([], {"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods"}, NOW)
    st2 = conditions.set_status_condition(st_, {"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods"}, NOW + 5)
    assert st2 == st_
    conds, changed = conditions.ensure_job_condition([], "Suspended", "False", "JobResumed", "Job resumed", NOW)
    assert conds == [] and not changed   # never adds a False condition


def test_claim_adopts_releases_and_refuses_as_upstream() -> None:
    rs = replicaset("web")
    other = replicaset("other")
    mine = pod("mine", owner=rs)
    drifted = pod("drifted", owner=rs, labels={"app": "api"})
    orphan = pod("orphan")
    foreign = pod("foreign", owner=other)
    dying_orphan = pod("dying", deleting=NOW)
    elsewhere = pod("elsewhere", namespace="other")
    c = ownership.claim(rs, "apps/v1", "ReplicaSet", rs["spec"]["selector"], [mine, drifted, orphan, foreign, dying_orphan, elsewhere])
    assert [p["metadata"]["name"] for p in c.claimed] == ["mine", "orphan"]
    assert [p["metadata"]["name"] for p in c.adopt] == ["orphan"]
    assert [p["metadata"]["name"] for p in c.release] == ["drifted"]
    deleting_rs = replicaset("web", deleting=NOW, uid=rs["metadata"]["uid"])
    c2 = ownership.claim(deleting_rs, "apps/v1", "ReplicaSet", rs["spec"]["selector"], [mine, drifted, orphan])
    assert [p["metadata"]["name"] for p in c2.claimed] == ["mine"] and not c2.adopt and not c2.release
    patch = ownership.adopt_patch(rs, "apps/v1", "ReplicaSet", orphan)
    assert patch["metadata"]["uid"] == orphan["metadata"]["uid"]
    assert patch["metadata"]["ownerReferences"][0] | {} == {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                                           "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    assert ownership.release_patch("u1", drifted)["metadata"]["ownerReferences"] == [{"$patch": "delete", "uid": "u1"}]


def test_expectations_block_until_observed_or_expired() -> None:
    e = Expectations()
    assert e.satisfied("ns/rs", NOW)
    e.expect_creations("ns/rs", 2, NOW)
    assert not e.satisfied("ns/rs", NOW)
    e.creation_observed("ns/rs")
    assert not e.satisfied("ns/rs", NOW + 1)
    e.creation_observed("ns/rs")
    assert e.satisfied("ns/rs", NOW + 1)
    e.expect_deletions("ns/rs", ["ns/p1"], NOW)
    e.deletion_observed("ns/rs", "ns/other")
    assert not e.satisfied("ns/rs", NOW)
    assert e.satisfied("ns/rs", NOW + EXPECTATIONS_TIMEOUT + 1)
    e.deletion_observed("ns/rs", "ns/p1")
    e.deletion_observed("ns/rs", "ns/p1")   # a second sighting of the same pod does not count
    assert e.pending("ns/rs") == (0, 0) and e.satisfied("ns/rs", NOW)


@pytest.mark.parametrize(("count", "want"), [(0, []), (1, [1]), (2, [1, 1]), (7, [1, 2, 4]), (10, [1, 2, 4, 3]), (500, [1, 2, 4, 8, 16, 32, 64, 128, 245])])
def test_slow_start_batches(count, want) -> None:
    assert batch_sizes(count) == want
    assert [len(b) for b in SlowStart(tuple(Create({}) for _ in range(count))).batches()] == want


def test_hash_is_stable_ignores_empties_and_changes_with_collisions() -> None:
    t = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    t2 = {"spec": {"containers": [{"image": "x", "name": "c", "env": []}]}, "metadata": {"labels": {"app": "web"}, "annotations": {}}}
    h = hashing.compute_hash(t, None)
    assert h == hashing.compute_hash(t2, None)
    assert h != hashing.compute_hash(t, 1) and hashing.compute_hash(t, 1) != hashing.compute_hash(t, 2)
    assert set(h) <= set("bcdfghjklmnpqrstvwxz2456789") and 1 <= len(h) <= 10
    assert hashing.fnv32a(b"") == 0x811C9DC5 and hashing.fnv32a(b"a") == 0xE40C292C   # FNV-1a reference vectors
    assert hashing.safe_encode("0123456789") == "qrstvwxz24"[:0] + "".join("bcdfghjklmnpqrstvwxz2456789"[ord(c) % 27] for c in "0123456789")
    hashed = {"metadata": {"labels": {"app": "web", "pod-template-hash": h}}, "spec": t["spec"]}
    assert hashing.equal_ignore_hash(t, hashed) and not hashing.equal_ignore_hash(t, {**t, "spec": {"containers": []}})


@given(st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5)), max_size=6))
def test_hash_does_not_depend_on_key_order(d) -> None:
    tmpl = {"metadata": {"labels": d}, "spec": {}}
    rev = {"spec": {}, "metadata": {"labels": dict(reversed(list(d.items())))}}
    assert hashing.compute_hash(tmpl, None) == hashing.compute_hash(rev, None)


@pytest.mark.parametrize(("tol", "taint", "want"), [
    ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),            # empty effect: all
    ({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoExecute"}, False),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
    ({"operator": "Exists"}, {"key": "any", "effect": "NoSchedule"}, True),                         # empty key + Exists
    ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"key": "k", "effect": "NoExecute"}, False),
])
def test_tolerations(tol, taint, want) -> None:
    assert taints.tolerates(tol, taint) is want


def test_required_node_affinity() -> None:
    node = {"metadata": {"name": "n1", "labels": {"zone": "a", "gen": "5"}}}
    aff = lambda *terms: {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}}
    assert nodeaffinity.required_affinity_matches({}, node)
    assert not nodeaffinity.required_affinity_matches({"nodeSelector": {"zone": "b"}}, node)
    assert nodeaffinity.required_affinity_matches(aff({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}), node)
    assert not nodeaffinity.required_affinity_matches(aff({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}), node)
    assert nodeaffinity.required_affinity_matches(aff({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}), node)
    assert nodeaffinity.required_affinity_matches(aff({}, {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}), node)
    assert not nodeaffinity.required_affinity_matches(aff({}), node)   # an empty term matches nothing


def test_backoff_doubles_caps_and_forgets() -> None:
    b = Backoff(1, 8)
    b.next("k", 0)
    assert b.get("k") == 1 and b.in_backoff_since_update("k", 0.5) and not b.in_backoff_since_update("k", 1.5)
    for t in range(1, 6):
        b.next("k", t)
    assert b.get("k") == 8
    b.next("k", 5 + 17)   # idle for more than 2*cap: starts over
    assert b.get("k") == 1
