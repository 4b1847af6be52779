"""configMap and downwardAPI files of a running image container follow their objects, with a real
`nodeagent server run` and the agent joined to it (volumeRefreshPeriod 1s): `kubectl patch` of the
ConfigMap and `kubectl label` of the pod change what the container itself reads, without a
restart; a subPath mount of the same key keeps the first value (as upstream); the volume's
directory has the atomic writer's layout."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_harness import NODE_NAME, AgentProcess, container_status, poll_until

from images.test_image_pods import make_agent, wait_state  # noqa: F401 - make_agent: the fixture
from images.test_volumes import container, pod

# one line per half second, as the container reads its files: "<greeting> <pinned> <labels>"
SCRIPT = ('while true; do echo "$(cat /conf/greeting) $(cat /pinned) $(grep tier /info/labels)"; '
          "sleep 0.5; done")


def last_line(agent: AgentProcess) -> str:
    status, body = agent.request("GET", "/api/v1/namespaces/default/pods/conf/log?tailLines=1")
    return str(body).strip() if status == 200 else ""


def test_config_map_and_label_changes_reach_the_running_container(
        server: Any, make_agent: Callable[..., AgentProcess], registry: Any) -> None:  # noqa: F811
    agent = make_agent(extra_config={"kubeconfig": str(server.node_kubeconfig(NODE_NAME)),
                                     "nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s",
                                     "volumeRefreshPeriod": "1s"})
    poll_until(lambda: "Ready" in server.kubectl("get", "node", NODE_NAME, check=False).stdout, 60,
               "the node to be Ready")
    server.kubectl("create", "configmap", "app-conf", "--from-literal=greeting=v1")
    c = container("main", SCRIPT, [{"name": "conf", "mountPath": "/conf"},
                                   {"name": "conf", "mountPath": "/pinned", "subPath": "greeting"},
                                   {"name": "info", "mountPath": "/info"}])
    body = pod("conf", f"{registry.host}/test/small:1", [c], [
        {"name": "conf", "configMap": {"name": "app-conf"}},
        {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}])
    body["metadata"]["labels"] = {"tier": "a"}
    path = server.tmp / "conf-pod.json"
    path.write_text(json.dumps(body))
    server.kubectl("apply", "-f", str(path))
    poll_until(lambda: agent.pod("conf") is not None, 60, lambda: "the pod on the agent\n" + agent.log_tail())
    wait_state(agent, "conf", "running", 240)
    poll_until(lambda: last_line(agent) == 'v1 v1 tier="a"', 30, lambda: "the first files\n" + agent.log_tail())

    pod_dir = Path(glob.glob(str(agent.state_dir / "pods" / "default_conf_*"))[0])
    volume = pod_dir / "_volumes" / "kubernetes.io~configmap" / "conf"
    first = os.readlink(volume / "..data")
    assert first.startswith("..") and os.readlink(volume / "greeting") == "..data/greeting"

    server.kubectl("patch", "configmap", "app-conf", "-p", '{"data": {"greeting": "v2"}}')
    poll_until(lambda: last_line(agent).startswith("v2 "), 30, "the new value inside\n" + agent.log_tail(100))
    assert last_line(agent) == 'v2 v1 tier="a"'  # the subPath mount keeps its file
    assert os.readlink(volume / "..data") != first and not (volume / first).exists()

    server.kubectl("label", "pod", "conf", "tier=b", "--overwrite")
    poll_until(lambda: last_line(agent) == 'v2 v1 tier="b"', 30, "the new label inside\n" + agent.log_tail(100))
    running = agent.pod("conf")
    assert running is not None and container_status(running)["restartCount"] == 0
    server.kubectl("delete", "pod", "conf", "--timeout=60s", timeout=70)
    poll_until(lambda: not pod_dir.exists(), 10, "the files to go with their pod")
