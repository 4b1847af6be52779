"""Helpers shared by the v1 and v2 drivers: path safety, spec validation, file I/O, bounded waits.

Kept apart from the drivers so both enforce the same rules: a driver path never escapes the agent
root, a spec is checked before anything is written, and waits on the kernel are always bounded.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable, Iterator

from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.core.errors import FieldError
from nodeagent.core.resources import MAX_SHARES, MIN_QUOTA_PERIOD_US, MIN_SHARES

DEFAULT_SHARES = 1024  # v1 cpu.shares default; v2 cpu.weight 100 is its image under the quadratic map
MIN_PERIOD_US = 1000
MAX_PERIOD_US = 1_000_000
POLL_S = 0.01


class CgroupError(OSError):
    """A cgroup operation the kernel refused or that did not finish in time (errno kept)."""


def normalize_root(root: str) -> str:
    """The agent root as "/a/b" (or "/"), relative to each hierarchy mount."""
    parts = split_rel(root, field="root")
    return "/" + "/".join(parts)


def split_rel(path: str, field: str = "path") -> list[str]:
    """Components of a cgroup path relative to the agent root; rejects anything that could escape."""
    if not isinstance(path, str):
        raise FieldError(field, f"must be a string, got {type(path).__name__}")
    if "\0" in path:
        raise FieldError(field, "must not contain NUL")
    parts = [p for p in path.strip("/").split("/") if p]
    for p in parts:
        if p in (".", ".."):
            raise FieldError(field, f"{path!r}: '.' and '..' are not allowed")
    return parts


def validate_spec(spec: CgroupSpec) -> None:
    """Reject values the kernel would refuse (or silently clamp), naming the field."""
    cpu_shares = spec.cpu_shares
    if cpu_shares is not None and not MIN_SHARES <= cpu_shares <= MAX_SHARES:
        raise FieldError("cpu_shares", f"{cpu_shares} not in [{MIN_SHARES}, {MAX_SHARES}]")
    period = spec.cpu_period_us
    if not MIN_PERIOD_US <= period <= MAX_PERIOD_US:
        raise FieldError("cpu_period_us", f"{period} not in [{MIN_PERIOD_US}, {MAX_PERIOD_US}]")
    quota = spec.cpu_quota_us
    if quota is not None and quota < MIN_QUOTA_PERIOD_US:
        raise FieldError("cpu_quota_us", f"{quota} is below the minimum {MIN_QUOTA_PERIOD_US}")
    for name in ("memory_max", "memory_high", "pids_max"):
        value = getattr(spec, name)
        if value is not None and value <= 0:
            raise FieldError(name, f"{value} must be positive (None means unlimited)")


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def read_int(path: str, default: int = 0) -> int:
    """An integer file; `default` when missing (controller not enabled); "max" -> default."""
    try:
        text = read_text(path).strip()
    except FileNotFoundError:
        return default
    return default if text in ("", "max") else int(text)


def read_required_int(path: str, what: str) -> int:
    """An integer file that must be there: CgroupError ENOENT naming `what` when the cgroup is gone."""
    try:
        return int(read_text(path))
    except FileNotFoundError:
        raise CgroupError(errno.ENOENT, f"{what}: no such cgroup") from None


def read_flat_keyed(path: str) -> dict[str, int]:
    """A "key value" per line file (memory.stat, cpu.stat, memory.events); {} when missing."""
    try:
        text = read_text(path)
    except FileNotFoundError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2:
            try:
                out[fields[0]] = int(fields[1])
            except ValueError:
                continue
    return out


def read_pids(procs_file: str) -> list[int]:
    """PIDs listed in one cgroup.procs file; [] when the cgroup vanished meanwhile."""
    try:
        return [int(x) for x in read_text(procs_file).split()]
    except FileNotFoundError:
        return []


def write_text(path: str, value: str) -> None:
    """Write one value; the error says which file and what value, since the kernel's EINVAL does not."""
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as e:
        raise CgroupError(e.errno, f"write {value!r} to {path}: {os.strerror(e.errno or 0)}") from e


def subdirs(path: str) -> list[str]:
    """Names of the child cgroups of a cgroup directory (sorted; [] if it vanished)."""
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def walk_top_down(path: str) -> Iterator[str]:
    """`path` then every descendant cgroup directory, parents before children."""
    yield path
    for name in subdirs(path):
        yield from walk_top_down(os.path.join(path, name))


def rmdir_retry(path: str, timeout: float, describe: Callable[[], str] = lambda: "") -> None:
    """rmdir one cgroup, retrying while the kernel still reaps its last tasks (EBUSY); bounded.

    A missing directory is success (removal is idempotent).
    """
    deadline = time.monotonic() + timeout
    delay = POLL_S
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                extra = describe()
                raise CgroupError(
                    e.errno, f"rmdir {path}: {os.strerror(e.errno or 0)}{'; ' + extra if extra else ''}"
                ) from e
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll `predicate` until true or `timeout` seconds passed; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def signal_until_empty(list_pids: Callable[[], list[int]], timeout: float) -> bool:
    """SIGKILL every listed PID, again and again (forks race us), until none is left or timeout.

    Only PIDs read from our own cgroup's files are signalled; the agent never signals itself.
    """
    me = os.getpid()

    def one_round() -> bool:
        pids = [p for p in list_pids() if p != me]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not pids

    return wait_until(one_round, timeout)
