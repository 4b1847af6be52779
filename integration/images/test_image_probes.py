"""Exec probes and exec lifecycle hooks of a container run from its image, through the real agent:
they run inside the container through the OCI runtime's `exec` (runc on the host's v1 hybrid
layout; runc and crun in the pure-v2 UML guest). Checked from outside the agent: an exec liveness
probe that starts failing restarts the container once (events Unhealthy then Killing), an exec
readiness probe makes it Ready, a postStart hook writes a file in the container's own rootfs, a
preStop hook runs before the SIGTERM, and a probe over its timeout has its exec'd process killed
inside the container (not only the runtime's `exec`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, container_status, poll_until

from images.test_image_exec import cmdline
from images.test_image_pods import make_agent, wait_state  # noqa: F401 - make_agent: the fixture
from nodeagent.agent.cgroups import layout
from nodeagent.agent.runtime.oci.select import installed_runtimes, is_hybrid

# main: healthy (/healthy; the image has no /tmp) until the test creates /out/break, then unhealthy
# (once: the restarted container stays healthy); a TERM is logged to the hostPath /out after
# whatever preStop wrote there, so the file's order is theirs. Probe timeouts are generous: in the
# UML guest (one slow CPU, shared) a `runc exec` can take seconds.
MAIN = ("touch /healthy; trap 'echo term >> /out/order; exit 0' TERM; "
        "while true; do if [ -e /out/break ] && [ ! -e /out/broken ]; then touch /out/broken; rm -f /healthy; fi; "
        "sleep 0.2; done")
EXEC_TIMEOUT_MARK = "77.5"  # `sleep 77.5`: the probe that times out, found by its command line


def probe_pod(out: Path, image: str) -> dict[str, Any]:
    main = {"name": "main", "image": image, "args": ["-c", MAIN],
            "resources": {"limits": {"memory": "64Mi", "cpu": "300m"}},
            "volumeMounts": [{"name": "out", "mountPath": "/out"}],
            "livenessProbe": {"exec": {"command": ["cat", "/healthy"]}, "periodSeconds": 1,
                              "failureThreshold": 2, "timeoutSeconds": 20},
            "readinessProbe": {"exec": {"command": ["/bin/sh", "-c", "test -e /healthy"]}, "periodSeconds": 1,
                               "timeoutSeconds": 20},
            "lifecycle": {"postStart": {"exec": {"command": ["/bin/sh", "-c", "hostname > /poststart"]}},
                          "preStop": {"exec": {"command": ["/bin/sh", "-c", "echo prestop >> /out/order"]}}}}
    slow = {"name": "slow", "image": image, "args": ["-c", "exec sleep 300"],
            "resources": {"limits": {"memory": "32Mi", "cpu": "100m"}},
            "readinessProbe": {"exec": {"command": ["sleep", EXEC_TIMEOUT_MARK]}, "timeoutSeconds": 4,
                               "periodSeconds": 60}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probed", "namespace": "default"},
            "spec": {"containers": [main, slow], "terminationGracePeriodSeconds": 10,
                     "volumes": [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}]}}


def events_of(agent: AgentProcess) -> list[tuple[str, str]]:
    status, body = agent.request("GET", "/api/v1/events")
    assert status == 200, (status, body)
    return [(ev["reason"], ev.get("message", "")) for ev in body["items"]
            if ev.get("involvedObject", {}).get("name") == "probed"]


def ready(agent: AgentProcess, name: str) -> bool | None:
    pod = agent.pod("probed")
    return None if pod is None else bool(container_status(pod, name).get("ready"))


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_exec_probes_and_hooks_run_inside_an_image_container(
        make_agent: Callable[..., AgentProcess], registry: Any, cgroup_version: int,  # noqa: F811
        tmp_path: Path, runtime: str) -> None:
    assert runtime in installed_runtimes(), f"{runtime} missing: run integration/images/install-tools.sh (as root)"
    if runtime == "crun" and is_hybrid(cgroup_version):
        pytest.skip("crun 1.8 refuses the host's cgroup v1 hybrid layout (test_crun_pods); it runs in the UML guest")
    agent = make_agent(extra_config={"ociRuntime": runtime})
    out = tmp_path / "out"
    out.mkdir()
    created = agent.create_ok(probe_pod(out, f"{registry.host}/test/small:1"))
    uid = created["metadata"]["uid"]
    wait_state(agent, "probed", "running", 240)

    # postStart: in the container's rootfs (the overlay the agent mounted), with the pod's hostname
    rootfs = agent.state_dir / "pods"
    def post_start_file() -> str:  # the shell creates the file, then writes it: both may be seen
        return "".join(p.read_text() for p in rootfs.glob("**/oci/main/rootfs/poststart"))

    poll_until(lambda: post_start_file() == "probed\n", 30, "the postStart file")
    assert not Path("/poststart").exists() and not Path("/healthy").exists()  # not the host's
    # readiness: `test -e /healthy` succeeds inside the container (there is no such file here)
    poll_until(lambda: ready(agent, "main"), 60, "main to be Ready\n" + agent.log_tail(300))

    # the probe over its timeout: its `sleep` inside the container (its cgroup) is killed at 4 s
    inner = f"{layout.container_path('Guaranteed', uid, 'slow')}/oci"

    def sleeper() -> list[int]:
        return [p for p in agent.cg.pids(inner) if EXEC_TIMEOUT_MARK in cmdline(p)]

    pids = poll_until(sleeper, 150, "the timed-out probe's process in the container")
    poll_until(lambda: not set(pids) & set(sleeper()), 30, "the timed-out probe's process to be killed")  # << 77 s
    assert ready(agent, "slow") is False

    # liveness: the file goes, `cat` fails, the container is killed and restarted once
    (out / "break").touch()
    poll_until(lambda: container_status(agent.pod("probed") or {}, "main").get("restartCount") == 1, 120,
               lambda: "main restarted by its liveness probe\n" + agent.log_tail())
    events = events_of(agent)
    liveness = [i for i, (r, m) in enumerate(events) if r == "Unhealthy" and m.startswith("Liveness probe failed")]
    killing = [i for i, (r, _) in enumerate(events) if r == "Killing"]
    assert liveness and killing and liveness[0] < killing[0], events
    assert "No such file" in events[liveness[0]][1], events  # busybox cat's words, from inside
    assert events[killing[0]][1] == "Container main failed liveness probe, will be restarted", events
    # the liveness restart ran preStop, then TERM
    assert (out / "order").read_text() == "prestop\nterm\n"
    wait_state(agent, "probed", "running", 60)
    poll_until(lambda: ready(agent, "main"), 60, "main Ready again")
    time.sleep(3)  # the second run stays healthy: no second restart
    assert container_status(agent.pod("probed") or {}, "main")["restartCount"] == 1

    # deletion: preStop before SIGTERM again
    status, _ = agent.delete("probed")
    assert status == 200
    poll_until(lambda: agent.pod("probed") is None, 120, lambda: "the pod to be removed\n" + agent.log_tail())
    assert (out / "order").read_text() == "prestop\nterm\nprestop\nterm\n"
