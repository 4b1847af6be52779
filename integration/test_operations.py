"""Operating the agent, end to end on a real kernel: live reload, metrics, start-up refusal, CLI.

Host:  .venv/bin/pytest integration/test_operations.py -q
Guest: integration/run-in-uml.sh .venv/bin/pytest integration/test_operations.py -q
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, container_status, pod_manifest, poll_until
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.core.quantity import parse_quantity

ALLOCATE = "b = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\n"


@pytest.fixture
def agent(tmp_path: Path, cgroup_version: int) -> Iterator[AgentProcess]:
    a = AgentProcess(tmp_path, cgroup_version)
    a.start()
    yield a
    a.cleanup()


def _config(agent: AgentProcess) -> dict[str, Any]:
    return json.loads(agent.config_path.read_text())


def _write(agent: AgentProcess, config: dict[str, Any] | str) -> None:
    agent.config_path.write_text(config if isinstance(config, str) else json.dumps(config))


def _metrics(agent: AgentProcess) -> dict[str, list[Any]]:
    status, text = agent.request("GET", "/metrics")
    assert status == 200
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_reload_applies_a_new_threshold_live_and_keeps_pods(agent: AgentProcess) -> None:
    agent.create_ok(pod_manifest("keep", ["sleep", "100000"]))
    pid = agent.wait_running("keep")
    before = parse_quantity(agent.node()["status"]["allocatable"]["memory"])
    config = _config(agent)
    config["evictionHard"] = {"memory.available": "150Mi"}  # was 50Mi: allocatable drops by 100Mi
    _write(agent, config)
    status, body = agent.request("POST", "/api/v1/config/reload")
    assert status == 200 and body["ok"] and "evictionHard" in body["applied"], body
    after = parse_quantity(agent.node()["status"]["allocatable"]["memory"])
    assert before.value() - after.value() == 100 * 1024 * 1024
    thresholds = {s.labels["signal"]: s.value for s in _metrics(agent)["nodeagent_eviction_threshold_bytes"]
                  if s.labels.get("kind") == "hard"}
    assert thresholds["memory.available"] == 150 * 1024 * 1024
    assert agent.wait_running("keep") == pid  # same process: nothing restarted

    # SIGHUP does the same as the route.
    config["evictionHard"] = {"memory.available": "60Mi"}
    _write(agent, config)
    assert agent.proc is not None
    agent.proc.send_signal(signal.SIGHUP)
    poll_until(lambda: parse_quantity(agent.node()["status"]["allocatable"]["memory"]).value()
               == before.value() - 10 * 1024 * 1024, 10, "SIGHUP reload to apply")


def test_reload_of_a_bad_file_keeps_config_and_pods(agent: AgentProcess) -> None:
    agent.create_ok(pod_manifest("keep", ["sleep", "100000"]))
    pid = agent.wait_running("keep")
    node_before = agent.node()["status"]["allocatable"]
    config = _config(agent)
    config["evictionHrad"] = {"memory.available": "1Gi"}  # a typo
    _write(agent, config)
    status, body = agent.request("POST", "/api/v1/config/reload")
    assert status == 422 and not body["ok"]
    assert any("evictionHrad" in e for e in body["errors"]), body
    _write(agent, "evictionSoft: {memory.available: 1Gi}\n")  # soft without a grace period
    status, body = agent.request("POST", "/api/v1/config/reload")
    assert status == 422 and any("evictionSoftGracePeriod" in e for e in body["errors"]), body
    assert agent.node()["status"]["allocatable"] == node_before
    assert agent.wait_running("keep") == pid
    assert agent.alive


def test_reload_needs_authentication(agent: AgentProcess) -> None:
    assert agent.request("POST", "/api/v1/config/reload", auth=False)[0] == 401


def test_metrics_count_restarts_after_a_real_oom_kill(agent: AgentProcess) -> None:
    agent.create_ok(pod_manifest("oom", [sys.executable, "-c", ALLOCATE], limits={"memory": "48Mi"}))

    def restarted() -> dict[str, Any] | None:
        cs = container_status(agent.pod("oom"))  # type: ignore[arg-type]
        last = cs["lastState"].get("terminated", {})
        return cs if cs["restartCount"] >= 1 and last.get("reason") == "OOMKilled" else None

    cs = poll_until(restarted, 30, "an OOM kill and a restart")
    samples = _metrics(agent)
    restarts = [s for s in samples["nodeagent_container_restarts"] if s.labels.get("pod") == "oom"]
    assert restarts and restarts[0].value >= 1, restarts
    assert restarts[0].value <= agent.pod("oom")["status"]["containerStatuses"][0]["restartCount"]  # type: ignore[index]
    assert cs["restartCount"] >= 1
    pods = {(s.labels["phase"], s.labels["qos_class"]): s.value for s in samples["nodeagent_pods"]}
    assert pods.get(("Running", "Burstable"), 0) + pods.get(("Pending", "Burstable"), 0) >= 1
    routes = {s.labels.get("route") for s in samples["nodeagent_http_request_duration_seconds"]}
    assert "/api/v1/pods" in routes  # the canonical route, never a raw URL


def test_refuses_non_loopback_address_without_authentication(tmp_path: Path) -> None:
    config = {"address": "0.0.0.0", "port": 1, "stateDir": str(tmp_path / "state"), "nodeName": "it-node",
              "cgroupRoot": "/nodeagent-it-never-created", "unixSocket": None}
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    run = subprocess.run([sys.executable, "-m", "nodeagent", "run", "--config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run
    assert "address" in run.stderr and "authentication" in run.stderr, run.stderr
    assert not os.path.exists("/sys/fs/cgroup/memory/nodeagent-it-never-created")
    assert not os.path.exists("/sys/fs/cgroup/nodeagent-it-never-created")


def test_cli_against_the_running_agent(agent: AgentProcess, tmp_path: Path) -> None:
    server = ["--server", f"http://127.0.0.1:{agent.port}", "--token-file", str(agent.workdir / "token")]
    cli = [sys.executable, "-m", "nodeagent"]
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: from-cli}\nspec:\n  containers:\n"
                        "  - name: main\n    command: [sh, -c, 'echo hello-from-cli; exec sleep 100000']\n")
    out = subprocess.run([*cli, "apply", "-f", str(manifest), *server], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "pod/from-cli created" in out.stdout, out
    agent.wait_running("from-cli")
    out = subprocess.run([*cli, "pods", *server], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "from-cli" in out.stdout and "Running" in out.stdout, out
    logs = poll_until(lambda: (o := subprocess.run([*cli, "logs", "default/from-cli", *server], capture_output=True,
                                                   text=True, timeout=60)).stdout.strip() and o, 20, "log output")
    assert "hello-from-cli" in logs.stdout
    out = subprocess.run([*cli, "status", *server], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "it-node" in out.stdout, out
    out = subprocess.run([*cli, "delete", "default/nothere", *server], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "not found" in out.stderr, out
    out = subprocess.run([*cli, "delete", "default/from-cli", "--grace-period", "0", *server],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    poll_until(lambda: agent.pod("from-cli") is None, 20, "from-cli to be gone")
