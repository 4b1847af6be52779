"""crun through the agent, where it works: Debian's crun 1.8.1 runs the pure-v2 UML guest's
containers and refuses the host's hybrid cgroup layout ("cgroups in hybrid mode not supported").
`ociRuntime: crun` on a hybrid host stops the agent with an error naming the key (and `auto` takes
runc there); elsewhere an image pod runs with crun as its monitor, in its container cgroup with its
limits, and its removal leaves no runtime state, cgroup or mount behind."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, container_status, poll_until
from kernel_view import exe_of

from images.test_image_pods import image_pod, log_of, make_agent, runtime_leftovers, wait_state  # noqa: F401
from nodeagent.agent.cgroups import layout
from nodeagent.agent.runtime.oci import rootfs
from nodeagent.agent.runtime.oci.sandbox import sandbox_cgroup
from nodeagent.agent.runtime.oci.select import installed_runtimes, is_hybrid

MEMORY = 48 << 20


def selected(agent: AgentProcess) -> dict[str, Any]:
    """The agent's oci_runtime_selected log event (its JSON line)."""
    for line in agent.log_path.read_text(errors="replace").splitlines():
        if '"oci_runtime_selected"' in line:
            return dict(json.loads(line))
    raise AssertionError("no oci_runtime_selected in the agent's log:\n" + agent.log_tail())


def test_crun_runs_an_image_pod_where_it_works(make_agent: Callable[..., AgentProcess],  # noqa: F811
                                               registry: Any, cgroup_version: int) -> None:
    assert "crun" in installed_runtimes(), "crun missing: run integration/images/install-tools.sh (as root)"
    if is_hybrid(cgroup_version):
        # the host: crun named in the config is refused at start, with the key; auto takes runc
        with pytest.raises(AssertionError, match="ociRuntime") as refused:
            make_agent(extra_config={"ociRuntime": "crun"})
        assert "hybrid" in str(refused.value), refused.value
        assert selected(make_agent())["runtime"] == "runc"
        return

    agent = make_agent(extra_config={"ociRuntime": "crun"})
    chosen = selected(agent)
    assert (chosen["runtime"], os.path.basename(chosen["binary"])) == ("crun", "crun"), chosen
    created = agent.create_ok(image_pod("web", f"{registry.host}/test/small:1", memory="48Mi",
                                        args=["-c", "echo hello from crun; exec sleep 300"]))
    uid = created["metadata"]["uid"]
    wait_state(agent, "web", "running", 240)
    pod = agent.pod("web")
    assert pod is not None and container_status(pod)["containerID"]

    container_cg = layout.container_path("Guaranteed", uid, "main")
    assert int(agent.cg.read(container_cg, "memory", "memory.max")) == MEMORY
    inner = agent.cg.pids(f"{container_cg}/oci")
    assert inner and all(exe_of(p).endswith("busybox") for p in inner), [exe_of(p) for p in inner]
    monitors = [exe_of(p) for p in agent.cg.pids(layout.RUNTIME_PATH)]
    assert any(m.endswith("/crun") for m in monitors), monitors  # the monitor is crun, in the runtime's cgroup
    assert agent.cg.pids(sandbox_cgroup(layout.pod_path("Guaranteed", uid))), "the sandbox, in the pod's cgroup"
    poll_until(lambda: "hello from crun" in log_of(agent, "web"), 20, "the container's output")
    state = Path(chosen["root"])
    assert state.is_dir() and os.listdir(state), "crun keeps its state under the agent's stateDir"

    status, _ = agent.delete("web", grace=2)
    assert status == 200
    poll_until(lambda: agent.pod("web") is None, 30, lambda: "the pod to be removed\n" + agent.log_tail())
    assert not rootfs.mounts_under(str(agent.state_dir)), "a mount was left behind"
    assert not runtime_leftovers(agent, uid)
    assert not os.listdir(state), "crun state was left behind"
