"""kubectl logs --timestamps/--since and kubectl attach -i through a real `nodeagent server run` to a
real agent process (its pods in real cgroups), across an agent restart: the daemon's log clock
marks the lines as they are written (and, after a restart, what was written meanwhile with the
restart's time, never earlier than it was written), and a container's stdin FIFO outlives the agent
that started it. The server dials the agent with the agent's own API token (metricsScrape)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from agent_harness import AgentProcess, poll_until
from conftest import KERNEL_VERSION
from secure_cluster import KUBECTL, MARKS, ROOT, SecureServer, talk_on_terminal

pytestmark = MARKS
NODE = "streams-1"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[SecureServer, AgentProcess]]:
    assert KERNEL_VERSION is not None
    (tmp_path / "server").mkdir()
    (tmp_path / "agent").mkdir()
    # the node's kubeconfig is written where SecureServer.node_kubeconfig puts it, once the server runs
    agent = AgentProcess(tmp_path / "agent", KERNEL_VERSION, node_name=NODE, extra_config={
        "kubeconfig": str(tmp_path / "server" / f"system_node_{NODE}.kubeconfig"), "nodeLeaseDurationSeconds": 4,
        "nodeStatusUpdateFrequency": "1s"})
    server = SecureServer(tmp_path / "server", cwd=ROOT,
                          extra_config=f"metricsScrape: {{tokenFile: {agent.workdir / 'token'}}}\n")
    try:
        server.node_kubeconfig(NODE)
        agent.start()
        poll_until(lambda: "Ready" in server.kubectl("get", "node", NODE, check=False).stdout, 30, "the node")
        yield server, agent
        server.kubectl("delete", "pods", "--all", "--timeout=60s", check=False, timeout=70)
    finally:
        try:
            agent.cleanup()
        finally:
            server.stop()


def apply(server: SecureServer, name: str, script: str, **container: object) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "command": ["/bin/sh", "-c", script], **container}],
                     "restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "nodeName": NODE}}
    path = server.tmp / f"{name}.json"
    path.write_text(json.dumps(body))
    server.kubectl("apply", "-f", str(path))
    server.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s", timeout=70)


def stamped(server: SecureServer, name: str, *args: str) -> list[tuple[datetime, str]]:
    out = server.kubectl("logs", name, "--timestamps", *args).stdout.splitlines()
    rows = [line.split(" ", 1) for line in out]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", t) for t, _ in rows), out
    return [(datetime.fromisoformat(t[:26] + "+00:00"), text) for t, text in rows]


def test_log_times_and_attach_across_an_agent_restart(cluster: tuple[SecureServer, AgentProcess]) -> None:
    server, agent = cluster
    gate, gate2 = server.tmp / "gate", server.tmp / "gate2"
    apply(server, "clocked", f"echo early; while [ ! -e {gate} ]; do sleep 0.05; done; echo late; "
                             f"while [ ! -e {gate2} ]; do sleep 0.05; done; echo while-down; exec sleep 300")
    poll_until(lambda: server.kubectl("logs", "clocked").stdout == "early\n", 15, "the early line")
    time.sleep(6)
    gate.touch()
    poll_until(lambda: server.kubectl("logs", "clocked").stdout == "early\nlate\n", 15, "the late line")
    rows = stamped(server, "clocked")
    assert [t for _, t in rows] == ["early", "late"] and (rows[1][0] - rows[0][0]).total_seconds() >= 5.9, rows
    # past "late" by 3 s (kubectl's start and the server's reply take time on a loaded machine; CI once
    # took over 1 s), and still at least 2 s short of "early"
    since = math.ceil((datetime.now(UTC) - rows[1][0]).total_seconds()) + 3
    assert server.kubectl("logs", "clocked", f"--since={since}s").stdout == "late\n"
    late = server.kubectl("logs", "clocked", "--timestamps").stdout.splitlines()[1].split(" ")[0]
    assert server.kubectl("logs", "clocked", f"--since-time={late}").stdout == "late\n"

    apply(server, "reader", "echo waiting; read a; echo got-$a; read b; echo got-$b", stdin=True)
    agent.stop()  # the pods keep running; written meanwhile: a line no agent sees being written
    written = datetime.now(UTC)
    gate2.touch()
    time.sleep(0.5)
    agent.start()
    poll_until(lambda: "while-down" in server.kubectl("logs", "clocked", check=False).stdout, 30,
               "the logs through the restarted agent")
    rows = stamped(server, "clocked")
    assert [t for _, t in rows] == ["early", "late", "while-down"], rows
    assert rows[2][0] >= written and rows[2][0] <= datetime.now(UTC), rows  # the restart's time: late, never early
    assert [t for _, t in stamped(server, "clocked", "--since=1h")] == ["early", "late", "while-down"]

    res = subprocess.run([str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"),
                          "attach", "-i", "reader"], input="first\nsecond\n", capture_output=True, text=True,
                         timeout=60, env={"HOME": str(server.tmp), "PATH": "/usr/bin:/bin"})
    assert (res.returncode, res.stdout) == (0, "got-first\ngot-second\n"), res.stderr  # its stdin outlived the agent
    # it ends (an adopted process's exit code is not the restarted agent's to read: ContainerStatusUnknown)
    poll_until(lambda: (p := server.get_json("pod", "reader")) and p["status"].get("phase") in ("Succeeded", "Failed"),
               30, "the reader to end")
    assert server.kubectl("logs", "reader").stdout == "waiting\ngot-first\ngot-second\n"


def test_a_terminal_and_a_stdin_keeper_outlive_the_agent(cluster: tuple[SecureServer, AgentProcess]) -> None:
    """The holders of a tty container's terminal and of a stdinOnce container's stdin are not the
    agent (runtime/stdio_holder.py): after a restart, `kubectl attach -it` types into the same
    terminal and resizes it, and the first `attach -i` still ends the stdinOnce container's input."""
    server, agent = cluster
    apply(server, "term", "[ -t 0 ] && echo tty-yes; read a; sleep 0.5; echo got-$a $(stty size); exit 3",
          stdin=True, tty=True)
    apply(server, "once", "echo waiting; cat; echo stdin-ended", stdin=True, stdinOnce=True)
    poll_until(lambda: "tty-yes" in server.kubectl("logs", "term").stdout, 15, "the container on its terminal")
    agent.stop()
    time.sleep(0.5)
    agent.start()
    poll_until(lambda: server.kubectl("logs", "once", check=False).stdout == "waiting\n", 30,
               "the logs through the restarted agent")
    argv = [str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"),
            "attach", "-it", "term"]
    out, code = talk_on_terminal(argv, {"HOME": str(server.tmp), "PATH": "/usr/bin:/bin", "TERM": "dumb"},
                                 prompt=b"try pressing enter", reply=b"blue\r", timeout=30, size=(41, 123))
    assert b"got-blue 41 123" in out and code == 0, out
    res = subprocess.run([str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"),
                          "attach", "-i", "once"], input="first\n", capture_output=True, text=True, timeout=60,
                         env={"HOME": str(server.tmp), "PATH": "/usr/bin:/bin"})
    assert (res.returncode, res.stdout) == (0, "first\nstdin-ended\n"), res.stderr
