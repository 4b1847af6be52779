"""README.md's "A cluster on one machine" runs as written: its lines are taken from the README
itself and run by a shell, with only the demo directory and the cgroup roots renamed to this
test's own, so a README that drifts from the product fails here. A server and two agents: like the
other multi-node suites it runs on the host only (the Makefile's HOST_ONLY says why)."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest
from readme_blocks import ROOT, readme_lines, remove_tree

SECTION = "### A cluster on one machine"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the agents make cgroups: needs root")


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
        remove_tree(prefix + "1", prefix + "2")
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
