"""Image pods through the real agent's API (`POST /api/v1/pods`), as root: runc on the host's
cgroup v1 hybrid layout and in the UML guest (pure v2). The image is the umoci-built busybox one
(Entrypoint /bin/sh, Cmd "-c echo hello from small") served by Debian's docker-registry on
loopback (conftest.py). Everything checked is read from outside the agent where it can be: the
cgroupfs, /proc, the mount table, the bundle and runtime state directories."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, container_status, poll_until
from kernel_view import container_id_parts, exe_of, is_running

from images.test_images import _load_overlay_module
from nodeagent.agent.cgroups import layout
from nodeagent.agent.runtime.oci import rootfs
from nodeagent.agent.runtime.oci.runtime import cgroup_mounts
from nodeagent.agent.runtime.oci.sandbox import sandbox_cgroup
from nodeagent.agent.runtime.spawn import clamp_oom_score_adj

MEMORY = 64 << 20


@pytest.fixture
def make_agent(make_agent: Callable[..., AgentProcess]) -> Callable[..., AgentProcess]:
    """The harness's, with overlayfs loaded first (a module in the UML guest's kernel). The harness
    removes the agent's cgroup root also where runc made it, in the hierarchies the driver does not
    manage, once the agent's pods are gone (AgentProcess.cleanup)."""
    _load_overlay_module()
    return make_agent


def runtime_leftovers(agent: AgentProcess, uid: str) -> list[str]:
    """Directories of the pod in any cgroup hierarchy, managed by the agent's driver or not."""
    out = []
    for mount in cgroup_mounts():
        top = os.path.join(mount, agent.cgroup_root.strip("/"))
        out += [d for d, _, _ in os.walk(top) if f"pod{uid}" in d]
    return out


def image_pod(name: str, image: str, *, args: list[str] | None = None, restart: str = "Always",
              memory: str = "64Mi", env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": image,
                         "resources": {"limits": {"memory": memory, "cpu": "500m"}}}
    if args is not None:
        c["args"] = args
    if env is not None:
        c["env"] = env
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [c], "restartPolicy": restart, "terminationGracePeriodSeconds": 2}}


def wait_state(agent: AgentProcess, name: str, key: str, timeout: float) -> None:
    """Until the container's state is `key` (running, terminated); the agent's log in the failure."""
    try:
        poll_until(lambda: key in state_of(agent, name), timeout, f"{name} to be {key}")
    except AssertionError as e:
        events = [(ev["reason"], ev["message"]) for ev in agent.request("GET", "/api/v1/events")[1]["items"]]
        raise AssertionError(f"{e}: {state_of(agent, name)}\n{events}\n{agent.log_tail(300)}") from None


def state_of(agent: AgentProcess, name: str) -> dict[str, Any]:
    pod = agent.pod(name)
    assert pod is not None
    try:
        return dict(container_status(pod)["state"])
    except AssertionError:
        return {}


def log_of(agent: AgentProcess, name: str) -> str:
    status, body = agent.request("GET", f"/api/v1/namespaces/default/pods/{name}/log")
    assert status == 200, (status, body)
    return str(body)


