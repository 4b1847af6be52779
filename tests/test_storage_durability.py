"""The durability promise, tested by killing the real process and by filling a real disk.

- SIGKILL: a child runs the SQLite store under 16 concurrent writers and acknowledges each txn
  after txn() returned (tests/storage_crash_child.py); it is killed at a random moment, many times
  over on the same database. After each kill the log is read with plain sqlite3 (not the store's
  code) and by reopening the store: every acknowledged txn is there whole, the revisions are
  contiguous from 1, every revision holds one whole txn, the CAS counter lost no increment, and
  the reopened store continues the revision counter.
- Disk full: the store on a 1 MiB tmpfs this test mounts (as root) fails commits with StoreError,
  keeps nothing of them in memory or on disk, and writes again once space is freed.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from storage_backends import put

from nodeagent.cluster.storage import logdb
from nodeagent.cluster.storage.interface import Compare, Put, StoreError
from nodeagent.cluster.storage.sqlite import SqliteStore

CHILD = Path(__file__).with_name("storage_crash_child.py")
ROUNDS = 12  # kills per writer kind


def _run_and_kill(db: str, writer: str, seed: int, rng: random.Random) -> tuple[int, list[tuple[int, str, int, int]]]:
    """Start the child, let it commit for a random while, SIGKILL it; (revision at open, acks)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CHILD.parent.parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, str(CHILD), db, writer, str(seed)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[0] == b"open", first
    opened = int(first[1])
    time.sleep(rng.uniform(0.02, 0.4))  # under load: the writers never stop
    proc.send_signal(signal.SIGKILL)
    out = proc.stdout.read()  # every line written before the kill is an acknowledged txn
    proc.wait()
    acks = []
    for line in out.decode().splitlines():
        if line.count(" ") == 3 and line.endswith(tuple("0123456789")):  # a line cut by the kill is no ack
            rev, kind, w, n = line.split()
            acks.append((int(rev), kind, int(w), int(n)))
    return opened, acks


def _log_rows(db: str) -> dict[int, list[tuple[str, int, bytes]]]:
    """revision -> [(name, deleted, value)], read with plain sqlite3."""
    fd = logdb.lock(db, timeout=30)  # a process writer may still finish the batches it had
    try:
        conn = sqlite3.connect(db)
        rows: dict[int, list[tuple[str, int, bytes]]] = defaultdict(list)
        for rowid, name, deleted, value in conn.execute("SELECT id, name, deleted, value FROM log ORDER BY id"):
            rows[rowid >> logdb.SHIFT].append((name, deleted, value))
        conn.close()
        return rows
    finally:
        os.close(fd)


