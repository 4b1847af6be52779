"""Unit-test settings shared by every file.

Hypothesis' wall-clock checks (a 200 ms deadline per example, the too_slow health check) measure
the machine, not the code: on a busy 2-core machine they fail tests whose behaviour is right.
Speed is measured in bench/, so here they are off.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("nodeagent", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("nodeagent")
