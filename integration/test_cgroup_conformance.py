"""The CgroupDriver cases of tests/cgroup_conformance.py against the real driver of this kernel:
v1 on the hybrid host, v2 in the UML guest (the same cases run against the fake in the unit suite)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from cgroup_conformance import CASES, Case

from nodeagent.agent.cgroups.detect import make_driver
from nodeagent.agent.cgroups.driver import CgroupDriver


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_kernel_driver_conforms(driver: CgroupDriver, case: Case) -> None:
    case(driver)


def test_the_driver_refuses_the_hierarchy_root(cgroup_version: int) -> None:
    driver = make_driver(f"v{cgroup_version}", "/")  # the guard acts before any file is touched
    for act in (driver.kill, driver.remove):
        with pytest.raises(ValueError, match="hierarchy root"):
            act("")