def _check_whole(rev: int, rows: list[tuple[str, int, bytes]]) -> None:
    """A revision's rows are exactly one of the child's txns."""
    names = sorted(name for name, _, _ in rows)
    if names[0] == "/counter":
        assert len(rows) == 1, (rev, rows)
    elif names[0].startswith("/d/"):
        w = names[0].split("/")[2]
        assert names in ([f"/d/{w}"], [f"/d/{w}", f"/m/{w}/b"]), (rev, rows)
        assert all(deleted == (name != f"/d/{w}") for name, deleted, _ in rows), (rev, rows)
    else:
        w = names[0].split("/")[2]
        assert names == [f"/m/{w}/a", f"/m/{w}/b", f"/m/{w}/c"], (rev, rows)
        assert len({value for _, _, value in rows}) == 1, (rev, rows)


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_sigkill_under_load_loses_no_acknowledged_txn_and_leaves_none_half_done(tmp_path: Path, writer: str) -> None:
    db = str(tmp_path / "store.db")
    rng = random.Random(f"kill-{writer}")
    total_acks, expected_open = 0, 0
    for round_ in range(ROUNDS):
        opened, acks = _run_and_kill(db, writer, round_, rng)
        assert opened == expected_open, f"round {round_}: the store reopened at {opened}, the log ended at {expected_open}"
        assert acks, f"round {round_}: nothing was acknowledged"
        revs = [a[0] for a in acks]
        assert len(set(revs)) == len(revs), "two acknowledged txns with one revision"
        rows = _log_rows(db)
        top = max(rows)
        assert sorted(rows) == list(range(1, top + 1)), "revisions are not contiguous"
        for rev, kind, w, n in acks:
            assert rev in rows, f"round {round_}: acknowledged revision {rev} ({kind}) is lost"
            got = rows[rev]
            if kind == "m":
                assert got == [(f"/m/{w}/{x}", 0, f"m:{w}:{n}".encode()) for x in "abc"]
            elif kind == "c":
                assert got == [("/counter", 0, str(n).encode())]
            else:
                assert (f"/d/{w}", 0, f"d:{w}:{n}".encode()) in got
        for rev, rev_rows in rows.items():
            _check_whole(rev, rev_rows)
        counter = [int(v) for rev in sorted(rows) for name, _, v in rows[rev] if name == "/counter"]
        assert counter == list(range(1, len(counter) + 1)), "a CAS increment was lost or doubled"
        total_acks += len(acks)
        expected_open = top
    assert total_acks > ROUNDS * 10

    in_log = _log_rows_latest(db)

    async def reopen() -> None:  # the store itself agrees with the log, and continues
        store = await SqliteStore.open(db, writer=writer)  # type: ignore[arg-type]
        try:
            assert store.revision == expected_open
            latest = await store.range("")
            assert {kv.key: kv.value for kv in latest.kvs} == in_log
            assert (await put(store, "/after", "x")) == expected_open + 1
        finally:
            await store.close()

    asyncio.run(reopen())


def _log_rows_latest(db: str) -> dict[str, bytes]:
    rows = _log_rows(db)
    latest: dict[str, bytes | None] = {}
    for rev in sorted(rows):
        for name, deleted, value in rows[rev]:
            latest[name] = None if deleted else value
    return {k: v for k, v in latest.items() if v is not None}


# -- disk full


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


async def test_disk_full_fails_the_batch_keeps_nothing_of_it_and_recovers(small_disk: Path) -> None:
    db = str(small_disk / "store.db")
    store = await SqliteStore.open(db)
    filler = small_disk / "filler"
    try:
        with open(filler, "wb") as f:  # leave the store ~300 KiB
            f.write(b"\0" * (700 * 1024))
        value = os.urandom(16 * 1024)
        acked: dict[str, int] = {}
        failed: list[StoreError] = []
        for i in range(200):
            # a few txns at once: they share a batch, and a failing batch fails them all
            results = await asyncio.gather(*(store.txn([], [Put(f"/v/{i}/{j}", value)]) for j in range(4)),
                                           return_exceptions=True)
            for j, r in enumerate(results):
                if isinstance(r, BaseException):
                    assert isinstance(r, StoreError), r
                    failed.append(r)
                else:
                    acked[f"/v/{i}/{j}"] = r.revision
            if failed:
                break
        assert failed, "the disk never filled up"
        assert "full" in str(failed[0]) or "I/O" in str(failed[0]), failed[0]
        top = max(acked.values())
        assert store.revision == top  # nothing of the failed batch in memory
        assert {kv.key for kv in (await store.range("/v/")).kvs} == set(acked)
        with pytest.raises(StoreError):  # still full (320 KiB more cannot fit): nothing applied
            await store.txn([], [Put(f"/more/{j}", value) for j in range(20)])
        assert store.revision == top

        filler.unlink()  # space again: the same store writes again, the revision continues
        r = await store.txn([Compare("/after", "create_revision", "=", 0)], [Put("/after", b"ok")])
        assert r.succeeded and r.revision == top + 1
        await store.close()

        store = await SqliteStore.open(db)  # and on disk: every acked txn, none of the failed
        assert store.revision == top + 1
        keys = {kv.key: kv.mod_revision for kv in (await store.range("/v/")).kvs}
        assert keys == acked
        assert (await store.get("/after"))[0] is not None
    finally:
        await store.close()
