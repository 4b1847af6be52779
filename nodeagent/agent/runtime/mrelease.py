"""process_mrelease(2): free a SIGKILLed process's memory at once, in the agent's own context.

A killed process frees its address space on its exit path, and that runs only once the victim is
scheduled: a victim that is CPU-throttled, at a low priority or stuck behind reclaim can hold
hundreds of MiB for a long time, while the node is short of memory. process_mrelease (Linux 5.15)
reaps a dying process's memory through its pidfd as the OOM reaper does, in the calling thread,
without waiting for the victim; Android's lmkd calls it after each kill. The supervisor calls it
after its SIGKILL (runtime/supervisor.py).

The call blocks while the kernel frees the memory (tens of ms for hundreds of MiB): the event
loop hands it to `release_soon`, which runs it on a thread of its own (ctypes drops the GIL for
the call) with a duplicate of the pidfd, so the caller may close its own pidfd at any time.
That thread first gives the victim RELEASE_AFTER_S to exit: a victim that gets the CPU detaches
its memory itself at once, and a call made then only races its exit path for the same work.

It never raises into its caller: no syscall (ENOSYS, an architecture whose number is not known
here, no libc) makes it stop trying; a process not dying (EINVAL) or already gone (ESRCH) is
normal. Only state changes are logged: unsupported, once; an unexpected errno, once per value.

NODEAGENT_MRELEASE=off in the agent's environment leaves the call out (the exit path alone frees
the memory): an A/B of what the call is worth on a kernel (bench/README.md has the figures).
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import platform
import select
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

log = structlog.get_logger(__name__)

# __NR_process_mrelease; the same in the x86_64 table and in asm-generic (arm64). Elsewhere the
# number is not assumed: a wrong one would call some other syscall.
SYSCALL_NUMBERS = {"x86_64": 448, "aarch64": 448}

# Threads for the blocking calls, apart from the default executor: a burst of kills must not queue
# ahead of the stop path's own cgroup kills and removals there. More calls wait their turn; a
# late one finds the process gone (ESRCH), which is harmless.
RELEASE_THREADS = 2

# How long a killed process is left to its own exit path before the call. On the 2-CPU host every
# call made at once found the victim's memory already detached ("gone", 40 of 40); in the 1-CPU UML
# guest a call made at once reaped it (the agent's threads run at nice -10) but only moved the same
# teardown to the agent's thread, and made the eviction slower than no call at all (bench/README.md).
# A throttled or starved victim, the case the call is for, is still reaped this soon after its kill.
RELEASE_AFTER_S = 0.02

MRELEASE_ENV = "NODEAGENT_MRELEASE"

Syscall = Callable[[int, int], tuple[int, int]]  # (pidfd, flags) -> (return value, errno)


class Outcome(enum.Enum):
    RELEASED = "released"  # 0: reaped now (or the exit path had already done it)
    NOT_DYING = "not_dying"  # EINVAL: no fatal signal yet, or its mm is shared with a live process
    GONE = "gone"  # ESRCH: exited (mm already dropped) or reaped
    EXITED = "exited"  # it exited within RELEASE_AFTER_S: not called
    BUSY = "busy"  # EAGAIN: the kernel could not reap it all now; the exit path will
    INTERRUPTED = "interrupted"  # EINTR: the calling thread got a fatal signal
    UNSUPPORTED = "unsupported"  # ENOSYS, unknown syscall number or no libc: never tried again
    FAILED = "failed"  # anything else (EBADF would be a bug here)


_EXPECTED = {errno.EINVAL: Outcome.NOT_DYING, errno.ESRCH: Outcome.GONE, errno.EAGAIN: Outcome.BUSY,
             errno.EINTR: Outcome.INTERRUPTED, errno.ENOSYS: Outcome.UNSUPPORTED}


def outcome_of(ret: int, err: int) -> Outcome:
    """What one call's return value and errno mean."""
    if ret == 0:
        return Outcome.RELEASED
    return _EXPECTED.get(err, Outcome.FAILED)


def libc_syscall(machine: str | None = None) -> Syscall | None:
    """process_mrelease through libc's syscall(2), or None where it cannot be called here."""
    number = SYSCALL_NUMBERS.get(machine if machine is not None else platform.machine())
    if number is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_uint]

    def call(pidfd: int, flags: int) -> tuple[int, int]:
        ctypes.set_errno(0)
        ret = int(fn(number, pidfd, flags))
        return ret, ctypes.get_errno() if ret != 0 else 0

    return call


