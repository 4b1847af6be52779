"""README.md's "Walkthrough: from a registry to image GC" runs as written (the cluster walkthrough:
test_readme_cluster.py). Its lines are taken from the README itself and run by a shell, with only
the demo directory and the cgroup roots renamed to this test's own, so a README that drifts from
the product fails here."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest
from readme_blocks import ROOT, readme_lines, remove_tree

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the agents make cgroups: needs root")


def test_readme_image_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """Pull from a registry, a pod with limits and an emptyDir, exec, the sizeLimit eviction and the
    image collected under imagefs pressure, with the agent's own CLI (sh -eux, as the README says)."""
    lines = readme_lines((ROOT / "README.md").read_text(), "### Walkthrough: from a registry to image GC")
    demo, root = str(tmp_path / "demo"), f"readme-it-{secrets.token_hex(3)}-images"
    script = "\n".join(lines).replace("/tmp/nodeagent-image-demo", demo).replace("nodeagent-demo", root)
    assert "nodeagent-demo" not in script
    # if a step fails, the trap stops what the script started and unmounts its imagefs
    wrapped = ('trap \'rc=$?; set +e; kill $AGENT $REGISTRY 2>/dev/null; sleep 1; umount "$D/imagefs" 2>/dev/null; exit $rc\' EXIT\n'
               + script + "\n")
    env = dict(os.environ, PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    try:
        done = subprocess.run(["sh", "-eux", "-c", wrapped], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        remove_tree(root)
        subprocess.run(["umount", f"{demo}/imagefs"], capture_output=True)
    out = done.stdout
    assert done.returncode == 0, f"rc {done.returncode}\n{out[-3000:]}\n{done.stderr[-3000:]}"
    assert "67108864" in out  # the container's memory limit, read from its cgroup
    assert "hi\n" in out and "Evicted" in out and 'Usage of EmptyDir volume "scratch" exceeds the limit' in out
    assert "No images." in done.stderr and '"resolved": true' in out  # `image ls` says "No images." on stderr
