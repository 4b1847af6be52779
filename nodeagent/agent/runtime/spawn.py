"""Start a container process: placed in its cgroups and given its oom_score_adj before it execs.

How: os.posix_spawn (glibc implements it with clone(CLONE_VM|CLONE_VFORK), so the agent's heap
is never copied, unlike with fork + preexec_fn: bench/README.md, "posix_spawn") runs a tiny
constant `/bin/sh -c` shim that

  1. writes its own PID ("$$") into every cgroup.procs file it is given,
  2. writes the oom_score_adj to /proc/self/oom_score_adj,
  3. changes to the working directory,
  4. with a ready pipe (spawn(ready=True)), writes "1" to it and closes it: the agent reports the
     container Running only then, i.e. once it is in its cgroups with its oom_score_adj. The shim
     also holds the pipe's read end until it execs, so the write never meets a closed pipe
     (SIGPIPE) when the agent died meanwhile;
  5. execs the command, through `setpriv --reuid U --regid G --clear-groups --` when the pod
     sets runAsUser / runAsGroup.

The PID stays the same through every exec, so the command itself is already inside its limits
when it starts: not one byte is allocated outside them. Everything user-supplied (paths, adj,
command, args) travels as positional parameters ("$@"); the script text depends only on the
number of cgroup files, so nothing can be injected into it.

Exit codes of the shim (docker's convention, so operators recognise them):
  125  SETUP_FAILED: a cgroup could not be joined, the oom_score_adj could not be set or the
       working directory does not exist. The command did not run; a line starting with
       "nodeagent-shim:" says why in the container log.
  126  the command exists but cannot be executed (sh / setpriv semantics)
  127  the command was not found
A command can itself exit with these codes; the log line tells them apart.

The child opens its log itself (O_WRONLY|O_APPEND|O_CREAT, a posix_spawn file action) for
stdout and stderr, with stdin from /dev/null or its stdin FIFO (attach.py), or it opens this run's
terminal for all three (stdio_holder.py): no pipe ties it to the agent, so an agent restart
neither blocks nor SIGPIPEs it. Signals the agent ignores (Python ignores SIGPIPE and SIGXFSZ)
are reset to default and the signal mask is emptied. The child starts a new session, so its PID
is also its process-group ID. Only the agent's inheritable descriptors could leak into the child;
Python makes every descriptor non-inheritable by default (PEP 446).

The environment is the container's alone (Kubernetes `$(VAR)` references expanded), plus PATH
(containerd's default) and HOME (runc's rule: the user's home from /etc/passwd, else "/") when
the container does not set them. With runAsUser but no runAsGroup the group is the user's
primary group from /etc/passwd, else 0, as runc resolves it.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from nodeagent.agent.node.procfs import has_cap_sys_resource, own_oom_score_adj, process_start_time
from nodeagent.core.errors import FieldError
from nodeagent.core.expansion import expand
from nodeagent.core.model.pod import Container, SecurityContext

SETUP_FAILED = 125
CANNOT_EXECUTE = 126
NOT_FOUND = 127
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHELL = "/bin/sh"
SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin") or "/usr/bin/setpriv"
LOG_MODE = 0o640
_SIGDEF = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


@dataclass(frozen=True)
class LaunchSpec:
    """What to run: already-expanded argv and environment, working directory, identity."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = "/"
    run_as_user: int | None = None
    run_as_group: int | None = None
    stdin: str | None = None  # a FIFO the process reads as its stdin (attach.py); None: /dev/null
    stdin_once: bool = False  # the FIFO is opened read-only: EOF once its keeper is gone (stdio_holder.py)
    tty: bool = False  # the container wants a terminal (each run gets one: stdio_holder.start_tty)
    terminal: str | None = None  # this run's terminal (a pty slave's path): its stdin, stdout and stderr

    def __post_init__(self) -> None:
        if not self.argv or not self.argv[0]:
            raise FieldError("command", "Required value: a container needs a command")
        for i, a in enumerate(self.argv):
            if "\0" in a:
                raise FieldError(f"command[{i}]", "must not contain NUL")
        for k, v in self.env.items():
            if not k or "=" in k or "\0" in k or "\0" in v:
                raise FieldError(f"env[{k}]", "names must be non-empty without '=' or NUL; values without NUL")
        if not os.path.isabs(self.working_dir) or "\0" in self.working_dir:
            raise FieldError("workingDir", f"{self.working_dir!r} must be an absolute path")
        for name, ident in (("run_as_user", self.run_as_user), ("run_as_group", self.run_as_group)):
            if ident is not None and not 0 <= ident <= 2**31 - 1:
                raise FieldError(name, f"{ident} is not a valid id")

    @classmethod
    def from_container(cls, container: Container, security_context: SecurityContext | None = None) -> LaunchSpec:
        """From a model Container (command, args, env, working_dir) and a pod SecurityContext."""
        uid = security_context.run_as_user if security_context is not None else None
        gid = security_context.run_as_group if security_context is not None else None
        env = container_env([(e.name, e.value) for e in container.env], uid)
        argv = tuple(expand(a, env) for a in [*container.command, *container.args])
        return cls(argv, env, container.working_dir or "/", uid, gid)

    def identity(self) -> tuple[int | None, int | None]:
        """(uid, gid) to switch to, resolving a missing group the way runc does."""
        uid, gid = self.run_as_user, self.run_as_group
        if uid is not None and gid is None:
            try:
                gid = pwd.getpwuid(uid).pw_gid
            except KeyError:
                gid = 0
        return uid, gid


