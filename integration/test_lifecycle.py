"""The probe, hook, init-container, env and termination-message building blocks driving real
container processes (the runtime's ContainerWorker, in cgroups this test creates) by hand, each
on its own; the pod worker that wires them together is shown end to end through the agent's API
in test_pod_lifecycle.py. Here: a liveness failure restarts the container, readiness follows
a file the container makes, init containers and a sidecar start in order and the pod completes,
the downward API reaches the process, preStop runs in the container before its SIGTERM, and a
termination message is read back. Runs on whichever cgroup version the kernel drives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_harness import ensure_loopback_up

from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.agent.lifecycle.hooks import HookRunner, HookTarget
from nodeagent.agent.lifecycle.init_sequence import next_steps, supervisor_restart_policy
from nodeagent.agent.lifecycle.phase import pod_phase
from nodeagent.agent.lifecycle.termination_message import termination_message
from nodeagent.agent.probes.exec_probe import ExecTarget
from nodeagent.agent.probes.http_probe import HttpProber
from nodeagent.agent.probes.pod_probes import PodProbes, ProbeContext
from nodeagent.agent.probes.state import Event
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.agent.runtime.cgroup_handle import DriverCgroup
from nodeagent.agent.runtime.spawn import DEFAULT_PATH, LaunchSpec, clamp_oom_score_adj
from nodeagent.agent.runtime.state import Running, Terminated
from nodeagent.agent.runtime.supervisor import ContainerConfig, ContainerWorker
from nodeagent.core.clock import SystemClock
from nodeagent.core.downward import NodeFacts, resolve_env
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.quantity import parse_quantity


async def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


class Pod_:
    """The containers of one pod as ContainerWorkers in cgroups of their own (a stand-in for the pod worker)."""

    def __init__(self, driver: CgroupDriver, pod: Pod, tmp: Path) -> None:
        self.driver, self.pod, self.tmp = driver, pod, tmp
        self.workers: dict[str, ContainerWorker] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.cgroups: dict[str, DriverCgroup] = {}
        self.started_order: list[str] = []

    def path(self, name: str) -> str:
        return f"kubepods/pod{self.pod.metadata.uid}/{name}"

    def container(self, name: str) -> Any:
        return next(c for c in [*self.pod.spec.init_containers, *self.pod.spec.containers] if c.name == name)

    def start(self, name: str, env: dict[str, str] | None = None) -> ContainerWorker:
        c = self.container(name)
        init = any(i.name == name for i in self.pod.spec.init_containers)
        self.driver.create(self.path(name), CgroupSpec(memory_max=128 * 1024 * 1024))
        cg = DriverCgroup(self.driver, self.path(name))
        launch = LaunchSpec((*c.command, *c.args), env or {"PATH": DEFAULT_PATH}, str(self.tmp))
        cfg = ContainerConfig(name=name, launch=launch, restart_policy=supervisor_restart_policy(
            self.pod.spec.restart_policy, c, init=init),
            log_dir=logs.container_log_dir(str(self.tmp / "state"), "default", self.pod.metadata.name,
                                           self.pod.metadata.uid, name),
            oom_score_adj=clamp_oom_score_adj(900), pod_name=self.pod.metadata.name, pod_uid=self.pod.metadata.uid)
        w = ContainerWorker(cfg, cg, backoff=CrashBackoff(initial=0.05, maximum=0.2))
        self.workers[name], self.cgroups[name] = w, cg
        self.tasks[name] = asyncio.ensure_future(w.run())
        self.started_order.append(name)
        return w

    def status(self, name: str) -> Any:
        w = self.workers.get(name)
        return w.status if w is not None else None

    def exec_target(self, name: str) -> ExecTarget | None:
        w = self.workers.get(name)
        if w is None or not isinstance(w.status.state, Running):
            return None
        return ExecTarget(cgroup=self.cgroups[name], env=dict(w.config.launch.env), working_dir=str(self.tmp))

    async def close(self) -> None:
        for w in self.workers.values():
            await w.stop(0)
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for name in self.workers:
            self.driver.kill(self.path(name))
            self.driver.remove(self.path(name))


def manifest(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **spec: Any) -> Pod:
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "uid": "it-1"},
                      "spec": {"containers": containers, "initContainers": init or [], **spec}})


def probes_for(p: Pod_, events: list[tuple[str, Event]], kills: list[str]) -> PodProbes:
    def on_kill(container: str, message: str, grace: int | None) -> None:
        kills.append(message)
        (p.tmp / "unhealthy").unlink(missing_ok=True)  # the next run is healthy again
        p.driver.kill(p.path(container))  # the supervisor sees the exit and restarts per policy

    return PodProbes(p.pod, ProbeContext(HttpProber(), exec_target=p.exec_target), status=p.status,
                     deleting=lambda: False, on_event=lambda c, e: events.append((c, e)), on_kill=on_kill,
                     on_change=lambda: None, clock=SystemClock())


async def test_liveness_failure_restarts_a_real_container_and_readiness_follows(driver: CgroupDriver, tmp_path: Path) -> None:
    pod = manifest([{
        "name": "app", "command": ["/bin/sh", "-c", "sleep 0.3; touch ready-$$; ln -sf ready-$$ ready; exec sleep 1000"],
        "readinessProbe": {"exec": {"command": ["/bin/sh", "-c", "test -e ready && test -e /proc/$(readlink ready | cut -d- -f2)"]},
                           "periodSeconds": 1, "timeoutSeconds": 10},
        # timeoutSeconds 10: a fork+exec in the UML guest of a loaded host can take over the default 1 s
        "livenessProbe": {"exec": {"command": ["/bin/sh", "-c", "test ! -e unhealthy"]}, "periodSeconds": 1,
                          "timeoutSeconds": 10, "failureThreshold": 2},
    }])
    p, events, kills = Pod_(driver, pod, tmp_path), [], []
    pp = probes_for(p, events, kills)
    worker = p.start("app")
    pp.start(lambda coro, name: asyncio.ensure_future(coro))
    try:
        await wait_for(lambda: pp.ready("app"))
        assert pp.started("app") and not kills
        (tmp_path / "unhealthy").touch()
        await wait_for(lambda: kills != [])
        await wait_for(lambda: worker.status.restart_count == 1 and isinstance(worker.status.state, Running))
        pp.container_changed("app")
        await wait_for(lambda: pp.ready("app"))
        assert kills == ["Container app failed liveness probe, will be restarted"]
        liveness = [(e.reason, e.message) for _, e in events if e.reason == "Killing" or e.message.startswith("Liveness")]
        assert liveness == [("Unhealthy", "Liveness probe failed: "), ("Unhealthy", "Liveness probe failed: "),
                            ("Killing", "Container app failed liveness probe, will be restarted")]  # failureThreshold 2
        conds = {c.type: c.status for c in pp.conditions("Running", [], time.time())}
        assert conds == {"Initialized": True, "Ready": True, "ContainersReady": True}
    finally:
        await pp.stop()
        await p.close()


async def test_init_containers_and_a_sidecar_run_in_order_and_the_pod_completes(driver: CgroupDriver, tmp_path: Path) -> None:
    pod = manifest(
        [{"name": "app", "command": ["/bin/sh", "-c", "test -e setup-done && test -e proxy-up && echo served > out"]}],
        init=[{"name": "setup", "command": ["/bin/sh", "-c", "sleep 0.2; touch setup-done"]},
              {"name": "proxy", "command": ["/bin/sh", "-c", "sleep 0.3; touch proxy-up; exec sleep 1000"],
               "restartPolicy": "Always", "startupProbe": {"exec": {"command": ["test", "-e", "proxy-up"]},
                                                           "periodSeconds": 1, "timeoutSeconds": 10,
                                                           "failureThreshold": 30}}],
        restartPolicy="Never")
    p, events, kills = Pod_(driver, pod, tmp_path), [], []
    pp = probes_for(p, events, kills)
    pp.start(lambda coro, name: asyncio.ensure_future(coro))
    phases: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            statuses = {n: w.status for n, w in p.workers.items()}
            started = {n: pp.started(n) for n in p.workers}
            phase = pod_phase(pod.spec, statuses, started)
            if not phases or phases[-1] != phase:
                phases.append(phase)
            if phase == "Succeeded":
                break
            steps = next_steps(pod.spec, statuses, started)
            assert steps.failed is None
            for name in steps.start:
                p.start(name)
                pp.container_changed(name)
            for name in steps.stop:
                await p.workers[name].stop(1)
            await asyncio.sleep(0.05)
        assert p.started_order == ["setup", "proxy", "app"]
        assert (tmp_path / "out").read_text() == "served\n"
        assert phases == ["Pending", "Running", "Succeeded"]
        assert isinstance(p.status("proxy").state, Terminated)  # stopped once the app container was done
        conds = {c.type: (c.status, c.reason) for c in pp.conditions("Succeeded", [], time.time())}
        assert conds["Initialized"] == (True, "PodCompleted") and conds["ContainersReady"] == (False, "PodCompleted")
    finally:
        await pp.stop()
        await p.close()


async def test_downward_api_env_reaches_the_process(driver: CgroupDriver, tmp_path: Path) -> None:
    pod = manifest([{"name": "app", "command": ["/bin/sh", "-c", "env | sort"],
                     "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}},
                     "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                             {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                             {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                                   "divisor": "1Mi"}}},
                             {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu",
                                                                                  "divisor": "1m"}}},
                             {"name": "GREETING", "value": "hello $(POD_NAME)"}]}], restartPolicy="Never")
    env = resolve_env(pod, pod.spec.containers[0], NodeFacts(node_name="node-it", host_ips=("127.0.0.1",),
                                                             allocatable={"cpu": parse_quantity("2")})).as_dict()
    p = Pod_(driver, pod, tmp_path)
    w = p.start("app", {**env, "PATH": DEFAULT_PATH})
    try:
        await wait_for(lambda: isinstance(w.status.state, Terminated))
        seen = dict(line.split("=", 1) for line in Path(w.log_path).read_text().splitlines() if "=" in line)
        assert {k: seen[k] for k in ("POD_NAME", "NODE", "MEM_MI", "CPU_M", "GREETING")} == {
            "POD_NAME": "web", "NODE": "node-it", "MEM_MI": "64", "CPU_M": "250", "GREETING": "hello web"}
    finally:
        await p.close()


async def test_pre_stop_runs_in_the_container_before_its_sigterm(driver: CgroupDriver, tmp_path: Path) -> None:
    ensure_loopback_up()
    script = ('trap \'test -e pre-stop-ran && echo term-after-hook > order; exit 0\' TERM; '
              "while :; do sleep 0.05; done")
    pod = manifest([{"name": "app", "command": ["/bin/sh", "-c", script], "lifecycle": {"preStop": {"exec": {
        "command": ["/bin/sh", "-c", "sleep 1.2; grep -q app /proc/self/cgroup && touch pre-stop-ran"]}}}}],
        terminationGracePeriodSeconds=10)
    p = Pod_(driver, pod, tmp_path)
    w = p.start("app")
    try:
        await wait_for(lambda: isinstance(w.status.state, Running))
        hooks = HookRunner(HttpProber(), clock=SystemClock())
        began = time.monotonic()
        result = await hooks.pre_stop(HookTarget(pod, pod.spec.containers[0], p.exec_target("app")), 10)
        took = time.monotonic() - began
        assert result.completed and result.events == ()
        # whole seconds taken off the grace period, as the kubelet counts them (1.2 s or more: 1 or more)
        assert 1 <= result.elapsed <= took < result.elapsed + 1.5
        assert result.grace_left == 10 - result.elapsed
        final = await w.stop(result.grace_left)
        assert isinstance(final.state, Terminated) and final.state.exit_code == 0
        assert (tmp_path / "order").read_text() == "term-after-hook\n"
    finally:
        await p.close()


async def test_termination_messages_from_real_runs(driver: CgroupDriver, tmp_path: Path) -> None:
    msg = tmp_path / "termination-log"
    pod = manifest([{"name": "app", "command": ["/bin/sh", "-c", f"echo 'bad config: x' > {msg}; exit 3"],
                     "terminationMessagePath": str(msg)},
                    {"name": "logs", "command": ["/bin/sh", "-c", "echo starting; echo 'panic: nil map' >&2; exit 2"],
                     "terminationMessagePath": str(tmp_path / "none"), "terminationMessagePolicy": "FallbackToLogsOnError"}],
                   restartPolicy="Never")
    p = Pod_(driver, pod, tmp_path)
    a, b = p.start("app"), p.start("logs")
    try:
        await wait_for(lambda: isinstance(a.status.state, Terminated) and isinstance(b.status.state, Terminated))
        assert isinstance(a.status.state, Terminated) and isinstance(b.status.state, Terminated)
        assert termination_message(pod.spec.containers[0], a.status.state, log_path=a.log_path) == "bad config: x\n"
        assert termination_message(pod.spec.containers[1], b.status.state, log_path=b.log_path) == "starting\npanic: nil map\n"
    finally:
        await p.close()
