"""Which OCI runtime runs image containers on this node (pure, plus the PATH lookup).

runc is the default (it runs on the host's cgroup v1 hybrid layout and on pure v2); crun only
where it works: it refuses a hybrid layout (a cgroup2 mount with controllers next to the v1
hierarchies: "cgroups in hybrid mode not supported"). `ociRuntime` in the config names one
(`runc`, `crun`), `auto` (the default) takes the first that works, `none` runs no image.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from nodeagent.core.errors import FieldError

RUNTIMES = ("runc", "crun")
CHOICES = ("auto", "none", *RUNTIMES)
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
UNIFIED_IN_HYBRID = "/sys/fs/cgroup/unified/cgroup.controllers"


def choose_runtime(requested: str, found: Mapping[str, str], *, hybrid: bool) -> str | None:
    """The runtime's name, None when the config says none or auto finds nothing that works;
    FieldError naming `ociRuntime` when the one asked for is missing or cannot run here."""
    if requested not in CHOICES:
        raise FieldError("ociRuntime", f"Unsupported value: {requested!r}: supported values: {', '.join(CHOICES)}")
    if requested == "none":
        return None
    usable = [name for name in RUNTIMES if name in found and not (name == "crun" and hybrid)]
    if requested == "auto":
        return usable[0] if usable else None
    if requested not in found:
        raise FieldError("ociRuntime", f"{requested} is not installed (not found in {SEARCH_PATH})")
    if requested not in usable:
        raise FieldError("ociRuntime", "crun refuses this host's hybrid cgroup layout "
                                       "(cgroup v2 controllers next to v1 hierarchies); use runc")
    return requested


def installed_runtimes() -> dict[str, str]:
    """name -> absolute path of each runtime binary found."""
    out = {}
    for name in RUNTIMES:
        path = shutil.which(name, path=SEARCH_PATH)
        if path:
            out[name] = path
    return out


def is_hybrid(cgroup_version: int, unified_controllers: str = UNIFIED_IN_HYBRID) -> bool:
    """A v1 host whose cgroup2 mount holds controllers (what crun refuses)."""
    if cgroup_version != 1:
        return False
    try:
        with open(unified_controllers) as f:
            return bool(f.read().split())
    except OSError:
        return False


def detect(requested: str, cgroup_version: int) -> tuple[str, str] | None:
    """(name, binary) of the runtime to use, None for none."""
    found = installed_runtimes()
    name = choose_runtime(requested, found, hybrid=is_hybrid(cgroup_version))
    return (name, found[name]) if name else None


def runtime_root(state_dir: str, name: str) -> str:
    """The runtime's own state directory (`--root`), under the agent's stateDir, so two agents
    (or the tests) never share one."""
    return os.path.join(state_dir, name)
