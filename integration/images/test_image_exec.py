"""`kubectl exec` into a container run from its image, through a real `nodeagent server run` (the
server relays pods/exec to the agent) and the agent's `runc exec`: the command runs inside the
container (its rootfs, hostname, env, cgroup), with stdin, with a terminal (`-it`), returns its exit
code, and a client that goes away takes the exec'd process with it."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import NODE_NAME, AgentProcess, poll_until

from images.test_image_pods import make_agent, wait_state  # noqa: F401 - make_agent: the fixture
from nodeagent.agent.cgroups import layout


def kubectl_argv(server: Any, *args: str) -> list[str]:
    from secure_cluster import KUBECTL

    return [str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"), *args]


def kubectl(server: Any, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(kubectl_argv(server, *args), input=input, capture_output=True, text=True, timeout=timeout,
                          env={"HOME": str(server.tmp), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def exec_server(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A real secure server whose requests to agents carry the token in the returned file (the
    agent is given the same one), so it can relay pods/exec to the agent."""
    from secure_cluster import ROOT, SecureServer

    (tmp_path / "server").mkdir()
    token_file = tmp_path / "agent-api-token"
    token_file.write_text(secrets.token_hex(16) + "\n")
    token_file.chmod(0o600)
    s = SecureServer(tmp_path / "server", cwd=ROOT, extra_config=f"metricsScrape: {{tokenFile: {token_file}}}\n")
    try:
        yield s, token_file
    finally:
        s.stop()


def join(exec_server: tuple[Any, Path], make_agent: Callable[..., AgentProcess], **config: Any) -> AgentProcess:  # noqa: F811
    """An agent (with `config` beside the rest) joined to the server, its node Ready."""
    server, token_file = exec_server
    agent = make_agent(extra_config={"kubeconfig": str(server.node_kubeconfig(NODE_NAME)),
                                     "authentication": {"tokenFile": str(token_file)},
                                     "nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s", **config})
    agent.token = token_file.read_text().strip()
    poll_until(lambda: "Ready" in server.kubectl("get", "node", NODE_NAME, check=False).stdout, 60,
               "the node to be Ready")
    return agent


@pytest.fixture
def joined(exec_server: tuple[Any, Path], make_agent: Callable[..., AgentProcess],  # noqa: F811
           ) -> tuple[Any, AgentProcess]:
    """An agent joined to the server, its node Ready; (server, agent)."""
    return exec_server[0], join(exec_server, make_agent)


@pytest.fixture
def box(joined: tuple[Any, AgentProcess], registry: Any) -> Iterator[tuple[Any, AgentProcess, str]]:
    """A Guaranteed image pod "box" running `sleep` on an agent joined to the server; (server, agent, uid)."""
    server, agent = joined
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "box", "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": f"{registry.host}/test/small:1",
                                     "args": ["-c", "exec sleep 300"], "workingDir": "/tmp",
                                     "env": [{"name": "GREETING", "value": "hello from the image"}],
                                     "resources": {"limits": {"memory": "64Mi", "cpu": "200m"}}}],
                     "terminationGracePeriodSeconds": 1}}
    path = server.tmp / "box.json"
    path.write_text(json.dumps(body))
    server.kubectl("apply", "-f", str(path))
    poll_until(lambda: agent.pod("box") is not None, 60, lambda: "the pod on the agent\n" + agent.log_tail())
    wait_state(agent, "box", "running", 240)
    pod = agent.pod("box")
    assert pod is not None
    try:
        yield server, agent, pod["metadata"]["uid"]
    finally:
        server.kubectl("delete", "pod", "box", "--timeout=60s", timeout=70, check=False)


def container_pids(agent: AgentProcess, uid: str) -> list[int]:
    return list(agent.cg.pids(f"{layout.container_path('Guaranteed', uid, 'main')}/oci"))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def exec_runs_inside_the_container(server: Any) -> None:
    res = kubectl(server, "exec", "box", "--", "/bin/sh", "-c",
                  'echo "$GREETING in $(pwd) on $(hostname)"; cat /etc/hostname; echo oops >&2; exit 3')
    assert res.returncode == 3, res.stderr
    lines = res.stdout.splitlines()
    # the image's env and the spec's working dir and hostname: the container's process spec
    assert lines == ["hello from the image in /tmp on box", "box"], res.stdout
    assert "oops" in res.stderr and "command terminated with exit code 3" in res.stderr, res.stderr

    res = kubectl(server, "exec", "-i", "box", "--", "/bin/sh", "-c", "tr a-z A-Z; echo done",
                  input="line one\nline two\n")
    assert (res.returncode, res.stdout) == (0, "LINE ONE\nLINE TWO\ndone\n"), res.stderr


def exec_with_a_terminal(server: Any) -> None:
    """`kubectl exec -it`: runc gives the command a terminal of the container's (`runc exec --tty`)."""
    from secure_cluster import talk_on_terminal
    argv = kubectl_argv(server, "exec", "-it", "box", "--", "/bin/sh", "-c",
                        "[ -t 0 ] && echo tty-yes; read answer; echo got-$answer; exit 4")
    out, code = talk_on_terminal(argv, {"HOME": str(server.tmp), "PATH": "/usr/bin:/bin", "TERM": "dumb"},
                                 prompt=b"tty-yes", reply=b"blue\r", timeout=30)
    assert b"tty-yes" in out and b"got-blue" in out, out
    assert code == 4, out


def a_client_that_goes_takes_its_exec_with_it(server: Any, agent: AgentProcess, uid: str) -> None:
    proc = subprocess.Popen(kubectl_argv(server, "exec", "box", "--", "/bin/sleep", "1234"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"HOME": str(server.tmp), "PATH": "/usr/bin:/bin"})
    try:
        poll_until(lambda: any("sleep 1234" in cmdline(p) for p in container_pids(agent, uid)), 30,
                   lambda: "the exec'd sleep in the container's cgroup\n" + agent.log_tail())
    finally:
        proc.kill()
        proc.wait(10)
    poll_until(lambda: not any("sleep 1234" in cmdline(p) for p in container_pids(agent, uid)), 30,
               lambda: "the exec'd sleep to be killed\n" + agent.log_tail())
    assert any("sleep 300" in cmdline(p) for p in container_pids(agent, uid)), "the container itself stays"


def test_kubectl_exec_into_an_image_container(box: tuple[Any, AgentProcess, str]) -> None:
    """One pod for the three (a server and an agent per test would cost most of the time)."""
    server, agent, uid = box
    exec_runs_inside_the_container(server)
    exec_with_a_terminal(server)
    a_client_that_goes_takes_its_exec_with_it(server, agent, uid)
