"""Run a command on a pseudo-terminal and answer it once, as a person at `kubectl exec -it` would:
shared by the exec tests of host-process pods (unit suite) and of image containers (integration)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import termios
import time
from collections.abc import Mapping


def talk_on_terminal(argv: list[str], env: Mapping[str, str], *, prompt: bytes, reply: bytes,
                     timeout: float = 30.0, size: tuple[int, int] | None = None) -> tuple[bytes, int]:
    """Everything the command wrote, and its exit code. `reply` is typed once `prompt` has shown; a
    command still there 5 s after `timeout` is killed (the caller's assertions say what was missing).
    `size`: the terminal's (rows, columns), set before the command starts."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command with the pty as its terminal
        if size is not None:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
        os.environ.update(env)
        os.execv(argv[0], argv)
    out = b""
    try:
        deadline = time.monotonic() + timeout
        sent = False
        while time.monotonic() < deadline:
            ready_fds, _, _ = select.select([fd], [], [], 0.2)
            if ready_fds:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the command has exited
                    break
                if not chunk:
                    break
                out += chunk
            if prompt in out and not sent:
                os.write(fd, reply)
                sent = True
    finally:
        grace = time.monotonic() + 5
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < grace:
            time.sleep(0.05)
        status = done[1]
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    return out, os.waitstatus_to_exitcode(status)