@dataclass(frozen=True)
class Spawned:
    pid: int
    start_time: int  # /proc/<pid>/stat field 22, clock ticks since boot; 0: not read (spawn_unidentified)
    ready_fd: int | None = None  # read end of the ready pipe (spawn(ready=True)): "1", or EOF if the shim failed


def container_env(pairs: Iterable[tuple[str, str]], run_as_user: int | None = None) -> dict[str, str]:
    """The container's environment: its own variables in order (each may use earlier ones), plus defaults."""
    env: dict[str, str] = {}
    for name, value in pairs:
        env[name] = expand(value, env)
    env.setdefault("PATH", DEFAULT_PATH)
    if "HOME" not in env:
        try:
            env["HOME"] = pwd.getpwuid(0 if run_as_user is None else run_as_user).pw_dir or "/"
        except KeyError:
            env["HOME"] = "/"
    return env


READY_FD = 3  # the ready pipe's write end in the shim; its read end is READY_FD + 1


@lru_cache(maxsize=64)
def shim_script(n_cgroups: int, set_pwd: bool = False, set_oldpwd: bool = False, ready: bool = False) -> str:
    """The shim for `n_cgroups` cgroup.procs files; its text depends on nothing else.

    dash exports PWD (and `cd` OLDPWD, naming the agent's own directory): both are removed
    again, or set back to the container's own values (passed as parameters) when it has them.
    """
    join = (
        'echo "$$" >"$1" || { echo "nodeagent-shim: cannot join cgroup $1" >&2; exit 125; }\n'
        "shift\n"
    ) * n_cgroups
    script = (
        join
        + '[ -z "$1" ] || echo "$1" >/proc/self/oom_score_adj'
        + ' || { echo "nodeagent-shim: cannot set oom_score_adj $1" >&2; exit 125; }\n'
        + "shift\n"
        + 'cd "$1" || { echo "nodeagent-shim: cannot change to working directory $1" >&2; exit 125; }\n'
        + "shift\n"
    )
    for name, keep in (("PWD", set_pwd), ("OLDPWD", set_oldpwd)):
        script += f'export {name}="$1"\nshift\n' if keep else f"unset {name}\n"
    if ready:
        script += f"echo 1 >&{READY_FD}\nexec {READY_FD}>&- {READY_FD + 1}<&-\n"
    return script + 'exec "$@"\n'


def shim_argv(spec: LaunchSpec, procs_files: Sequence[str], oom_score_adj: int | None,
              ready: bool = False) -> list[str]:
    """argv for /bin/sh: the constant script, then every value as a positional parameter."""
    uid, gid = spec.identity()
    cmd = list(spec.argv)
    if uid is not None or gid is not None:
        ids: list[str] = []
        if uid is not None:
            ids += ["--reuid", str(uid)]
        if gid is not None:
            ids += ["--regid", str(gid)]
        cmd = [SETPRIV, *ids, "--clear-groups", "--", *cmd]
    adj = "" if oom_score_adj is None else str(oom_score_adj)
    kept = [spec.env[k] for k in ("PWD", "OLDPWD") if k in spec.env]
    script = shim_script(len(procs_files), "PWD" in spec.env, "OLDPWD" in spec.env, ready)
    return ["sh", "-c", script, "nodeagent-shim", *procs_files, adj, spec.working_dir, *kept, *cmd]


