"""A SQLite store under concurrent load that acknowledges each committed txn on stdout, until killed.

Run by tests/test_storage_durability.py as `python storage_crash_child.py DB WRITER SEED`. Three
kinds of txns, each acknowledged (one line: "revision kind writer n") only after txn() returned:
- "m": one txn puts /m/<w>/a, /m/<w>/b and /m/<w>/c to "m:<w>:<n>" (a multi-key txn: all or nothing)
- "c": a compare-and-swap increment of /counter (retried when another writer won)
- "d": one txn deletes /m/<w>/b and puts /d/<w> to "d:<w>:<n>"
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

import structlog

from nodeagent.cluster.storage.interface import Compare, DeleteKey, Put
from nodeagent.cluster.storage.sqlite import SqliteStore

WRITERS = 16


async def main(path: str, writer: str, seed: int) -> None:
    store = await SqliteStore.open(path, writer=writer)  # type: ignore[arg-type]
    rng = random.Random(seed)
    os.write(1, f"open {store.revision}\n".encode())

    def ack(rev: int, kind: str, w: int, n: int) -> None:
        os.write(1, f"{rev} {kind} {w} {n}\n".encode())

    async def run(w: int) -> None:
        for n in range(10**9):
            kind = rng.choice("mmmcd")
            if kind == "m":
                v = f"m:{w}:{n}".encode()
                r = await store.txn([], [Put(f"/m/{w}/a", v), Put(f"/m/{w}/b", v), Put(f"/m/{w}/c", v)])
                ack(r.revision, kind, w, n)
            elif kind == "c":
                while True:
                    cur, _ = await store.get("/counter")
                    seen = cur.mod_revision if cur else 0
                    value = int(cur.value) + 1 if cur else 1
                    r = await store.txn([Compare("/counter", "mod_revision", "=", seen)],
                                        [Put("/counter", str(value).encode())])
                    if r.succeeded:
                        ack(r.revision, kind, w, value)
                        break
            else:
                r = await store.txn([], [DeleteKey(f"/m/{w}/b"), Put(f"/d/{w}", f"d:{w}:{n}".encode())])
                ack(r.revision, kind, w, n)

    await asyncio.gather(*(run(w) for w in range(WRITERS)))


if __name__ == "__main__":
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout carries the acks
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
