"""Indexed Jobs: the completion index of a pod and the ordered intervals of `completedIndexes`
("1,3-5,7") that upstream writes and parses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.cluster.controllers.common.meta import annotations_of

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
UNKNOWN = -1


def completion_index(pod: Mapping[str, Any]) -> int:
    v = annotations_of(pod).get(COMPLETION_INDEX)
    if v is None or not v.isdigit():
        return UNKNOWN
    return int(v)


def parse(text: str | None, completions: int) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            continue
        out.update(i for i in range(a, b + 1) if 0 <= i < completions)
    return out


def format_intervals(indexes: Iterable[int]) -> str:
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


def generate_name(job_name: str, index: int, max_len: int = 58) -> str:
    """podGenerateNameWithIndex: `<job>-<index>-`, the job name cut to fit MaxGeneratedNameLength."""
    suffix = f"-{index}-"
    prefix = job_name + suffix
    if len(prefix) > max_len:
        prefix = prefix[: max_len - len(suffix)] + suffix
    return prefix
