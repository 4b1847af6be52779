"""What the process runtime needs from a container's cgroup, and an adapter over a CgroupDriver.

The runtime never creates or configures cgroups: it only joins the container process to one
(the shim writes its PID into `procs_files()` before exec), kills everything left in it, and
reads its OOM-kill counter to tell an OOMKilled exit from an ordinary one. Keeping that to a
three-method protocol lets tests use cgroups they make themselves and keeps the runtime
independent of the cgroup version.
"""

from __future__ import annotations

from typing import Protocol

from nodeagent.agent.cgroups.driver import CgroupDriver


class CgroupHandle(Protocol):
    def procs_files(self) -> list[str]:
        """Absolute cgroup.procs files to write the process into (one per v1 hierarchy, one on v2)."""
        ...

    def kill(self) -> None:
        """SIGKILL every process left in the cgroup and its descendants."""
        ...

    def oom_kills(self) -> int:
        """The cgroup's cumulative oom_kill counter (0 where the kernel does not count)."""
        ...


class DriverCgroup:
    """A CgroupHandle for one path of a CgroupDriver (e.g. "kubepods/burstable/pod<uid>/app")."""

    def __init__(self, driver: CgroupDriver, path: str) -> None:
        self.driver = driver
        self.path = path

    def procs_files(self) -> list[str]:
        return self.driver.procs_files(self.path)

    def kill(self) -> None:
        self.driver.kill(self.path)

    def oom_kills(self) -> int:
        return self.driver.oom_kill_count(self.path)

    def __repr__(self) -> str:
        return f"DriverCgroup({self.path!r})"
