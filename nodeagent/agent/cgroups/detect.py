"""Which cgroup version drives this host, and the driver for it.

`parse_mounts` and `detect_version` are pure (the mount table is an argument); `make_driver` reads
/proc/self/mounts and the cgroup2 root's cgroup.controllers. A hybrid host (cgroup2 mounted but
cpu/memory bound to v1 hierarchies, e.g. /sys/fs/cgroup/unified) is a v1 host for us.
"""

from __future__ import annotations

import os.path
from collections.abc import Iterable
from dataclasses import dataclass, field

from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.core.errors import FieldError

V1_SUBSYSTEMS = frozenset(
    ["cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer", "net_cls", "net_prio",
     "perf_event", "hugetlb", "rdma", "misc"]
)
REQUIRED = ("cpu", "memory")
PREFERRED_V2_MOUNT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class CgroupMounts:
    v2: str | None = None  # the cgroup2 mount point (preferring /sys/fs/cgroup)
    v1: dict[str, str] = field(default_factory=dict)  # v1 controller -> its mount point


def _unescape(field_text: str) -> str:
    """/proc/mounts escapes space, tab, newline and backslash as octal (\\040 ...)."""
    out, i = [], 0
    while i < len(field_text):
        chunk = field_text[i : i + 4]
        if len(chunk) == 4 and chunk[0] == "\\" and chunk[1:].isdigit():
            out.append(chr(int(chunk[1:], 8)))
            i += 4
        else:
            out.append(field_text[i])
            i += 1
    return "".join(out)


def parse_mounts(mounts_text: str) -> CgroupMounts:
    """The cgroup mounts of a /proc/self/mounts text."""
    v2: list[str] = []
    v1: dict[str, str] = {}
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point, fstype, options = _unescape(fields[1]), fields[2], fields[3].split(",")
        if fstype == "cgroup2":
            v2.append(point)
        elif fstype == "cgroup":
            for opt in options:
                if opt in V1_SUBSYSTEMS:
                    v1.setdefault(opt, point)
    chosen = PREFERRED_V2_MOUNT if PREFERRED_V2_MOUNT in v2 else (v2[0] if v2 else None)
    return CgroupMounts(v2=chosen, v1=v1)


def detect_version(mounts_text: str, v2_controllers: str | None = None) -> int:
    """2 when the cgroup2 mount holds both cpu and memory, else 1.

    A controller is bound to one hierarchy only, so cpu or memory mounted as v1 rules v2 out; when
    the text of the cgroup2 root's cgroup.controllers is given it must list both. Raises ValueError
    when there is no cgroup filesystem with a memory controller at all.
    """
    mounts = parse_mounts(mounts_text)
    v1_holds_required = any(c in mounts.v1 for c in REQUIRED)
    if mounts.v2 is not None and not v1_holds_required and (
            v2_controllers is None or all(c in v2_controllers.split() for c in REQUIRED)):
        return 2
    if "memory" in mounts.v1:
        return 1
    raise ValueError(
        f"no usable cgroup hierarchy: cgroup2 at {mounts.v2} "
        f"(controllers: {v2_controllers!r}), v1 controllers {sorted(mounts.v1)}"
    )


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def make_driver(kind: str = "auto", root: str = "/", mounts_text: str | None = None) -> CgroupDriver:
    """The driver for `kind` ("auto" | "v1" | "v2") with the agent cgroup root `root`."""
    from nodeagent.agent.cgroups.v1 import CgroupV1Driver
    from nodeagent.agent.cgroups.v2 import CgroupV2Driver

    if kind not in ("auto", "v1", "v2"):
        raise FieldError("cgroup_driver", f"must be one of auto, v1, v2, got {kind!r}")
    if mounts_text is None:
        mounts_text = _read("/proc/self/mounts") or ""
    mounts = parse_mounts(mounts_text)
    controllers = _read(f"{mounts.v2}/cgroup.controllers") if mounts.v2 else None
    v2_ok = mounts.v2 is not None and controllers is not None and all(
        c in controllers.split() for c in REQUIRED
    )
    if kind == "auto":
        kind = f"v{detect_version(mounts_text, controllers)}"
    if kind == "v2":
        if not v2_ok:
            raise FieldError(
                "cgroup_driver",
                f"v2 needs a cgroup2 mount offering cpu and memory; found {mounts.v2} "
                f"with {controllers.split() if controllers else 'nothing'}",
            )
        assert mounts.v2 is not None
        return CgroupV2Driver(mount=mounts.v2, root=root)
    if "memory" not in mounts.v1:
        raise FieldError("cgroup_driver", f"v1 needs a memory hierarchy; v1 mounts: {mounts.v1}")
    hierarchies = {c: m for c, m in mounts.v1.items() if c in ("cpu", "cpuacct", "memory", "pids")}
    base = _common_parent(hierarchies.values())
    return CgroupV1Driver(mount=base, root=root, hierarchies=hierarchies)


def _common_parent(points: Iterable[str]) -> str:
    paths = list(points)
    return os.path.commonpath([os.path.dirname(p) for p in paths]) if paths else "/sys/fs/cgroup"
