"""The OCI bundle's config.json for one container of a pod, from the pod plan and the image (pure).

What Kubernetes and containerd decide, as plain functions over plain values:
- `combine_command`: `command` replaces the image's Entrypoint and `args` its Cmd; with only
  `args`, the image's Entrypoint runs with them; with `command` alone the Cmd is dropped.
- `merge_env`: the image's Env first, the container's variables over it (expanded in order with
  the container's own earlier values, as the kubelet does), PATH from the image or the default.
- `resolve_user`: runAsUser/runAsGroup over the image's `User` ("uid", "uid:gid", "name",
  "name:group", looked up in the image's /etc/passwd and /etc/group), the primary group from the
  image's /etc/passwd when only a user is known (runc's rule).
- `oci_resources`: the container's CgroupSpec (the same values the agent writes in the kubepods
  layout) in linux.resources terms.
- `config_json`: the whole document. IPC and UTS are joined from the pod's sandbox process
  (/proc/<pid>/ns/...), PID, mount and cgroup namespaces are the container's own; no network
  namespace yet (containers share the host's network, as hostNetwork pods do).

Capabilities are containerd's default set; masked and read-only paths are runc's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.images.records import ImageConfig
from nodeagent.core.errors import FieldError
from nodeagent.core.expansion import expand

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OCI_VERSION = "1.0.2"
SANDBOX_OOM_SCORE_ADJ = -998  # the kubelet's pause container

# containerd's pkg/oci defaultUnixCaps
DEFAULT_CAPS = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
    "CAP_KILL", "CAP_AUDIT_WRITE",
)
MASKED_PATHS = (
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


@dataclass(frozen=True)
class Mount:
    """One entry of config.json `mounts`."""

    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ("rbind", "rprivate")

    def to_dict(self) -> dict[str, Any]:
        return {"destination": self.destination, "type": self.type, "source": self.source,
                "options": list(self.options)}


def bind(source: str, destination: str, *, read_only: bool = False) -> Mount:
    return Mount(destination, source, "bind", ("rbind", "rprivate", "ro" if read_only else "rw"))


# runc spec's defaults, with /dev/shm as the pod's (it is in the shared IPC namespace's spirit)
BASE_MOUNTS = (
    Mount("/proc", "proc", "proc", ()),
    Mount("/dev", "tmpfs", "tmpfs", ("nosuid", "strictatime", "mode=755", "size=65536k")),
    Mount("/dev/pts", "devpts", "devpts", ("nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620")),
    Mount("/dev/shm", "shm", "tmpfs", ("nosuid", "noexec", "nodev", "mode=1777", "size=65536k")),
    Mount("/dev/mqueue", "mqueue", "mqueue", ("nosuid", "noexec", "nodev")),
    Mount("/sys", "sysfs", "sysfs", ("nosuid", "noexec", "nodev", "ro")),
    Mount("/sys/fs/cgroup", "cgroup", "cgroup", ("nosuid", "noexec", "nodev", "relatime", "ro")),
)


@dataclass(frozen=True)
class ContainerBundle:
    """Everything config.json says about one container, already decided."""

    argv: tuple[str, ...]
    env: tuple[str, ...]  # "NAME=value"
    cwd: str
    uid: int
    gid: int
    hostname: str
    cgroups_path: str  # absolute in the cgroupfs hierarchy ("/<agent root>/kubepods/.../<container>/oci")
    resources: CgroupSpec
    oom_score_adj: int | None
    sandbox_pid: int | None  # whose IPC and UTS namespaces the container joins
    rootfs: str = "rootfs"
    mounts: tuple[Mount, ...] = ()
    additional_gids: tuple[int, ...] = ()
    read_only_rootfs: bool = False
    terminal: bool = False  # `tty: true`: the runtime gives the process a console (relayed by the monitor)
    capabilities: tuple[str, ...] = DEFAULT_CAPS
    annotations: Mapping[str, str] = field(default_factory=dict)


def combine_command(command: Sequence[str], args: Sequence[str],
                    entrypoint: Sequence[str], cmd: Sequence[str]) -> tuple[str, ...]:
    """The process argv as Kubernetes makes it; FieldError when nothing is left to run."""
    if command:
        argv = [*command, *args]
    elif args:
        argv = [*entrypoint, *args]
    else:
        argv = [*entrypoint, *cmd]
    if not argv or not argv[0]:
        raise FieldError("command", "Required value: neither the container nor its image names a command")
    for i, a in enumerate(argv):
        if "\0" in a:
            raise FieldError(f"command[{i}]", "must not contain NUL")
    return tuple(argv)


def expand_command(command: Sequence[str], args: Sequence[str],
                   env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """$(VAR) in command and args, from the container's own variables (the image's are not
    visible to the kubelet's expansion)."""
    return [expand(c, env) for c in command], [expand(a, env) for a in args]


