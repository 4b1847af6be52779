"""What one probe attempt returned, and the kubelet's words for it.

An executor returns a ProbeOutcome; the prober (state.py) turns it into the published result the
way the kubelet's prober.probe does: a warning counts as a success (and is reported), a failure
is reported as `<Kind> probe failed: <output>`, and a probe that could not run (an error in the
kubelet's words) is reported and not counted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Result(enum.Enum):
    SUCCESS = "Success"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"  # no result yet (a startup probe before its first run)


class Verdict(enum.Enum):
    """What an executor saw (pkg/probe's Result)."""

    SUCCESS = "success"
    WARNING = "warning"  # e.g. an HTTP redirect to another host, not followed
    FAILURE = "failure"
    UNKNOWN = "unknown"  # the probe could not be run (e.g. a named port the container lacks): not counted


@dataclass(frozen=True)
class ProbeOutcome:
    verdict: Verdict
    output: str = ""

    @property
    def result(self) -> Result:
        return Result.SUCCESS if self.verdict in (Verdict.SUCCESS, Verdict.WARNING) else Result.FAILURE


def success(output: str = "") -> ProbeOutcome:
    return ProbeOutcome(Verdict.SUCCESS, output) if output else SUCCESS


def failure(output: str) -> ProbeOutcome:
    return ProbeOutcome(Verdict.FAILURE, output)


def warning(output: str) -> ProbeOutcome:
    return ProbeOutcome(Verdict.WARNING, output)


def unknown(output: str) -> ProbeOutcome:
    return ProbeOutcome(Verdict.UNKNOWN, output)


SUCCESS = ProbeOutcome(Verdict.SUCCESS)  # the outcome of most attempts, made once

# Output is cut to what the kubelet reads of an exec probe's output or an HTTP body (10 KiB).
MAX_OUTPUT = 10 * 1024
