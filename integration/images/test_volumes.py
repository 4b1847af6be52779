"""Volumes of image pods through the real agent, as root (runc on the host's v1 layout and in the
UML guest): an emptyDir written by one container and read by another, a memory-backed emptyDir
as a sized tmpfs, a read-only hostPath that cannot be written, a subPath made on the host, and
subPaths that would leave their volume refused (422 for '..', CreateContainerConfigError for a
symlink planted by an init container), and configMap / secret volumes read from a real server
the agent is joined to. What is checked on the host is read from outside the
agent: the files, the mount table, the pod's directory."""

from __future__ import annotations

import glob
import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_harness import NODE_NAME, AgentProcess, poll_until

from images.test_image_pods import make_agent, state_of, wait_state  # noqa: F401 - make_agent: the fixture
from nodeagent.agent.runtime.oci import rootfs


def container(name: str, script: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "image": "", "args": ["-c", script], "volumeMounts": mounts,
            "resources": {"limits": {"memory": "32Mi", "cpu": "250m"}}}


def pod(name: str, image: str, containers: list[dict[str, Any]], volumes: list[dict[str, Any]], *,
        init: list[dict[str, Any]] | None = None, restart: str = "Always") -> dict[str, Any]:
    for c in [*containers, *(init or [])]:
        c["image"] = image
    spec: dict[str, Any] = {"containers": containers, "volumes": volumes, "restartPolicy": restart,
                            "terminationGracePeriodSeconds": 1}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def wait_log(agent: AgentProcess, name: str, container_name: str, lines: int) -> list[str]:
    def read() -> list[str] | None:
        status, body = agent.request("GET", f"/api/v1/namespaces/default/pods/{name}/log?container={container_name}")
        out = str(body).splitlines() if status == 200 else []
        return out if len(out) >= lines else None

    return poll_until(read, 60, f"{lines} lines from {name}/{container_name}\n{agent.log_tail(200)}")


def remove(agent: AgentProcess, name: str) -> None:
    status, _ = agent.delete(name, grace=1)
    assert status == 200
    poll_until(lambda: agent.pod(name) is None, 30, f"{name} to be removed\n{agent.log_tail()}")


def test_an_empty_dir_is_shared_by_the_pods_containers_and_removed_with_it(
        make_agent: Callable[..., AgentProcess], registry: Any) -> None:  # noqa: F811
    agent = make_agent()
    image = f"{registry.host}/test/small:1"
    writer = container("writer", "echo hello-from-writer > /data/msg.tmp && /bin/busybox mv /data/msg.tmp "
                                 "/data/msg; echo in-memory > /mem/m; exec sleep 300",
                       [{"name": "data", "mountPath": "/data"}, {"name": "mem", "mountPath": "/mem"}])
    reader = container("main", "while [ ! -f /shared/msg ]; do sleep 0.1; done; cat /shared/msg; "
                                 "/bin/busybox grep ' /mem ' /proc/mounts; exec sleep 300",
                       [{"name": "data", "mountPath": "/shared", "readOnly": True},
                        {"name": "mem", "mountPath": "/mem"}])
    agent.create_ok(pod("share", image, [writer, reader],
                        [{"name": "data", "emptyDir": {}},
                         {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}]))
    wait_state(agent, "share", "running", 240)
    lines = wait_log(agent, "share", "main", 2)
    assert lines[0] == "hello-from-writer", lines
    fields = lines[1].split()
    assert fields[:3] == ["tmpfs", "/mem", "tmpfs"] and "size=8192k" in fields[3], lines  # sizeLimit

    pod_dirs = glob.glob(str(agent.state_dir / "pods" / "default_share_*"))
    assert len(pod_dirs) == 1
    volumes = Path(pod_dirs[0]) / "_volumes" / "kubernetes.io~empty-dir"
    assert (volumes / "data" / "msg").read_text() == "hello-from-writer\n"  # on nodefs, in the pod's directory
    assert str(volumes / "mem") in rootfs.mounts_under(str(agent.state_dir)), "the tmpfs is mounted on the host"
    assert (volumes / "mem" / "m").read_text() == "in-memory\n"

    remove(agent, "share")
    assert not rootfs.mounts_under(str(agent.state_dir)), "a mount was left behind"
    # the pod leaves the list first, then its directory is removed (manager._remove)
    poll_until(lambda: not Path(pod_dirs[0]).exists(), 10, "the emptyDir to go with its pod")