def merge_env(image_env: Sequence[str], container_env: Sequence[tuple[str, str]]) -> tuple[
        tuple[str, ...], dict[str, str]]:
    """(the process's "NAME=value" list, the container's own expanded variables).

    Image variables come first and keep their order; a container variable of the same name
    replaces the image's value in place; PATH defaults to containerd's when neither sets it."""
    merged: dict[str, str] = {}
    for item in image_env:
        name, sep, value = item.partition("=")
        if name and sep:
            merged[name] = value
    own: dict[str, str] = {}
    for name, value in container_env:
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise FieldError(f"env[{name}]", "names must be non-empty without '=' or NUL; values without NUL")
        own[name] = expand(value, own)
        merged[name] = own[name]
    merged.setdefault("PATH", DEFAULT_PATH)
    return tuple(f"{k}={v}" for k, v in merged.items()), own


def _table(text: str) -> list[list[str]]:
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def _lookup_user(name: str, passwd: str) -> tuple[int, int] | None:
    for row in _table(passwd):
        if len(row) >= 4 and row[0] == name:
            try:
                return int(row[2]), int(row[3])
            except ValueError:
                return None
    return None


def _primary_gid(uid: int, passwd: str) -> int | None:
    for row in _table(passwd):
        if len(row) >= 4 and row[2] == str(uid):
            try:
                return int(row[3])
            except ValueError:
                return None
    return None


def _lookup_group(name: str, group: str) -> int | None:
    for row in _table(group):
        if len(row) >= 3 and row[0] == name:
            try:
                return int(row[2])
            except ValueError:
                return None
    return None


def _valid_id(value: int, what: str) -> int:
    if not 0 <= value <= 2**31 - 1:
        raise FieldError(what, f"{value} is not a valid id")
    return value


def resolve_user(run_as_user: int | None, run_as_group: int | None, image_user: str,
                 passwd: str = "", group: str = "") -> tuple[int, int]:
    """(uid, gid) of the container process; FieldError naming what cannot be resolved
    (the kubelet's CreateContainerConfigError)."""
    uid: int | None = run_as_user
    gid: int | None = run_as_group
    if uid is None and image_user:
        user_part, _, group_part = image_user.partition(":")
        if user_part.isdigit():
            uid = int(user_part)
        else:
            found = _lookup_user(user_part, passwd)
            if found is None:
                raise FieldError("image.config.User", f"unable to find user {user_part}: no matching entries in "
                                                       "passwd file")
            uid = found[0]
            if gid is None and not group_part:
                gid = found[1]
        if gid is None and group_part:
            if group_part.isdigit():
                gid = int(group_part)
            else:
                g = _lookup_group(group_part, group)
                if g is None:
                    raise FieldError("image.config.User", f"unable to find group {group_part}: no matching entries "
                                                           "in group file")
                gid = g
    if uid is None:
        uid = 0
    if gid is None:
        gid = _primary_gid(uid, passwd)
        if gid is None:
            gid = 0
    return _valid_id(uid, "securityContext.runAsUser"), _valid_id(gid, "securityContext.runAsGroup")


def oci_resources(spec: CgroupSpec) -> dict[str, Any]:
    """linux.resources for the container's limits (runc converts shares to a v2 weight itself)."""
    out: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
    cpu: dict[str, Any] = {}
    if spec.cpu_shares is not None:
        cpu["shares"] = spec.cpu_shares
    if spec.cpu_quota_us is not None:
        cpu["quota"] = spec.cpu_quota_us
        cpu["period"] = spec.cpu_period_us
    if cpu:
        out["cpu"] = cpu
    if spec.memory_max is not None:
        out["memory"] = {"limit": spec.memory_max}
    if spec.pids_max is not None:
        out["pids"] = {"limit": spec.pids_max}
    return out


