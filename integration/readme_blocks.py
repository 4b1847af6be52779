"""README.md's code blocks, for the tests that run its walkthroughs as written."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from nodeagent.agent.runtime.oci.runtime import cgroup_mounts

ROOT = Path(__file__).resolve().parent.parent


def readme_lines(readme: str, heading: str) -> list[str]:
    """The first indented block after `heading`, without the four spaces and the `$ ` prompts."""
    start = readme.index("\n\n    ", readme.index(heading)) + 2
    lines: list[str] = []
    for line in readme[start:].splitlines():
        if not line.strip():
            break
        assert line.startswith("    "), f"README block ends without a blank line: {line!r}"
        line = line[4:]
        lines.append(line[2:] if line.startswith("$ ") else line)
    return lines


def remove_tree(*roots: str) -> None:
    """Kill what the demo's pods left (agents leave pods running on stop) and remove the roots."""
    tops = [os.path.join(m, root) for m in cgroup_mounts() for root in roots]
    for _ in range(3):
        for top in tops:
            for d, _, files in os.walk(top):
                if "cgroup.procs" in files:
                    with contextlib.suppress(OSError), open(os.path.join(d, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.3)
    for top in tops:
        for d, _, _ in sorted(os.walk(top, topdown=False), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(d)
    left = [t for t in tops if os.path.isdir(t)]
    assert not left, f"left behind: {left}"
