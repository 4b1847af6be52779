"""Images through the real agent (`python -m nodeagent run`): `nodeagent image pull|ls|rm` over
its HTTP API with its bearer token, the pulled image in the Node's `status.images`, on disk in the
store under imagefsPath and still there after a restart; and imagefs pressure on a small tmpfs
deleting the unused images before any pod is evicted.

The registry is Debian's docker-registry on loopback holding umoci-built busybox images
(conftest.py). What is checked comes from outside the agent where it can: the store's directories,
statvfs of the tmpfs, the pod's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_harness import AgentProcess, pod_manifest, poll_until
from kernel_view import is_running

NODEAGENT = [sys.executable, "-m", "nodeagent"]


def cli(agent: AgentProcess, *args: str) -> subprocess.CompletedProcess[str]:
    verb, *rest = args
    return subprocess.run([*NODEAGENT, "image", verb, "--server", f"http://127.0.0.1:{agent.port}",
                           "--token-file", str(agent.workdir / "token"), *rest],
                          capture_output=True, text=True, timeout=300)


def log_events(agent: AgentProcess, name: str) -> list[dict[str, Any]]:
    out = []
    for line in agent.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == name:
                out.append(entry)
    return out


def layer_dirs(store: Path) -> list[str]:
    path = store / "layers" / "sha256"
    return sorted(os.listdir(path)) if path.is_dir() else []


def test_pull_ls_status_restart_rm_through_the_agent(make_agent: Callable[..., AgentProcess], registry: Any) -> None:
    agent = make_agent()
    (selected,) = log_events(agent, "oci_runtime_selected")  # once, at start
    assert selected["requested"] == "auto" and selected["runtime"] == "runc"  # installed on every test host
    store = agent.state_dir / "images"  # imagefsPath defaults to nodefsPath, to stateDir
    ref = f"{registry.host}/test/small:1"

    pulled = cli(agent, "pull", ref)
    assert pulled.returncode == 0, pulled.stderr + agent.log_tail()
    assert pulled.stdout.startswith(f"{ref}: ")
    (item,) = json.loads(cli(agent, "ls", "-o", "json").stdout)["items"]
    assert item["repoTags"] == [ref] and item["size"] > 0
    assert f"{registry.host}/test/small@{registry.digests['small']}" in item["repoDigests"]
    assert layer_dirs(store), "the layers are unpacked under <imagefsPath>/images"

    (reported,) = agent.node()["status"]["images"]
    assert reported["sizeBytes"] == item["size"]
    assert set(reported["names"]) == {ref, *item["repoDigests"]}

    agent.stop()  # the store is on disk: a new agent lists the same image
    agent.start()
    assert [i["id"] for i in json.loads(cli(agent, "ls", "-o", "json").stdout)["items"]] == [item["id"]]
    assert agent.node()["status"]["images"] == [reported]

    removed = cli(agent, "rm", ref)
    assert removed.returncode == 0 and "deleted" in removed.stdout, removed.stderr
    assert json.loads(cli(agent, "ls", "-o", "json").stdout)["items"] == []
    assert "images" not in agent.node()["status"]
    assert layer_dirs(store) == []


def available(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_imagefs_pressure_deletes_unused_images_before_any_eviction(
        small_imagefs: Path, make_agent: Callable[..., AgentProcess], registry: Any) -> None:
    """The tmpfs is mounted before the agent starts and unmounted after it stopped (fixture order)."""
    hard = {"memory.available": "50Mi", "imagefs.available": "1Mi"}
    agent = make_agent(extra_config={"imagefsPath": str(small_imagefs), "imageMinimumGCAge": "0s",
                                     "evictionHard": hard})
    for name in ("small", "layered"):
        pulled = cli(agent, "pull", f"{registry.host}/test/{name}:1")
        assert pulled.returncode == 0, pulled.stderr
    assert len(json.loads(cli(agent, "ls", "-o", "json").stdout)["items"]) == 2
    agent.create_ok(pod_manifest("bystander", ["sleep", "100000"]))  # would be the victim of an eviction
    pid, started = agent.wait_running("bystander")
    free_with_images = available(small_imagefs)

    # imagefs.available now 1 MiB above what is free: a shortfall only the images can cover
    config = json.loads(agent.config_path.read_text())
    config["evictionHard"] = {**hard, "imagefs.available": str(free_with_images + (1 << 20))}
    agent.config_path.write_text(json.dumps(config))
    status, body = agent.request("POST", "/api/v1/config/reload")
    assert status == 200 and body["ok"] and "evictionHard" in body["applied"], body

    poll_until(lambda: available(small_imagefs) > free_with_images + (1 << 20), 30,
               "the unused images to be deleted from imagefs")
    items = json.loads(cli(agent, "ls", "-o", "json").stdout)["items"]
    assert len(items) < 2, items  # the least recently used went first, as many as the shortfall needed
    (reclaimed, *_) = log_events(agent, "eviction_reclaimed_images")
    assert reclaimed["signal"] == "imagefs.available" and reclaimed["resolved"] is True
    assert reclaimed["bytes"] >= 1 << 20

    # no pod was evicted: the same process runs, and no Evicted event was recorded
    assert agent.wait_running("bystander") == (pid, started) and is_running(pid, started)
    status, events = agent.request("GET", "/api/v1/events")
    assert status == 200 and not [e for e in events["items"] if e.get("reason") == "Evicted"], events