def spawn(
    spec: LaunchSpec,
    log_path: str,
    procs_files: Sequence[str] = (),
    oom_score_adj: int | None = None,
    *,
    ready: bool = False,
    identify: bool = True,
) -> Spawned:
    """Start the container process; returns its PID and start time. OSError if it cannot start.

    The log's directory must exist (logs.prepare_log_dir); the file is created if missing. With
    `ready`, the caller owns `Spawned.ready_fd` (non-blocking) and must close it. Without
    `identify` the start time is not read (0): see spawn_unidentified.
    """
    for i, f in enumerate(procs_files):
        if not os.path.isabs(f) or "\0" in f:
            raise FieldError(f"procs_files[{i}]", f"{f!r} must be an absolute path")
    if oom_score_adj is not None and not -1000 <= oom_score_adj <= 1000:
        raise FieldError("oom_score_adj", f"{oom_score_adj} not in [-1000, 1000]")
    if not os.path.isabs(log_path):
        raise FieldError("log_path", f"{log_path!r} must be an absolute path")
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]]
    if spec.terminal:  # opened after setsid: the process's controlling terminal; its holder writes the log
        actions = [(os.POSIX_SPAWN_OPEN, 0, spec.terminal, os.O_RDWR, 0), (os.POSIX_SPAWN_DUP2, 0, 1),
                   (os.POSIX_SPAWN_DUP2, 0, 2)]
    else:
        actions = [
            # a stdin FIFO is opened read-write: the open does not wait for a writer, and the process
            # never reads EOF between two `kubectl attach` sessions (the kubelet's stdinOnce=false);
            # with stdinOnce read-only, its keeper (stdio_holder.py) already holding it open for writing
            (os.POSIX_SPAWN_OPEN, 0, spec.stdin, os.O_RDONLY if spec.stdin_once else os.O_RDWR, 0) if spec.stdin
            else (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_MODE),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
    r = w = None
    if ready:
        r, w = _ready_pipe()
        actions += [(os.POSIX_SPAWN_DUP2, w, READY_FD), (os.POSIX_SPAWN_DUP2, r, READY_FD + 1)]
    try:
        pid = os.posix_spawn(
            SHELL,
            shim_argv(spec, procs_files, oom_score_adj, ready),
            dict(spec.env),
            file_actions=actions,
            setsid=True,
            setsigdef=_SIGDEF,
            setsigmask=(),
        )
    except BaseException:
        for fd in (r, w):
            if fd is not None:
                os.close(fd)
        raise
    if w is not None:
        os.close(w)
    if not identify:
        return Spawned(pid, 0, r)
    start = process_start_time(pid)
    if start is None:  # cannot happen for our own child (a zombie still has a stat); be explicit
        raise ChildProcessError(f"spawned pid {pid} vanished before it could be identified")
    return Spawned(pid, start, r)


def spawn_unidentified(spec: LaunchSpec, log_path: str, procs_files: Sequence[str] = (),
                       oom_score_adj: int | None = None) -> Spawned:
    """spawn() for a child its caller holds by a pidfd and reaps itself (exec probes and hooks):
    no start time, which only a record that outlives the agent needs. Reading /proc/<pid>/stat of
    a child that is still exec'ing waits for it: 0.2 of 0.3 ms of an exec probe's CPU on the
    loop, 1.2 of 1.4 ms of loop time (bench/README.md, "Exec probes: no start time")."""
    return spawn(spec, log_path, procs_files, oom_score_adj, identify=False)


def spawn_ready(spec: LaunchSpec, log_path: str, procs_files: Sequence[str] = (),
                oom_score_adj: int | None = None) -> Spawned:
    """spawn() with the ready pipe: what the container supervisor uses."""
    return spawn(spec, log_path, procs_files, oom_score_adj, ready=True)


def spawn_stdio(spec: LaunchSpec, procs_files: Sequence[str] = (), oom_score_adj: int | None = None, *,
                stdin: int | None = None, stdout: int | None = None, stderr: int | None = None,
                tty: str | None = None) -> Spawned:
    """Start a command in a container (an exec session) with the caller's descriptors as its
    stdin/stdout/stderr (None: /dev/null), or with the terminal at path `tty` as all three. The
    child starts a new session before it opens the terminal, so the terminal becomes its
    controlling one (job control and ^C work in `kubectl exec -it`). Same shim as spawn()."""
    if tty is not None:
        actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
            (os.POSIX_SPAWN_OPEN, 0, tty, os.O_RDWR, 0), (os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)]
    else:
        actions = []
        for target, source in ((0, stdin), (1, stdout), (2, stderr)):
            if source is None:
                mode = os.O_RDONLY if target == 0 else os.O_WRONLY
                actions.append((os.POSIX_SPAWN_OPEN, target, "/dev/null", mode, 0))
            else:
                if source <= 2:
                    raise FieldError("stdio", f"descriptor {source} would be overwritten in the child")
                actions.append((os.POSIX_SPAWN_DUP2, source, target))
    for i, f in enumerate(procs_files):
        if not os.path.isabs(f) or "\0" in f:
            raise FieldError(f"procs_files[{i}]", f"{f!r} must be an absolute path")
    pid = os.posix_spawn(SHELL, shim_argv(spec, procs_files, oom_score_adj), dict(spec.env), file_actions=actions,
                         setsid=True, setsigdef=_SIGDEF, setsigmask=())
    start = process_start_time(pid)
    if start is None:
        raise ChildProcessError(f"spawned pid {pid} vanished before it could be identified")
    return Spawned(pid, start, None)


def _ready_pipe() -> tuple[int, int]:
    """A close-on-exec pipe whose ends are above the numbers the child's dup2s target."""
    r, w = os.pipe()
    ends = []
    for fd in (r, w):
        if fd <= READY_FD + 1:
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, READY_FD + 2)
            os.close(fd)
            fd = moved
        ends.append(fd)
    os.set_blocking(ends[0], False)
    return ends[0], ends[1]


def clamp_oom_score_adj(adj: int) -> int:
    """The closest value the shim can set: without CAP_SYS_RESOURCE nothing below our own value.

    The shim refuses to run a command whose adj it could not set (exit 125), so a caller
    on a host whose capability bounding set lacks CAP_SYS_RESOURCE clamps first.
    """
    if has_cap_sys_resource():
        return adj
    return max(adj, own_oom_score_adj())
