"""CheckpointJournal: pod records made durable by group commit, so a 2xx can wait for the disk.

The per-pod files of checkpoint.py cost an fsync of the file and one of the directory each; a
burst of creates would queue on them one by one. So every change is first appended, as one line,
to `<stateDir>/checkpoints/journal.log`, and whoever is waiting while a batch is on its way to
disk joins the next one: one write and one fdatasync for all the records that arrived meanwhile
(the same group commit as the control plane's store). `commit()` returns once its record is on
disk: the manager answers a create only then, and starts the pod's first process only then.

Every line is `{"c": sha256 of the compact JSON of "d", "d": {"put": record} | {"delete": [ns, name]}}`.
A last line without its newline (a crash mid-write) was never acknowledged and is dropped; a
complete line that fails its checksum is reported and skipped, costing only its own pod's change.
A batch that fails (ENOSPC...) is truncated away again, so nothing the caller was told failed
can come back from the journal after a restart.

Compaction (at load, and when the journal passes `compact_bytes`) writes the latest state of
every pod the journal touched into its per-pod file (atomically, fsynced), then swaps in an empty
journal (rename + directory fsync). A crash at any point of it is harmless: replaying the old
journal over newer per-pod files gives the same records, every line being a whole record.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from nodeagent.agent.pods.checkpoint import (
    CheckpointProblem,
    CheckpointStore,
    PodCheckpoint,
    record_from_data,
    record_to_data,
)
from nodeagent.daemonkit import faults

log = structlog.get_logger(__name__)

JOURNAL = "journal.log"
COMPACT_BYTES = 4 << 20  # a record is ~1-2 KiB: thousands of changes between compactions

Key = tuple[str, str]


def _line(entry: dict[str, Any]) -> bytes:
    body = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    return json.dumps({"c": hashlib.sha256(body.encode()).hexdigest(), "d": entry},
                      sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _parse_line(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("d"), dict):
        raise ValueError("not a journal entry")
    body = json.dumps(doc["d"], sort_keys=True, separators=(",", ":"))
    if hashlib.sha256(body.encode()).hexdigest() != doc.get("c"):
        raise ValueError("checksum mismatch")
    entry: dict[str, Any] = doc["d"]
    return entry


@dataclass
class JournalStats:
    """What the journal did (for tests, metrics and the bench): batches are fdatasyncs."""

    commits: int = 0  # records acknowledged
    batches: int = 0  # write + fdatasync rounds
    failures: int = 0  # batches that failed (their callers got the error)
    compactions: int = 0
    sizes: list[int] = field(default_factory=list)  # records per batch, the last 100


class CheckpointJournal:
    """Group-committed changes over a CheckpointStore. `load_all()` first, then `put`/`delete`."""

    def __init__(self, store: CheckpointStore, *, compact_bytes: int = COMPACT_BYTES,
                 sync: Callable[[int], None] = os.fdatasync) -> None:
        self.store = store
        self.path = store.directory / JOURNAL
        self.compact_bytes = compact_bytes
        self._sync = sync
        self._fd: int | None = None
        self._size = 0
        self._latest: dict[Key, PodCheckpoint | None] = {}  # what the journal holds beyond the files
        self._pending: list[tuple[Key, PodCheckpoint | None, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._broken = False  # a failed batch could not be cut back: compact before the next one
        self.stats = JournalStats()

    # ---- startup ----
    def load_all(self) -> tuple[list[PodCheckpoint], list[CheckpointProblem]]:
        """The per-pod files with the journal replayed over them, then compacted (blocking: a thread)."""
        records, problems = self.store.load_all()
        state, touched, bad = self._replay({(r.namespace, r.name): r for r in records}, problems)
        if bad:
            moved = self.path.with_name(f"{JOURNAL}.corrupt-{os.getpid()}")
            moved.write_bytes(self.path.read_bytes())  # kept for a human; the good entries are compacted below
        self._latest = touched
        self._compact()
        self._open()
        return [r for r in state.values() if r is not None], problems

    def read(self) -> dict[Key, PodCheckpoint]:
        """What a restart would load now, changing nothing on disk (tests, tools)."""
        files = {}
        for path in sorted(self.store.directory.glob("*.json")):
            try:
                r = self.store.load_path(path)
            except (OSError, ValueError):
                continue
            files[(r.namespace, r.name)] = r
        state, _, _ = self._replay(dict(files), [])
        return {k: r for k, r in state.items() if r is not None}

    def _replay(self, state: dict[Key, PodCheckpoint | None], problems: list[CheckpointProblem]
                ) -> tuple[dict[Key, PodCheckpoint | None], dict[Key, PodCheckpoint | None], int]:
        """The journal's entries over `state`: (state, what the journal touched, bad entries)."""
        touched: dict[Key, PodCheckpoint | None] = {}
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        lines = raw.split(b"\n")
        if lines and lines[-1]:
            log.info("checkpoint_journal_torn_tail", bytes=len(lines[-1]))  # never acknowledged
        bad = 0
        for i, line in enumerate(lines[:-1]):
            try:
                key, record = self._entry(_parse_line(line))
            except ValueError as e:
                bad += 1
                problems.append(CheckpointProblem(self.path, f"journal entry {i + 1}: {e}", None))
                log.error("checkpoint_journal_entry_corrupt", entry=i + 1, error=str(e))
                continue
            state[key] = touched[key] = record
        return state, touched, bad

    @staticmethod
    def _entry(entry: dict[str, Any]) -> tuple[Key, PodCheckpoint | None]:
        if "put" in entry:
            r = record_from_data(entry["put"])
            return (r.namespace, r.name), r
        d = entry.get("delete")
        if isinstance(d, list) and len(d) == 2 and all(isinstance(x, str) for x in d):
            return (d[0], d[1]), None
        raise ValueError("neither put nor delete")

    def _open(self) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._size = os.fstat(self._fd).st_size

    def _compact(self) -> None:
        """Per-pod files from the journal's latest records, then an empty journal in its place."""
        for (ns, name), record in self._latest.items():
            if record is None:
                self.store.delete(ns, name)
            else:
                self.store.save(record)
        faults.hit("journal-compact-mid")
        tmp = self.path.with_name(JOURNAL + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.fsync(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.store.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._size = fd, 0
        self._latest = {}
        self.stats.compactions += 1

    # ---- changes ----
    async def put(self, record: PodCheckpoint) -> None:
        """Return once `record` is on disk; OSError if it could not be written."""
        await self._commit((record.namespace, record.name), record)

    async def delete(self, namespace: str, name: str) -> None:
        await self._commit((namespace, name), None)

    async def _commit(self, key: Key, record: PodCheckpoint | None) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((key, record, fut))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_batches(), name="checkpoint-journal")
        await asyncio.shield(fut)  # a cancelled caller does not cancel the others' batch

    async def _write_batches(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await asyncio.to_thread(self._write, [(k, r) for k, r, _ in batch])
            except Exception as e:  # noqa: BLE001 - every waiter of the batch gets the cause
                self.stats.failures += 1
                log.error("checkpoint_journal_write_failed", records=len(batch), error=str(e))
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e if isinstance(e, OSError) else OSError(str(e)))
                continue
            self.stats.commits += len(batch)
            self.stats.batches += 1
            self.stats.sizes = [*self.stats.sizes[-99:], len(batch)]
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    def _write(self, batch: list[tuple[Key, PodCheckpoint | None]]) -> None:
        """One append and one fdatasync for the batch (a thread); on failure the journal is cut back."""
        if self._broken:  # acknowledged records to the per-pod files, the failed lines dropped with the file
            self._compact()
            self._broken = False
        self._open()
        assert self._fd is not None
        data = b"".join(_line({"put": record_to_data(r)} if r is not None else {"delete": list(k)})
                        for k, r in batch)
        start = self._size
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self._sync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, start)
                self._sync(self._fd)
            except OSError as e:
                # the lines may be on disk: drop this journal for a fresh one before anything else is
                # acknowledged, so a failed batch cannot be replayed
                log.error("checkpoint_journal_truncate_failed", error=str(e))
                self._broken = True
            raise
        self._size = start + len(data)
        for k, r in batch:
            self._latest[k] = r
        if self._size > self.compact_bytes:
            self._compact()

    async def close(self) -> None:
        """Finish the pending batches and close the journal file."""
        while self._writer is not None and not self._writer.done():
            await self._writer
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
