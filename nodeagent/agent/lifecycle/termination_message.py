"""A terminated container's message, for `state.terminated.message` / `lastState.terminated.message`.

As the kubelet: the last 4 KiB of the file at terminationMessagePath; with
terminationMessagePolicy FallbackToLogsOnError, a container that failed (non-zero exit, and not
one that could not start at all) and left no message gets the tail of its log instead: the last
80 lines, of which the last 2048 bytes. The message is appended to what the runtime already said
(`OOMKilled`-style messages), separated by ": ".

Where the file is, for host-process pods: there is no container root, so terminationMessagePath
is a path on the host, read as given (a relative path is taken from the container's workingDir,
where the process would have created it). Because that file outlives the run and may be shared
(the default /dev/termination-log is one host file for every pod that keeps the default), a file
last modified before this run started is not this run's message and is ignored. The agent reads
it as root, so it refuses what the container itself could not have written: anything but a
regular file (a symlink as the last component, a FIFO, a device), and, for a container that runs
as a non-root user, a file that user does not own. The tail is read with pread from the end, so
a huge file costs one 4 KiB read.
"""

from __future__ import annotations

import os
import stat

from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.state import REASON_START_ERROR, Terminated
from nodeagent.core.model.pod import Container

MAX_MESSAGE_BYTES = 4 * 1024  # kubecontainer.MaxContainerTerminationMessageLength
LOG_LINES = 80  # MaxContainerTerminationMessageLogLines
LOG_BYTES = 2048  # MaxContainerTerminationMessageLogLength
MTIME_SLACK_S = 1.0  # file systems with coarse timestamps


def message_path(container: Container) -> str:
    path = container.termination_message_path
    if not path or os.path.isabs(path):
        return path
    return os.path.join(container.working_dir or "/", path)


def read_message_file(path: str, *, not_before: float | None = None, owner_uid: int | None = None) -> str | None:
    """The last 4 KiB of the message file; None when there is none for this run.

    Raises OSError for a file that exists but may not be read (the kubelet then reports
    `Error on reading termination log <path>: <error>` instead of a message).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        if owner_uid not in (None, 0) and st.st_uid != owner_uid:
            raise OSError(f"{path} is not owned by the container's user {owner_uid}")
        if not_before is not None and st.st_mtime < not_before - MTIME_SLACK_S:
            return None  # left by an earlier run (or another pod)
        start = max(0, st.st_size - MAX_MESSAGE_BYTES)
        data = os.pread(fd, MAX_MESSAGE_BYTES, start)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def log_tail(log_path: str) -> str:
    """The last 80 lines of the run's log, cut to their last 2048 bytes."""
    try:
        lines = logs.tail(log_path, LOG_LINES)
    except OSError:
        return ""
    text = "".join(line + "\n" for line in lines).encode()
    return text[-LOG_BYTES:].decode("utf-8", "replace")


def termination_message(container: Container, state: Terminated, *, log_path: str,
                        run_as_user: int | None = None) -> str:
    """The message for a terminated run (the runtime's own message, then the container's)."""
    fallback = (container.termination_message_policy == "FallbackToLogsOnError" and state.exit_code != 0
                and state.reason != REASON_START_ERROR)
    path = message_path(container)
    message = ""
    if path:
        try:
            found = read_message_file(path, not_before=state.started_at, owner_uid=run_as_user)
        except OSError as e:
            message, fallback = f"Error on reading termination log {path}: {e}", False
        else:
            message = found or ""
    if fallback and not message:
        message = log_tail(log_path)
    if not message:
        return state.message
    return f"{state.message}: {message}" if state.message else message