def test_image_pod_runs_in_its_container_cgroup_with_its_limits_and_is_removed(
        make_agent: Callable[..., AgentProcess], registry: Any) -> None:
    agent = make_agent()
    image = f"{registry.host}/test/small:1"
    script = ('echo "$GREETING from $(hostname) as $POD_NAME"; cat /proc/self/oom_score_adj; '
              'cat /etc/hostname; exec sleep 300')
    env = [{"name": "GREETING", "value": "hello"},
           {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    created = agent.create_ok(image_pod("web", image, args=["-c", script], env=env))  # Entrypoint /bin/sh
    uid = created["metadata"]["uid"]
    wait_state(agent, "web", "running", 240)
    pod = agent.pod("web")
    assert pod is not None and pod["status"]["phase"] == "Running"
    assert container_status(pod)["containerID"]

    # Running only once the container's process is in the runtime's child of its container cgroup
    container_cg = layout.container_path("Guaranteed", uid, "main")
    pids = agent.cg.pids(f"{container_cg}/oci")
    assert pids, agent.log_tail()
    limit = "memory.max" if agent.cg.version == 2 else "memory.limit_in_bytes"
    assert int(agent.cg.read(container_cg, "memory", limit)) == MEMORY
    # the script's own children (hostname, cat) may come and go between the two reads
    poll_until(lambda: any(exe_of(p).endswith("busybox") for p in agent.cg.pids(f"{container_cg}/oci")), 10,
               lambda: f"busybox in the container's cgroup: {[exe_of(p) for p in agent.cg.pids(f'{container_cg}/oci')]}")
    # the pod's sandbox is charged to the pod, the runtime's monitor to the runtime's own cgroup
    assert agent.cg.pids(sandbox_cgroup(layout.pod_path("Guaranteed", uid)))
    monitor, _ = container_id_parts(container_status(pod)["containerID"])
    assert monitor in agent.cg.pids(layout.RUNTIME_PATH), agent.cg.pids(layout.RUNTIME_PATH)

    # the logs, through the agent's log API: env (downward API too), hostname, QoS oom_score_adj
    poll_until(lambda: len(log_of(agent, "web").splitlines()) >= 3, 20, "the container's output")
    lines = log_of(agent, "web").splitlines()
    # Guaranteed: -997, as a host process gets it (clamped where the bounding set lacks CAP_SYS_RESOURCE)
    assert lines[:3] == ["hello from web as web", str(clamp_oom_score_adj(-997)), "web"], lines

    bundle = agent.state_dir / "pods"
    assert list(bundle.rglob("oci/main/config.json")), "the bundle lives in the pod's directory"
    assert rootfs.mounts_under(str(agent.state_dir)), "the overlay rootfs is mounted"

    status, _ = agent.delete("web", grace=2)
    assert status == 200
    poll_until(lambda: agent.pod("web") is None, 30, lambda: "the pod to be removed\n" + agent.log_tail())
    assert not rootfs.mounts_under(str(agent.state_dir)), "a mount was left behind"
    assert not list(bundle.rglob("oci")), "a bundle was left behind"
    assert uid not in agent.pod_cgroups(), agent.pod_cgroups()
    assert not runtime_leftovers(agent, uid)
    runc_root = agent.state_dir / "runtime" / "runc"
    assert not (runc_root.is_dir() and os.listdir(runc_root)), "runc state was left behind"
    leases = agent.state_dir / "images" / "leases"
    assert not (leases.is_dir() and [f for f in os.listdir(leases) if f.endswith(".json")]), "a lease was kept"


def test_oom_inside_an_image_container_reads_oomkilled(make_agent: Callable[..., AgentProcess],
                                                        registry: Any) -> None:
    agent = make_agent()
    hog = "x=0123456789; while :; do x=$x$x; done"
    agent.create_ok(image_pod("hog", f"{registry.host}/test/small:1", args=["-c", hog], restart="Never",
                              memory="24Mi"))
    wait_state(agent, "hog", "terminated", 240)
    terminated = state_of(agent, "hog")["terminated"]
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137, terminated


def test_a_bad_image_reads_err_image_pull_then_image_pull_backoff(make_agent: Callable[..., AgentProcess],
                                                                   registry: Any) -> None:
    agent = make_agent()
    agent.create_ok(image_pod("nope", f"{registry.host}/test/nope:1"))
    seen: set[str] = set()

    def reasons() -> bool:
        waiting = state_of(agent, "nope").get("waiting", {})
        seen.add(waiting.get("reason", ""))
        return "ImagePullBackOff" in seen

    poll_until(reasons, 60, "ImagePullBackOff\n" + agent.log_tail(), interval=0.02)
    assert "ErrImagePull" in seen, seen
    waiting = state_of(agent, "nope")["waiting"]
    assert "test/nope:1" in waiting["message"], waiting
    status, events = agent.request("GET", "/api/v1/events")
    assert {"Pulling", "Failed", "BackOff"} <= {e["reason"] for e in events["items"]}, events


def test_without_an_oci_runtime_an_image_pod_is_refused(make_agent: Callable[..., AgentProcess]) -> None:
    agent = make_agent(extra_config={"ociRuntime": "none"})
    status, body = agent.create(image_pod("web", "busybox:1"))
    assert status == 422, body
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.containers[0].image"], body
    assert "ociRuntime" in body["details"]["causes"][0]["message"]


def test_an_image_container_is_adopted_after_the_agent_is_killed(make_agent: Callable[..., AgentProcess],
                                                                  registry: Any) -> None:
    """The runtime's monitor (`runc run`, recorded in the checkpoint) lives in the pod's sandbox
    cgroup, outside the agent: after a SIGKILL of the agent the next one follows the same run, and
    a deletion then stops and removes it as before."""
    agent = make_agent()
    created = agent.create_ok(image_pod("web", f"{registry.host}/test/small:1", args=["-c", "exec sleep 300"]))
    uid = created["metadata"]["uid"]
    wait_state(agent, "web", "running", 240)
    pod = agent.pod("web")
    assert pod is not None
    before = container_status(pod)["containerID"]
    oci = f"{layout.container_path('Guaranteed', uid, 'main')}/oci"

    def command_only() -> set[int] | None:
        """The cgroup's processes once the only one is the command (runc's init stages, which
        can linger a moment in a loaded guest, have gone: seen once in CI's UML run)."""
        pids = set(agent.cg.pids(oci))
        comms = set()
        for p in pids:
            with contextlib.suppress(OSError):
                comms.add(Path(f"/proc/{p}/comm").read_text().strip())
        return pids if pids and comms == {"sleep"} else None

    inner = poll_until(command_only, 30, "the container's command alone in its cgroup")
    agent.crash()
    agent.start()
    wait_state(agent, "web", "running", 60)
    pod = agent.pod("web")
    assert pod is not None
    cs = container_status(pod)
    assert cs["containerID"] == before and cs["restartCount"] == 0, cs
    assert set(agent.cg.pids(oci)) == inner
    status, _ = agent.delete("web", grace=1)
    assert status == 200
    poll_until(lambda: agent.pod("web") is None, 30, lambda: "the pod to be removed\n" + agent.log_tail())
    assert not rootfs.mounts_under(str(agent.state_dir)), "a mount was left behind"
    assert not runtime_leftovers(agent, uid)
    assert all(not is_running(p) for p in inner), [Path(f"/proc/{p}/status").read_text()[:300] for p in inner]
