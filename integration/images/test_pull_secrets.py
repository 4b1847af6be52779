"""imagePullSecrets against Debian's docker-registry with htpasswd basic auth on loopback, through
a real `nodeagent server run` and the real kubectl (`kubectl create secret docker-registry`): the
agent reads each pod's pull secrets with its node credentials and pulls with them. Also what the
kubelet reports of the image: `image` (the spec's reference), `imageID` (the repo digest) and the
Node's status.images names."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agent_harness import NODE_NAME, AgentProcess, poll_until

from images.conftest import USERS
from images.test_image_pods import make_agent, wait_state  # noqa: F401 - make_agent: the fixture


def secret_pod(name: str, image: str, secrets: list[str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": image, "imagePullPolicy": "Always",
                                     "args": ["-c", "echo pulled with a secret; exec sleep 300"],
                                     "resources": {"limits": {"memory": "64Mi", "cpu": "200m"}}}],
                     "imagePullSecrets": [{"name": s} for s in secrets],
                     "restartPolicy": "Never", "terminationGracePeriodSeconds": 1}}


def server_pod(server: Any, name: str) -> dict[str, Any]:
    out = server.kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def waiting_of(server: Any, name: str) -> dict[str, Any]:
    statuses = server_pod(server, name).get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0].get("state", {}).get("waiting") or {})


def apply(server: Any, body: dict[str, Any]) -> None:
    path = server.tmp / f"{body['metadata']['name']}.json"
    path.write_text(json.dumps(body))
    server.kubectl("apply", "-f", str(path))


def test_pull_secrets_from_the_api_authenticate_the_pull(server: Any, make_agent: Callable[..., AgentProcess],  # noqa: F811
                                                         basic_registry: Any) -> None:
    agent = make_agent(extra_config={"kubeconfig": str(server.node_kubeconfig(NODE_NAME)),
                                     "nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s"})
    poll_until(lambda: "Ready" in server.kubectl("get", "node", NODE_NAME, check=False).stdout, 60,
               "the node to be Ready")
    host = basic_registry.host
    image = f"{host}/test/small:1"
    (user, password), = USERS.items()
    server.kubectl("create", "secret", "docker-registry", "right", f"--docker-server={host}",
                   f"--docker-username={user}", f"--docker-password={password}")
    # more specific (the repository's path) and wrong: tried first, refused, then the right one
    server.kubectl("create", "secret", "docker-registry", "wrong", f"--docker-server={host}/test",
                   f"--docker-username={user}", "--docker-password=not-the-password")

    # without a usable secret: ErrImagePull (then ImagePullBackOff) with the registry's 401
    apply(server, secret_pod("denied", image, ["wrong", "missing"]))
    poll_until(lambda: waiting_of(server, "denied").get("reason") in ("ErrImagePull", "ImagePullBackOff"), 120,
               lambda: "the pull to be refused\n" + agent.log_tail())
    message = waiting_of(server, "denied")["message"]
    assert "unauthorized: authentication required (the registry answered 401 Unauthorized)" in message, message
    events = [(e["reason"], e["message"]) for e in agent.request("GET", "/api/v1/events")[1]["items"]
              if e["involvedObject"].get("name") == "denied"]
    assert ("FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets (missing); attempting "
                                               "to pull the image may not succeed.") in events, events
    assert any(r == "Failed" and "401 Unauthorized" in m for r, m in events), events
    apply(server, secret_pod("anonymous", image, []))
    poll_until(lambda: "401 Unauthorized" in waiting_of(server, "anonymous").get("message", ""), 120,
               "the anonymous pull to be refused")

    # with the right password among its secrets: it runs
    apply(server, secret_pod("allowed", image, ["wrong", "right"]))
    poll_until(lambda: agent.pod("allowed") is not None, 60, lambda: "the pod on the agent\n" + agent.log_tail())
    wait_state(agent, "allowed", "running", 240)
    digest = basic_registry.digests["small"]

    def reported() -> dict[str, Any] | None:
        statuses = server_pod(server, "allowed").get("status", {}).get("containerStatuses") or [{}]
        return statuses[0] if "running" in statuses[0].get("state", {}) else None

    status = poll_until(reported, 60, "the running status on the server")
    assert status["image"] == image
    assert status["imageID"] == f"{host}/test/small@{digest}"

    def node_names() -> list[str] | None:
        node = json.loads(server.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)
        names = [n for i in node["status"].get("images") or [] for n in i["names"]]
        return names if image in names else None

    names = poll_until(node_names, 30, "status.images on the server's Node")
    assert f"{host}/test/small@{digest}" in names

    for name in ("denied", "anonymous", "allowed"):
        server.kubectl("delete", "pod", name, "--timeout=60s", timeout=70)
