"""README.md's walkthroughs run as written: "A cluster on one machine" and "Walkthrough: from a
registry to image GC". Their lines are taken from the README itself and run by a shell, with only
the demo directory and the cgroup roots renamed to this test's own, so a README that drifts from
the product fails here."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nodeagent.agent.runtime.oci.runtime import cgroup_mounts

ROOT = Path(__file__).resolve().parent.parent
SECTION = "### A cluster on one machine"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the agents make cgroups: needs root")


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


def _remove_tree(*roots: str) -> None:
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


def test_readme_cluster_walkthrough_runs_as_written(tmp_path: Path) -> None:
    lines = readme_lines((ROOT / "README.md").read_text(), SECTION)
    prefix = f"readme-it-{secrets.token_hex(3)}-node"
    script = "\n".join(lines).replace("/tmp/demo", str(tmp_path / "demo")).replace("/demo-node", "/" + prefix)
    assert "/demo-node" not in script and "/tmp/demo" not in script
    # not `set -e`: `kubectl top pods` may still say "metrics not available yet"; what matters is checked below
    wrapped = ("set -u\nshopt -s expand_aliases\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
               + script + "\n")
    try:
        done = subprocess.run(["bash", "-c", wrapped], cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        _remove_tree(prefix + "1", prefix + "2")
    out = done.stdout
    assert done.returncode == 0, f"rc {done.returncode}\n{out[-3000:]}\n{done.stderr[-3000:]}"
    assert re.search(r"^node1\s+Ready", out, re.M) and re.search(r"^node2\s+Ready", out, re.M), out
    assert 'deployment "web" successfully rolled out' in out
    wide = out[out.index("successfully rolled out"):out.index("node/node2 cordoned")]
    assert {"node1", "node2"} <= set(re.findall(r"\b(node[12])\b", wide)), wide  # spread over both agents
    assert "\nhi\n" in out  # kubectl logs through the server
    assert f"/{prefix}" in out and "/kubepods/burstable/pod" in out  # kubectl exec: in the pod's cgroup
    assert re.search(r"^node[12]\s+\d+m\s+\d+%", out, re.M), out  # kubectl top nodes
    after = out[out.index("node/node2 drained"):]
    assert "node1" in after and not re.search(r"Running\s.*\bnode2\b", after), after
    assert 'deployment.apps "web" deleted' in out


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
        _remove_tree(root)
        subprocess.run(["umount", f"{demo}/imagefs"], capture_output=True)
    out = done.stdout
    assert done.returncode == 0, f"rc {done.returncode}\n{out[-3000:]}\n{done.stderr[-3000:]}"
    assert "67108864" in out  # the container's memory limit, read from its cgroup
    assert "hi\n" in out and "Evicted" in out and 'Usage of EmptyDir volume "scratch" exceeds the limit' in out
    assert "No images." in done.stderr and '"resolved": true' in out  # `image ls` says "No images." on stderr