class MemoryReleaser:
    """Calls process_mrelease on killed processes; remembers whether the kernel has it.

    `syscall` is the call itself (`libc_syscall()`; a fake in tests); None: not made, for
    `why_not` (default: not available here).
    """

    def __init__(self, syscall: Syscall | None, *, clock: Callable[[], float] = time.monotonic,
                 why_not: str | None = None, after: float = RELEASE_AFTER_S) -> None:
        self._syscall = syscall
        self._after = after
        self._clock = clock
        self._lock = threading.Lock()
        self._supported = self._syscall is not None
        self._reported: set[int] = set()  # unexpected errnos already logged
        self._executor: ThreadPoolExecutor | None = None
        if not self._supported:
            log.info("process_mrelease_unsupported",
                     reason=why_not or f"not callable here (machine {platform.machine()})")

    @property
    def supported(self) -> bool:
        return self._supported

    def release(self, pidfd: int, pid: int | None = None) -> Outcome:
        """Reap the memory of the dying process `pidfd` refers to; blocks while the kernel frees it."""
        syscall = self._syscall
        if not self._supported or syscall is None:
            return Outcome.UNSUPPORTED
        start = self._clock()
        try:
            ret, err = syscall(pidfd, 0)
        except Exception as e:  # noqa: BLE001 - a ctypes surprise must not reach the stop path
            ret, err = -1, getattr(e, "errno", None) or errno.EIO
        elapsed_ms = round((self._clock() - start) * 1000, 3)
        outcome = outcome_of(ret, err)
        if outcome is Outcome.UNSUPPORTED:
            with self._lock:
                was_supported: bool = self._supported
                self._supported = False
            if was_supported:  # several threads may have learnt it at once: one says so
                log.info("process_mrelease_unsupported", reason=os.strerror(err))
        elif outcome is Outcome.FAILED:
            with self._lock:
                new_errno = err not in self._reported
                self._reported.add(err)
            if new_errno:  # once per errno value; later ones show only at debug level
                log.warning("process_mrelease_failed", pid=pid, errno=err, error=os.strerror(err))
        log.debug("process_mrelease", pid=pid, outcome=outcome.value, started=start, elapsed_ms=elapsed_ms)
        return outcome

    def release_soon(self, pidfd: int, pid: int | None = None) -> Future[Outcome] | None:
        """`release` on a thread of its own, with a duplicate of `pidfd` (closed once the call
        returns), so the caller never blocks and may close `pidfd` when it likes. None when the
        call is not made (unsupported, or no descriptor for the duplicate)."""
        if not self._supported:
            return None
        try:
            fd = os.dup(pidfd)
        except OSError:
            return None
        try:
            return self._pool().submit(self._release_and_close, fd, pid)
        except RuntimeError:  # the pool is shut down (interpreter exit)
            os.close(fd)
            return None

    def _release_and_close(self, fd: int, pid: int | None) -> Outcome:
        try:
            start = self._clock()
            if self._after > 0 and _exits_within(fd, self._after):
                log.debug("process_mrelease", pid=pid, outcome=Outcome.EXITED.value, started=start,
                          elapsed_ms=round((self._clock() - start) * 1000, 3))
                return Outcome.EXITED
            return self.release(fd, pid)
        finally:
            os.close(fd)

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(RELEASE_THREADS, thread_name_prefix="mrelease")
            return self._executor


def _exits_within(pidfd: int, seconds: float) -> bool:
    """Whether the process exits within `seconds` (a pidfd polls readable once it has)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(seconds * 1000))


_default: MemoryReleaser | None = None
_default_lock = threading.Lock()


def releaser_from_env(env: Mapping[str, str]) -> MemoryReleaser:
    """Over libc, unless NODEAGENT_MRELEASE is "off" (any other value: on)."""
    if env.get(MRELEASE_ENV, "").strip().lower() == "off":
        return MemoryReleaser(None, why_not=f"{MRELEASE_ENV}=off")
    return MemoryReleaser(libc_syscall())


def default_releaser() -> MemoryReleaser:
    """The process-wide releaser, so "unsupported" is learnt once for the agent."""
    global _default
    with _default_lock:
        if _default is None:
            _default = releaser_from_env(os.environ)
        return _default