# the device nodes runc creates in /dev, allowed in the device cgroup (runc's AllowedDevices)
_DEVICE_RULES = [
    {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"},  # null
    {"allow": True, "type": "c", "major": 1, "minor": 5, "access": "rwm"},  # zero
    {"allow": True, "type": "c", "major": 1, "minor": 7, "access": "rwm"},  # full
    {"allow": True, "type": "c", "major": 1, "minor": 8, "access": "rwm"},  # random
    {"allow": True, "type": "c", "major": 1, "minor": 9, "access": "rwm"},  # urandom
    {"allow": True, "type": "c", "major": 5, "minor": 0, "access": "rwm"},  # tty
    {"allow": True, "type": "c", "major": 5, "minor": 2, "access": "rwm"},  # ptmx
    {"allow": True, "type": "c", "major": 136, "access": "rwm"},  # pts
]


def config_json(b: ContainerBundle) -> dict[str, Any]:
    """The bundle's config.json (OCI runtime-spec 1.0)."""
    if not b.cwd.startswith("/"):
        raise FieldError("workingDir", f"{b.cwd!r} must be an absolute path")
    if b.oom_score_adj is not None and not -1000 <= b.oom_score_adj <= 1000:
        raise FieldError("oom_score_adj", f"{b.oom_score_adj} not in [-1000, 1000]")
    for m in b.mounts:
        if not m.destination.startswith("/") or "\0" in m.destination or "/../" in f"{m.destination}/":
            raise FieldError("volumeMounts.mountPath", f"{m.destination!r} must be an absolute path without '..'")
    caps = list(b.capabilities)
    process: dict[str, Any] = {
        "terminal": b.terminal,
        "user": {"uid": b.uid, "gid": b.gid},
        "args": list(b.argv),
        "env": list(b.env),
        "cwd": b.cwd,
        "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        "noNewPrivileges": False,
    }
    if b.additional_gids:
        process["user"]["additionalGids"] = list(b.additional_gids)
    if b.oom_score_adj is not None:
        process["oomScoreAdj"] = b.oom_score_adj
    namespaces: list[dict[str, str]] = [{"type": "pid"}, {"type": "mount"}, {"type": "cgroup"}]
    for ns in ("ipc", "uts"):
        if b.sandbox_pid is not None:
            namespaces.append({"type": ns, "path": f"/proc/{b.sandbox_pid}/ns/{ns}"})
        else:
            namespaces.append({"type": ns})
    resources = oci_resources(b.resources)
    resources["devices"] = [*resources["devices"], *_DEVICE_RULES]
    return {
        "ociVersion": OCI_VERSION,
        "process": process,
        "root": {"path": b.rootfs, "readonly": b.read_only_rootfs},
        "hostname": b.hostname,
        "mounts": [m.to_dict() for m in (*BASE_MOUNTS, *b.mounts)],
        "annotations": dict(b.annotations),
        "linux": {
            "cgroupsPath": b.cgroups_path,
            "resources": resources,
            "namespaces": namespaces,
            "maskedPaths": list(MASKED_PATHS),
            "readonlyPaths": list(READONLY_PATHS),
        },
    }


def container_bundle(*, command: Sequence[str], args: Sequence[str], env: Sequence[tuple[str, str]],
                     working_dir: str | None, run_as_user: int | None, run_as_group: int | None,
                     image: ImageConfig, passwd: str, group: str, hostname: str, cgroups_path: str,
                     resources: CgroupSpec, oom_score_adj: int | None, sandbox_pid: int | None,
                     mounts: Sequence[Mount] = (), read_only_rootfs: bool = False,
                     terminal: bool = False) -> ContainerBundle:
    """One container's bundle from its manifest fields and its image's config (FieldError names
    what cannot be made: the kubelet's CreateContainerConfigError).

    The memory limit stays with the agent's container cgroup alone (the runtime's child gets
    none): an OOM kill is then counted in the agent's cgroup (v1 counts oom_kill per cgroup, and
    the runtime removes its child when the container dies), so OOMKilled is told apart reliably.
    CPU and pids limits are repeated in the child, where they change nothing."""
    env_list, own = merge_env(image.env, env)
    cmd, cargs = expand_command(command, args, own)
    argv = combine_command(cmd, cargs, image.entrypoint, image.cmd)
    uid, gid = resolve_user(run_as_user, run_as_group, image.user, passwd, group)
    return ContainerBundle(argv=argv, env=env_list, cwd=working_dir or image.working_dir or "/", uid=uid, gid=gid,
                           hostname=hostname, cgroups_path=cgroups_path,
                           resources=replace(resources, memory_max=None, memory_high=None),
                           oom_score_adj=oom_score_adj, sandbox_pid=sandbox_pid, mounts=tuple(mounts),
                           read_only_rootfs=read_only_rootfs, terminal=terminal)


def hosts_file(hostname: str) -> str:
    """/etc/hosts as the kubelet writes it for a pod on the host's network."""
    return ("# Kubernetes-managed hosts file (host network).\n"
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            "fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
            f"127.0.1.1\t{hostname}\n")
