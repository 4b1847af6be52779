"""The log writer process (committer.ProcessCommitter's child): jobs in on stdin, answers out on stdout.

Frames are a little-endian u32 length and a pickle (both ends are this package): a job is
(method, args) of logdb.LogWriter ("ready" opens it), an answer is (True, result) or
(False, (message, retryable)). It ignores SIGINT and SIGTERM (a Ctrl-C of the server's process
group must not cut a commit short) and exits when stdin closes, after the jobs it has read. Kept
apart from committer.py so the child does not import asyncio (it starts in half the time).
"""

from __future__ import annotations

import pickle
import signal
import struct
import sys
from typing import Any, BinaryIO

from nodeagent.cluster.storage.logdb import LogWriter, describe_failure

FRAME = struct.Struct("<I")


def _read(stream: BinaryIO, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = stream.read(n - len(out))
        if not chunk:
            return b""
        out += chunk
    return out


def main(path: str) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    writer: LogWriter | None = None
    while True:
        head = _read(inp, FRAME.size)
        if not head:
            break
        op, args = pickle.loads(_read(inp, FRAME.unpack(head)[0]))
        try:
            if op == "ready":
                writer = LogWriter(path)
                reply: tuple[bool, Any] = (True, None)
            else:
                assert writer is not None
                reply = (True, getattr(writer, op)(*args))
        except Exception as e:  # noqa: BLE001 - every failure of a job is the job's answer
            reply = (False, describe_failure(e))
        body = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(FRAME.pack(len(body)) + body)
        out.flush()
    if writer is not None:
        writer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
