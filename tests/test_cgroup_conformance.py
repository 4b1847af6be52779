"""The CgroupDriver cases of tests/cgroup_conformance.py against the in-memory fake (the same
cases run against the v1 and v2 drivers in integration/test_cgroup_conformance.py)."""

from __future__ import annotations

import pytest
from cgroup_conformance import CASES, Case
from fakes import FakeCgroupDriver


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_fake_driver_conforms(case: Case) -> None:
    case(FakeCgroupDriver("/nodeagent-conformance"))


def test_the_fake_refuses_the_hierarchy_root_as_the_drivers_do() -> None:
    driver = FakeCgroupDriver()  # root "/": the agent's root is the hierarchy's
    for act in (driver.kill, driver.remove):
        with pytest.raises(ValueError, match="hierarchy root"):
            act("")
