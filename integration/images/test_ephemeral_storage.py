"""limits.ephemeral-storage through the real agent, as root (image pods): a pod writing past its
containers' summed limit in its writable layer, and a container past its own limit while the pod
stays under the sum, are evicted at once with the kubelet's messages and the Evicted reason,
without node pressure; a pod under its limit keeps running. What is checked is read from the
agent's API (pod status, events) and the pod's log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_harness import AgentProcess, poll_until

from images.test_image_pods import make_agent  # noqa: F401 - the fixture
from images.test_volumes import container, pod, remove, wait_log

WRITE_2MI = "/bin/busybox dd if=/dev/zero of=/big bs=1024 count=2048 2>/dev/null; echo written; exec sleep 300"
WRITE_1MI = "/bin/busybox dd if=/dev/zero of=/big bs=1024 count=1024 2>/dev/null; echo written; exec sleep 300"


def limited(name: str, script: str, limit: str) -> dict[str, Any]:
    c = container(name, script, [])
    c["resources"]["limits"].update({"ephemeral-storage": limit, "cpu": "50m"})  # 4 of them fit the UML guest
    return c


def test_pods_and_containers_over_their_ephemeral_storage_limit_are_evicted(
        make_agent: Callable[..., AgentProcess], registry: Any) -> None:  # noqa: F811
    agent = make_agent()
    image = f"{registry.host}/test/small:1"
    agent.create_ok(pod("pod-over", image, [limited("main", WRITE_2MI, "1Mi")], []))
    agent.create_ok(pod("container-over", image, [limited("hog", WRITE_2MI, "1Mi"),
                                                  limited("idle", "exec /bin/busybox sleep 300", "8Mi")], []))
    agent.create_ok(pod("calm", image, [limited("main", WRITE_1MI, "4Mi")], []))

    def evicted(name: str) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            p = agent.pod(name)
            return p if p is not None and p["status"].get("reason") == "Evicted" else None
        return dict(poll_until(check, 240, lambda: f"{name} to be evicted\n" + agent.log_tail())["status"])

    status = evicted("pod-over")
    assert status["phase"] == "Failed", status
    assert status["message"] == "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ", status
    status = evicted("container-over")
    assert status["phase"] == "Failed", status
    assert status["message"] == 'Container hog exceeded its local ephemeral storage limit "1Mi". ', status
    events = [(e["reason"], e["message"]) for e in agent.request("GET", "/api/v1/events")[1]["items"]]
    assert ("Evicted", "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ") in events
    assert ("Evicted", 'Container hog exceeded its local ephemeral storage limit "1Mi". ') in events

    assert wait_log(agent, "calm", "main", 1) == ["written"]  # its 1Mi is on disk, and it is still there
    calm = agent.pod("calm")
    assert calm is not None and calm["status"]["phase"] == "Running" and "reason" not in calm["status"], calm
    assert not any("calm" in m for _, m in events)
    for name in ("pod-over", "container-over", "calm"):
        remove(agent, name)