def test_a_read_only_host_path_cannot_be_written_and_a_sub_path_is_made(
        make_agent: Callable[..., AgentProcess], registry: Any, tmp_path: Path) -> None:  # noqa: F811
    agent = make_agent()
    host = tmp_path / "hostdata"
    host.mkdir()
    (host / "in.txt").write_text("from-host\n")
    # the shell's error through a file to stdout: stderr lines can interleave with stdout's in the log
    script = ("cat /ro/in.txt; if (echo x > /ro/new) 2>/err; then echo WROTE; else echo ro-refused; "
              "cat /err; fi; "
              "echo rw-ok > /rw/out; echo done; exec sleep 300")
    c = container("main", script, [{"name": "h", "mountPath": "/ro", "readOnly": True},
                                   {"name": "h", "mountPath": "/rw", "subPath": "sub/dir"}])
    agent.create_ok(pod("hp", f"{registry.host}/test/small:1", [c],
                        [{"name": "h", "hostPath": {"path": str(host), "type": "Directory"}}]))
    wait_state(agent, "hp", "running", 240)
    lines = wait_log(agent, "hp", "main", 4)
    assert lines == ["from-host", "ro-refused", "/bin/sh: can't create /ro/new: Read-only file system", "done"], lines
    assert not (host / "new").exists()
    assert (host / "sub" / "dir" / "out").read_text() == "rw-ok\n"
    remove(agent, "hp")
    assert (host / "in.txt").exists(), "a hostPath is the host's: the pod's removal leaves it"

    # a hostPath whose type check fails: the container is never created, the message says why
    c = container("main", "exec sleep 300", [{"name": "h", "mountPath": "/h"}])
    agent.create_ok(pod("nohost", f"{registry.host}/test/small:1", [c],
                        [{"name": "h", "hostPath": {"path": str(host / "in.txt"), "type": "Directory"}}]))
    poll_until(lambda: state_of(agent, "nohost").get("waiting", {}).get("reason") == "CreateContainerError", 120,
               lambda: "CreateContainerError\n" + agent.log_tail())
    message = state_of(agent, "nohost")["waiting"]["message"]
    assert 'volume "h"' in message and "is not a directory" in message, message
    remove(agent, "nohost")


def test_sub_paths_that_leave_their_volume_are_refused(make_agent: Callable[..., AgentProcess],  # noqa: F811
                                                       registry: Any) -> None:
    agent = make_agent()
    image = f"{registry.host}/test/small:1"
    status, body = agent.create(pod("dots", image, [container("main", "true", [
        {"name": "data", "mountPath": "/x", "subPath": "../../etc"}])], [{"name": "data", "emptyDir": {}}]))
    assert status == 422, body
    causes = [(c["field"], c["message"]) for c in body["details"]["causes"]]
    assert causes == [("spec.containers[0].volumeMounts[0].subPath",
                       "Invalid value: \"../../etc\": must not contain '..'")], causes

    # a host-process pod has no mount namespace to mount into: refused, named
    host_pod = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "hostproc", "annotations": {"nodeagent.io/host-process": "true"}},
                "spec": {"containers": [{"name": "main", "command": ["sleep", "1"],
                                         "volumeMounts": [{"name": "data", "mountPath": "/x"}]}],
                         "volumes": [{"name": "data", "emptyDir": {}}]}}
    status, body = agent.create(host_pod)
    assert status == 422, body
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.containers[0].volumeMounts"], body

    # an init container plants a symlink to the host's /etc; the app container's subPath follows it: refused
    plant = container("plant", "/bin/busybox ln -s /etc /data/esc", [{"name": "data", "mountPath": "/data"}])
    app = container("main", "cat /x/hostname; exec sleep 300", [{"name": "data", "mountPath": "/x", "subPath": "esc"}])
    agent.create_ok(pod("escape", image, [app], [{"name": "data", "emptyDir": {}}], init=[plant], restart="Never"))
    poll_until(lambda: state_of(agent, "escape").get("waiting", {}).get("reason") == "CreateContainerConfigError",
               240, lambda: "CreateContainerConfigError\n" + agent.log_tail())
    message = state_of(agent, "escape")["waiting"]["message"]
    assert "outside the volume" in message, message
    remove(agent, "escape")


