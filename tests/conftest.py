"""Unit-test settings shared by every file.

Hypothesis' wall-clock checks (a 200 ms deadline per example, the too_slow health check) measure
the machine, not the code: on a busy 2-core machine they fail tests whose behaviour is right.
Speed is measured in bench/, so here they are off.

A unit test that hangs (a deadlock under load was seen once, 28 minutes in the old scheduler's
restart test) fails after UNIT_TIMEOUT_S with its stacks instead of holding CI up; the slowest
unit test takes ~10 s, so the bound is generous.
"""

import pytest
from hypothesis import HealthCheck, settings

UNIT_TIMEOUT_S = 180


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))

settings.register_profile("nodeagent", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("nodeagent")
