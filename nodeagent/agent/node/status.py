"""The Kubernetes Node object the agent reports, built from plain values.

`build_node` and `ConditionTracker` are pure (time comes from an injected clock) so they are
table-tested; `read_node_info` is the one small reader of the machine (uname, os-release).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nodeagent
from nodeagent.core.clock import Clock
from nodeagent.core.errors import FieldError
from nodeagent.core.timefmt import rfc3339
from nodeagent.core.wellknown import (
    LABEL_ARCH,
    LABEL_HOSTNAME,
    LABEL_OS,
    NODE_DISK_PRESSURE,
    NODE_MEMORY_PRESSURE,
    NODE_PID_PRESSURE,
    NODE_READY,
    PRESSURE_CONDITIONS,
)

if TYPE_CHECKING:
    from nodeagent.core.quantity import Quantity

REQUIRED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")

# (type, status) -> (reason, message), as the kubelet words them (pkg/kubelet/nodestatus).
_WORDING: dict[tuple[str, bool], tuple[str, str]] = {
    (NODE_READY, True): ("KubeletReady", "kubelet is posting ready status"),
    (NODE_READY, False): ("KubeletNotReady", "kubelet is not ready"),
    (NODE_MEMORY_PRESSURE, False): ("KubeletHasSufficientMemory",
                                "kubelet has sufficient memory available"),
    (NODE_MEMORY_PRESSURE, True): ("KubeletHasInsufficientMemory",
                               "kubelet has insufficient memory available"),
    (NODE_DISK_PRESSURE, False): ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    (NODE_DISK_PRESSURE, True): ("KubeletHasDiskPressure", "kubelet has disk pressure"),
    (NODE_PID_PRESSURE, False): ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    (NODE_PID_PRESSURE, True): ("KubeletHasInsufficientPID",
                            "kubelet has insufficient PID available"),
}
CONDITION_TYPES = (NODE_READY, *PRESSURE_CONDITIONS)

_GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386",
           "i386": "386", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


@dataclass
class ConditionTracker:
    """Remembers each condition's status so lastTransitionTime moves only on a change."""

    clock: Clock
    _since: dict[str, tuple[bool, float]] = field(default_factory=dict)

    def condition(self, type_: str, status: bool, message: str | None = None) -> dict[str, str]:
        if (type_, status) not in _WORDING:
            raise FieldError("status.conditions.type", f"unknown condition {type_!r}")
        now = self.clock.wall()
        prev = self._since.get(type_)
        if prev is None or prev[0] != status:
            self._since[type_] = (status, now)
        reason, default_message = _WORDING[(type_, status)]
        return {"type": type_, "status": "True" if status else "False", "reason": reason,
                "message": message or default_message,
                "lastHeartbeatTime": rfc3339(now),
                "lastTransitionTime": rfc3339(self._since[type_][1])}

    def conditions(self, *, ready: bool, memory_pressure: bool, disk_pressure: bool,
                   pid_pressure: bool, not_ready_message: str | None = None
                   ) -> list[dict[str, str]]:
        """The four node conditions, in the kubelet's order (pressure first, Ready last)."""
        return [self.condition(NODE_MEMORY_PRESSURE, memory_pressure),
                self.condition(NODE_DISK_PRESSURE, disk_pressure),
                self.condition(NODE_PID_PRESSURE, pid_pressure),
                self.condition(NODE_READY, ready, None if ready else not_ready_message)]


@dataclass(frozen=True)
class NodeStatusInput:
    name: str
    capacity: Mapping[str, Quantity | int]
    allocatable: Mapping[str, Quantity | int]
    usage: Mapping[str, Quantity | int]
    addresses: Sequence[Mapping[str, str]]
    node_info: Mapping[str, str]
    ready: bool = True
    not_ready_message: str | None = None
    memory_pressure: bool = False
    disk_pressure: bool = False
    pid_pressure: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)


def _resources(values: Mapping[str, Quantity | int], where: str,
               required: Sequence[str]) -> dict[str, str]:
    for name in required:
        if name not in values:
            raise FieldError(f"{where}.{name}", "required")
    return {k: str(v) for k, v in sorted(values.items())}


def build_node(inp: NodeStatusInput, tracker: ConditionTracker) -> dict[str, Any]:
    """The Node object (apiVersion v1, kind Node) with quantities in canonical form;
    `tracker` carries condition transition times from one report to the next."""
    if not inp.name:
        raise FieldError("metadata.name", "required")
    labels = {LABEL_HOSTNAME: inp.name,
              LABEL_OS: inp.node_info.get("operatingSystem", "linux"),
              LABEL_ARCH: inp.node_info.get("architecture", "")}
    labels.update(inp.labels)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": inp.name, "labels": labels},
        "status": {
            "capacity": _resources(inp.capacity, "status.capacity", REQUIRED_RESOURCES),
            "allocatable": _resources(inp.allocatable, "status.allocatable",
                                      REQUIRED_RESOURCES),
            "conditions": tracker.conditions(
                ready=inp.ready, memory_pressure=inp.memory_pressure,
                disk_pressure=inp.disk_pressure, pid_pressure=inp.pid_pressure,
                not_ready_message=inp.not_ready_message),
            "addresses": [dict(a) for a in inp.addresses],
            "nodeInfo": dict(inp.node_info),
            "usage": _resources(inp.usage, "status.usage", ()),
        },
    }


def parse_os_release(text: str) -> str:
    """PRETTY_NAME from os-release(5) text (shell-style quoting), else NAME, else 'Linux'."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            fields[key] = value
    return fields.get("PRETTY_NAME") or fields.get("NAME") or "Linux"


def go_arch(machine: str) -> str:
    """uname machine -> the GOARCH name Kubernetes uses (x86_64 -> amd64)."""
    return _GOARCH.get(machine, machine)


def read_node_info(cgroup_version: str, cgroup_driver: str, root: str = "/") -> dict[str, str]:
    """nodeInfo from this machine: kernel, OS image, arch, boot and machine ids."""
    def read(rel: str) -> str:
        try:
            return Path(root, rel).read_text().strip()
        except OSError:
            return ""

    os_release = read("etc/os-release") or read("usr/lib/os-release")
    uname = os.uname()
    return {
        "kernelVersion": uname.release,
        "osImage": parse_os_release(os_release),
        "operatingSystem": platform.system().lower() or "linux",
        "architecture": go_arch(uname.machine),
        "machineID": read("etc/machine-id"),
        "bootID": read("proc/sys/kernel/random/boot_id"),
        "cgroupVersion": cgroup_version,
        "cgroupDriver": cgroup_driver,
        "agentVersion": nodeagent.__version__,
    }
