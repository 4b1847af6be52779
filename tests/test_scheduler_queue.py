"""The scheduling queue: priority then arrival order, kube's 1 s .. 10 s backoff, and the unschedulable pool."""

from __future__ import annotations

import pytest

from nodeagent.cluster.scheduler.queue import SchedulingQueue
from nodeagent.core.clock import FakeClock


def drain(q: SchedulingQueue[str]) -> list[str]:
    out = []
    while (qp := q.pop()) is not None:
        out.append(qp.key)
    return out


def test_higher_priority_first_then_first_come_first_served() -> None:
    q: SchedulingQueue[str] = SchedulingQueue(FakeClock())
    for key, prio in [("a", 0), ("b", 10), ("c", 0), ("d", 10), ("e", -5), ("f", 1000)]:
        q.add(key, key, prio)
    assert drain(q) == ["f", "b", "d", "a", "c", "e"]


@pytest.mark.parametrize("attempts, seconds", [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0),
                                               (6, 10.0), (40, 10.0)])
def test_backoff_doubles_from_one_second_to_ten(attempts: int, seconds: float) -> None:
    assert SchedulingQueue(FakeClock()).backoff_duration(attempts) == seconds


def test_a_failed_pod_waits_out_its_backoff() -> None:
    clock = FakeClock()
    q: SchedulingQueue[str] = SchedulingQueue(clock)
    q.add("p", "p", 0)
    waits = []
    for _ in range(6):
        qp = q.pop()
        assert qp is not None and qp.key == "p"
        ready_at = q.requeue("p")
        waits.append(ready_at - clock.now())
        assert q.pop() is None and q.next_ready_at() == ready_at
        clock.advance(ready_at - clock.now() - 0.001)
        assert q.pop() is None
        clock.advance(0.001)
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert q.pop() is not None and q.pop() is None


def test_requeued_pods_queue_behind_pods_that_arrived_meanwhile() -> None:
    clock = FakeClock()
    q: SchedulingQueue[str] = SchedulingQueue(clock)
    q.add("first", "first", 5)
    assert q.pop().key == "first"  # type: ignore[union-attr]
    q.requeue("first")
    q.add("second", "second", 5)
    q.add("urgent", "urgent", 9)
    clock.advance(1.0)
    assert drain(q) == ["urgent", "second", "first"]


def test_done_forgets_attempts_and_delete_drops_a_pending_pod() -> None:
    clock = FakeClock()
    q: SchedulingQueue[str] = SchedulingQueue(clock)
    q.add("p", "p", 0)
    q.pop()
    q.requeue("p")
    clock.advance(1.0)
    assert q.pop().attempts == 2  # type: ignore[union-attr]
    q.done("p")
    assert "p" not in q and len(q) == 0
    q.add("p", "p", 0)
    assert q.pop().attempts == 1  # type: ignore[union-attr]
    q.add("gone", "gone", 100)
    q.delete("gone")
    assert q.pop() is None and q.next_ready_at() is None


def test_an_update_brings_a_pod_out_of_backoff_with_its_new_priority() -> None:
    clock = FakeClock()
    q: SchedulingQueue[str] = SchedulingQueue(clock)
    q.add("p", "v1", 0)
    q.add("other", "other", 5)
    assert q.pop().key == "other"  # type: ignore[union-attr]
    q.requeue("other")
    q.add("other", "v2", 7)
    qp = q.pop()
    assert qp is not None and (qp.key, qp.item, qp.priority) == ("other", "v2", 7)
    assert q.counts() == {"active": 1, "backoff": 0, "in-flight": 1, "unschedulable": 0}


def test_updating_a_pod_being_scheduled_keeps_its_turn() -> None:
    q: SchedulingQueue[str] = SchedulingQueue(FakeClock())
    q.add("p", "v1", 0)
    q.pop()
    q.add("p", "v2", 3)
    assert q.pop() is None and q.counts()["in-flight"] == 1
    q.requeue("p")
    with pytest.raises(ValueError, match="not being scheduled"):
        q.requeue("p")


def test_move_all_to_active_respects_backoff() -> None:
    clock = FakeClock()
    q: SchedulingQueue[str] = SchedulingQueue(clock, initial_backoff=2.0, max_backoff=4.0)
    q.add("p", "p", 0)
    q.pop()
    q.requeue("p")
    q.move_all_to_active()
    assert q.pop() is None
    clock.advance(2.0)
    q.move_all_to_active()
    assert q.counts()["active"] == 1


def test_an_unschedulable_pod_waits_for_a_cluster_event_not_for_its_backoff() -> None:
    clock = FakeClock()
    q: SchedulingQueue[str] = SchedulingQueue(clock, initial_backoff=2.0, max_backoff=4.0)
    q.add("p", "p", 0)
    q.pop()
    assert q.requeue("p", unschedulable=True) == clock.now() + 2.0
    clock.advance(10.0)  # its backoff has long ended: still not tried
    assert q.pop() is None and q.counts()["unschedulable"] == 1
    q.move_all_to_active()  # a node came: tried now, its backoff being over
    qp = q.pop()
    assert qp is not None and qp.key == "p" and qp.attempts == 2


def test_a_cluster_event_during_its_backoff_moves_an_unschedulable_pod_to_the_backoff_queue() -> None:
    clock = FakeClock()
    q: SchedulingQueue[str] = SchedulingQueue(clock, initial_backoff=2.0, max_backoff=4.0)
    q.add("p", "p", 0)
    q.pop()
    q.requeue("p", unschedulable=True)
    clock.advance(1.0)
    q.move_all_to_active()
    assert q.pop() is None and q.counts()["backoff"] == 1 and q.next_ready_at() == clock.now() + 1.0
    clock.advance(1.0)
    assert q.pop() is not None


def test_an_unschedulable_pod_is_tried_again_after_the_timeout_without_any_event() -> None:
    clock = FakeClock()
    q: SchedulingQueue[str] = SchedulingQueue(clock, unschedulable_timeout=300.0)
    q.add("p", "p", 0)
    q.pop()
    q.requeue("p", unschedulable=True)
    assert q.next_ready_at() == clock.now() + 300.0  # the loop sleeps until then
    clock.advance(299.0)
    assert q.pop() is None
    clock.advance(1.0)
    assert q.pop() is not None


def test_an_update_brings_a_pod_out_of_the_unschedulable_pool() -> None:
    q: SchedulingQueue[str] = SchedulingQueue(FakeClock())
    q.add("p", "v1", 0)
    q.pop()
    q.requeue("p", unschedulable=True)
    q.add("p", "v2", 0)
    qp = q.pop()
    assert qp is not None and qp.item == "v2" and q.counts()["unschedulable"] == 0


def test_backoff_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        SchedulingQueue(FakeClock(), initial_backoff=5.0, max_backoff=1.0)
    with pytest.raises(ValueError):
        SchedulingQueue(FakeClock(), unschedulable_timeout=0)
