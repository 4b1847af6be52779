"""The pure parts of the store: txn evaluation (etcd's compare and op semantics), key ranges,
the history's undo."""

from __future__ import annotations

import pytest

from nodeagent.cluster.storage.history import History
from nodeagent.cluster.storage.interface import Compare, DeleteKey, Event, Get, KeyValue, Put
from nodeagent.cluster.storage.keyspace import Keyspace, bounds, prefix_end
from nodeagent.cluster.storage.txn import check, compare, evaluate

KV = KeyValue("/k", b"b", 3, 5, 2)


@pytest.mark.parametrize(("c", "kv", "holds"), [
    (Compare("/k", "mod_revision", "=", 5), KV, True),
    (Compare("/k", "mod_revision", "<", 5), KV, False),
    (Compare("/k", "mod_revision", ">", 4), KV, True),
    (Compare("/k", "mod_revision", "!=", 5), KV, False),
    (Compare("/k", "create_revision", "=", 3), KV, True),
    (Compare("/k", "version", ">", 2), KV, False),
    (Compare("/k", "value", "=", b"b"), KV, True),
    (Compare("/k", "value", "<", b"c"), KV, True),
    (Compare("/k", "value", ">", b"ba"), KV, False),
    (Compare("/k", "mod_revision", "=", 0), None, True),
    (Compare("/k", "create_revision", "<", 1), None, True),
    (Compare("/k", "version", "!=", 0), None, False),
    (Compare("/k", "value", "=", b""), None, False),
    (Compare("/k", "value", "!=", b""), None, False),
    (Compare("/k", "value", "<", b"z"), None, False),
])
def test_compare(c: Compare, kv: KeyValue | None, holds: bool) -> None:
    assert compare(c, kv) is holds


def test_evaluate_success_branch_writes_with_the_given_revision() -> None:
    state = {"/a": KeyValue("/a", b"1", 1, 1, 1)}
    out = evaluate(state.get, [Compare("/a", "version", "=", 1)],
                   [Put("/a", b"2"), Put("/b", b"x"), DeleteKey("/a2"), Get("/b")], [], 7)
    assert out.succeeded
    assert out.responses == (state["/a"], None, None, KeyValue("/b", b"x", 7, 7, 1))
    assert out.events == (Event("PUT", KeyValue("/a", b"2", 1, 7, 2), state["/a"]),
                          Event("PUT", KeyValue("/b", b"x", 7, 7, 1), None))


def test_evaluate_failure_branch_and_delete_event_shape() -> None:
    state = {"/a": KeyValue("/a", b"1", 1, 4, 3)}
    out = evaluate(state.get, [Compare("/a", "version", "=", 1)], [Put("/never", b"")],
                   [DeleteKey("/a"), Get("/a")], 9)
    assert not out.succeeded
    assert out.responses == (state["/a"], None)
    assert out.events == (Event("DELETE", KeyValue("/a", b"", 0, 9, 0), state["/a"]),)


def test_evaluate_read_only_has_no_events() -> None:
    out = evaluate({}.get, [], [Get("/x"), DeleteKey("/x")], [], 3)
    assert out.responses == (None, None) and out.events == ()


@pytest.mark.parametrize(("args", "message"), [
    (([], [Put("/a", b""), Put("/a", b"")], []), r"success\[1\]\.key: '/a' is written twice"),
    (([], [], [DeleteKey("/a"), DeleteKey("/a")]), r"failure\[1\]\.key"),
    (([], [Get("/a"), Get("/a"), Put("/a", b"")], []), None),  # reads may repeat
    (([], [Put("/a", bytearray(b"x"))], []), r"success\[0\]\.value: must be bytes"),
    (([], [Put(None, b"")], []), r"success\[0\]\.key: must be a non-empty string"),
    (([Compare("/a", "version", "=", True)], [], []), r"compares\[0\]\.value"),
    (([Compare("/a", "mod_revision", "=", "1")], [], []), r"compares\[0\]\.value"),
    ((["nope"], [], []), r"compares\[0\]: must be a Compare"),
])
def test_check(args: tuple, message: str | None) -> None:
    if message is None:
        check(*args)
        return
    with pytest.raises(ValueError, match=message):
        check(*args)


@pytest.mark.parametrize(("prefix", "end"), [
    ("/registry/pods/", "/registry/pods0"),
    ("a", "b"),
    ("", None),
    ("a\U0010ffff", "b"),
    ("\U0010ffff", None),
])
def test_prefix_end(prefix: str, end: str | None) -> None:
    assert prefix_end(prefix) == end


def test_keyspace_range_and_count() -> None:
    ks = Keyspace()
    for key in ["/p/a", "/p/b", "/p/c", "/pa", "/q"]:
        ks.put(KeyValue(key, b"", 1, 1, 1))
    lo, hi = bounds("/p/", "")
    assert ks.count(lo, hi) == 3 and [k.key for k in ks.first(lo, hi, 2)] == ["/p/a", "/p/b"]
    lo, hi = bounds("/p/", "/p/b")
    assert ks.count(lo, hi) == 2
    lo, hi = bounds("", "/pa")
    assert [k.key for k in ks.first(lo, hi, 0)] == ["/pa", "/q"]
    ks.delete("/p/b")
    ks.delete("/missing")
    assert len(ks) == 4 and ks.get("/p/b") is None


def test_history_undo_and_trim() -> None:
    h = History(1)
    a1 = KeyValue("/a", b"1", 1, 1, 1)
    a2 = KeyValue("/a", b"2", 1, 2, 2)
    b3 = KeyValue("/b", b"3", 3, 3, 1)
    h.append(1, (Event("PUT", a1, None),))
    h.append(2, (Event("PUT", a2, a1),))
    h.append(3, (Event("PUT", b3, None), Event("DELETE", KeyValue("/a", b"", 0, 3, 0), a2)))
    assert h.changed_since(1, lambda k: True) == {"/a": a1, "/b": None}
    assert h.changed_since(0, lambda k: True) == {"/a": None, "/b": None}
    assert h.changed_since(2, "/b".__eq__) == {"/b": None}
    with pytest.raises(AssertionError):
        h.append(5, ())
    h.trim(3)
    assert (h.first, h.last) == (1, 3)
    h.trim(1)  # more than 1 + max(1, 1/8): back to the last 1
    assert (h.first, h.last) == (3, 3)
    h.append(4, (Event("PUT", KeyValue("/c", b"", 4, 4, 1), None),))
    h.trim(1)  # 2 is within 1 + 1: kept
    assert (h.first, h.last, h.covers(2), h.covers(1)) == (3, 4, True, False)
    h.drop_through(3)
    assert (h.first, len(h)) == (4, 1)