def test_config_map_and_secret_volumes_come_from_the_server(server: Any, make_agent: Callable[..., AgentProcess],  # noqa: F811
                                                            registry: Any) -> None:
    """The agent joined to a real `nodeagent server run`: `kubectl create configmap/secret`, then a
    pod bound to the node mounts them (items, modes); the files are read by the container itself."""
    agent = make_agent(extra_config={"kubeconfig": str(server.node_kubeconfig(NODE_NAME)),
                                     "nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s"})
    poll_until(lambda: "Ready" in server.kubectl("get", "node", NODE_NAME, check=False).stdout, 60,
               "the node to be Ready")
    server.kubectl("create", "configmap", "app-conf", "--from-literal=greeting=hello-from-configmap",
                   "--from-literal=other=x")
    server.kubectl("create", "secret", "generic", "app-secret", "--from-literal=token=s3cret")
    script = ("cat /conf/greeting; echo; cat /conf/sub/other; echo; cat /sec/token; echo; ls /conf; "
              "exec sleep 300")
    c = container("main", script, [{"name": "conf", "mountPath": "/conf"}, {"name": "sec", "mountPath": "/sec"}])
    body = pod("conf", f"{registry.host}/test/small:1", [c], [
        {"name": "conf", "configMap": {"name": "app-conf", "items": [{"key": "greeting", "path": "greeting"},
                                                                      {"key": "other", "path": "sub/other"}]}},
        {"name": "sec", "secret": {"secretName": "app-secret", "defaultMode": 0o400}}])
    path = server.tmp / "conf-pod.json"
    path.write_text(json.dumps(body))
    server.kubectl("apply", "-f", str(path))
    poll_until(lambda: agent.pod("conf") is not None, 60, lambda: "the pod on the agent\n" + agent.log_tail())
    wait_state(agent, "conf", "running", 240)
    lines = wait_log(agent, "conf", "main", 5)
    assert lines == ["hello-from-configmap", "x", "s3cret", "greeting", "sub"], lines
    pod_dir = Path(glob.glob(str(agent.state_dir / "pods" / "default_conf_*"))[0])
    token = pod_dir / "_volumes" / "kubernetes.io~secret" / "sec" / "token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o400
    server.kubectl("delete", "pod", "conf", "--timeout=60s", timeout=70)
    poll_until(lambda: not pod_dir.exists(), 10, "the files to go with their pod")


def test_an_empty_dir_over_its_size_limit_gets_its_pod_evicted(make_agent: Callable[..., AgentProcess],  # noqa: F811
                                                               registry: Any) -> None:
    """As the kubelet's local-storage eviction: no node pressure needed, the message names the volume."""
    agent = make_agent()
    c = container("main", "/bin/busybox dd if=/dev/zero of=/data/big bs=1024 count=2048 2>/dev/null; "
                          "echo written; exec sleep 300", [{"name": "data", "mountPath": "/data"}])
    agent.create_ok(pod("filler", f"{registry.host}/test/small:1", [c],
                        [{"name": "data", "emptyDir": {"sizeLimit": "1Mi"}}]))

    def evicted() -> dict[str, Any] | None:
        p = agent.pod("filler")
        return p if p is not None and p["status"].get("reason") == "Evicted" else None

    status = poll_until(evicted, 240, lambda: "the pod to be evicted\n" + agent.log_tail())["status"]
    assert status["phase"] == "Failed", status
    assert status["message"] == 'Usage of EmptyDir volume "data" exceeds the limit "1Mi". ', status
    events = agent.request("GET", "/api/v1/events")[1]["items"]
    assert any(e["reason"] == "Evicted" and 'volume "data"' in e["message"] for e in events), events
    remove(agent, "filler")
