"""Probes, lifecycle hooks, init containers, termination messages and the downward API, wired into
the real agent: each test POSTs a pod manifest to `python -m nodeagent run` (agent_harness.py) and
reads what happened from the API (status, conditions, /api/v1/events) and from files the
containers' processes write.

Host (cgroup v1):      .venv/bin/pytest integration/test_pod_lifecycle.py -q -p no:cacheprovider
UML guest (pure v2):   integration/run-in-uml.sh .venv/bin/pytest integration/test_pod_lifecycle.py -q

Exec probes and hooks get timeoutSeconds of a few seconds: a fork+exec in the one slow CPU of the
UML guest can take more than the default 1 s. Waiting is polling against a deadline.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_harness import NODE_NAME, AgentProcess, free_port, poll_until

from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.journal import CheckpointJournal
from nodeagent.core.quantity import parse_quantity

WAIT_S = 60.0  # generous: the UML guest has one slow CPU
LOOP = "while :; do sleep 0.1; done"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Where the containers write what they saw (world-writable is not needed: they run as root)."""
    d = tmp_path / "files"
    d.mkdir()
    return d


# ---- manifests and readings ----


def sh(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["/bin/sh", "-c", script], **extra}


def pod_of(name: str, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
           **spec: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
            "labels": {"app": "web"}, "annotations": {"team": "blue"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": containers, "initContainers": init or [], **spec}}


def exec_probe(script: str, **timing: Any) -> dict[str, Any]:
    return {"exec": {"command": ["/bin/sh", "-c", script]}, "periodSeconds": 1, "timeoutSeconds": 5, **timing}


def status_of(agent: AgentProcess, pod: str, container: str) -> dict[str, Any]:
    p = agent.pod(pod)
    assert p is not None, pod
    st = p["status"]
    for cs in [*st.get("initContainerStatuses", []), *st.get("containerStatuses", [])]:
        if cs["name"] == container:
            return dict(cs)
    raise AssertionError(f"no status for {container} in {st}")


def state_of(agent: AgentProcess, pod: str, container: str) -> str:
    return next(iter(status_of(agent, pod, container)["state"]), "")


def conditions(agent: AgentProcess, pod: str) -> dict[str, str]:
    p = agent.pod(pod)
    assert p is not None, pod
    return {c["type"]: c["status"] for c in p["status"].get("conditions", [])}


def phase(agent: AgentProcess, pod: str) -> str:
    p = agent.pod(pod)
    return p["status"]["phase"] if p else ""


def kubectl_status(p: dict[str, Any]) -> str:
    """The STATUS column kubectl prints, from the statuses (its printer's init-container rules)."""
    st = p["status"]
    inits = p["spec"].get("initContainers", [])
    sidecars = {c["name"] for c in inits if c.get("restartPolicy") == "Always"}
    done = 0
    for cs in st.get("initContainerStatuses", []):
        state = cs["state"]
        completed = "terminated" in state and state["terminated"]["exitCode"] == 0
        if completed or (cs["name"] in sidecars and "running" in state and cs.get("started")):
            done += 1
        elif "terminated" in state:
            return f"Init:{state['terminated'].get('reason') or 'Error'}"
        elif "waiting" in state and state["waiting"]["reason"] != "PodInitializing":
            return f"Init:{state['waiting']['reason']}"
        else:
            return f"Init:{done}/{len(inits)}"
    return str(st["phase"])


def pod_events(agent: AgentProcess, pod: str) -> list[tuple[str, str, str]]:
    status, body = agent.request("GET", "/api/v1/events")
    assert status == 200, (status, body)
    return [(e["reason"], e["involvedObject"].get("fieldPath", ""), e["message"]) for e in body["items"]
            if e["involvedObject"]["name"] == pod]


def read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def timestamps(path: Path) -> tuple[float, float]:
    """(start, end) a container wrote as `start <t>` / `end <t>` lines."""
    values = dict(line.split() for line in path.read_text().splitlines())
    return float(values["start"]), float(values["end"])


def in_container_cgroup(cgroup_file: Path, uid: str, container: str) -> bool:
    """/proc/self/cgroup as a process saw it names the container's cgroup (every line on v1)."""
    entries = [line.split(":", 2) for line in cgroup_file.read_text().splitlines() if line]
    wanted = f"/pod{uid}/{container}"
    v1 = [path for _, controllers, path in entries if {"cpu", "memory"} & set(controllers.split(","))]
    relevant = v1 or [path for hid, _, path in entries if hid == "0"]  # v2: the one unified line
    return bool(relevant) and all(path.endswith(wanted) for path in relevant)


def never_within(seconds: float, check: Callable[[], str | None]) -> None:
    """check() must stay None for `seconds` (it names what went wrong otherwise)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        problem = check()
        assert problem is None, problem
        time.sleep(0.1)


def stamp(label: str, path: Path) -> str:
    return f'echo "{label} $(date +%s.%N)" >> {path}'


# ---- init containers and sidecars ----


def test_init_containers_run_in_order_to_completion_before_the_app(agent: AgentProcess, files: Path) -> None:
    gate = files / "gate"
    one = sh("one", f"{stamp('start', files / 'one')}; cat /proc/self/cgroup > {files}/one.cgroup; sleep 0.5; "
                    f"{stamp('end', files / 'one')}")
    two = sh("two", f"{stamp('start', files / 'two')}; while ! test -e {gate}; do sleep 0.05; done; "
                    f"{stamp('end', files / 'two')}")
    app = sh("app", f"{stamp('start', files / 'app')}; {stamp('end', files / 'app')}; exec sleep 100000")
    manifest = pod_of("init", [app], init=[one, two])
    uid = manifest["metadata"]["uid"]
    agent.create_ok(manifest)

    poll_until(lambda: state_of(agent, "init", "two") == "running", WAIT_S, "the second init container")
    p = agent.pod("init")
    assert p is not None
    assert p["status"]["phase"] == "Pending" and kubectl_status(p) == "Init:1/2"
    assert status_of(agent, "init", "one")["state"]["terminated"]["reason"] == "Completed"
    assert status_of(agent, "init", "app")["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert conditions(agent, "init")["Initialized"] == "False"
    assert not (files / "app").exists()
    assert in_container_cgroup(files / "one.cgroup", uid, "one")

    gate.touch()
    poll_until(lambda: read(files / "app").count("\n") == 2, WAIT_S, "the app container")
    poll_until(lambda: phase(agent, "init") == "Running", WAIT_S, "Running")
    one_t, two_t, app_t = (timestamps(files / n) for n in ("one", "two", "app"))
    assert one_t[1] <= two_t[0] and two_t[1] <= app_t[0], (one_t, two_t, app_t)  # each after the last ended
    p = agent.pod("init")
    assert p is not None and kubectl_status(p) == "Running"
    assert [cs["state"]["terminated"]["exitCode"] for cs in p["status"]["initContainerStatuses"]] == [0, 0]
    poll_until(lambda: conditions(agent, "init") == {"Initialized": "True", "Ready": "True",
                                                     "ContainersReady": "True"}, WAIT_S, "the pod to be ready")


def test_a_failing_init_container_fails_a_never_pod(agent: AgentProcess, files: Path) -> None:
    agent.create_ok(pod_of("broken", [sh("app", f"touch {files}/app-ran")],
                           init=[sh("setup", "echo no config >&2; exit 4")], restartPolicy="Never"))
    poll_until(lambda: phase(agent, "broken") == "Failed", WAIT_S, "the pod to fail")
    p = agent.pod("broken")
    assert p is not None and kubectl_status(p) == "Init:Error"
    assert status_of(agent, "broken", "setup")["state"]["terminated"]["exitCode"] == 4
    assert status_of(agent, "broken", "app")["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert not (files / "app-ran").exists()


def test_a_sidecar_starts_before_the_app_runs_beside_it_and_stops_after_it(agent: AgentProcess,
                                                                           files: Path) -> None:
    up, gate = files / "proxy-up", files / "gate"
    proxy = sh("proxy", f"echo $$$$ > {files}/proxy.pid; while ! test -e {gate}; do sleep 0.05; done; "
                        f"touch {up}; exec sleep 100000",
               restartPolicy="Always", startupProbe=exec_probe(f"test -e {up}", failureThreshold=120))
    app = sh("app", f"{stamp('start', files / 'app')}; test -e {up} && kill -0 $(cat {files}/proxy.pid) "
                    f"&& echo served > {files}/out; sleep 1")
    agent.create_ok(pod_of("sidecar", [app], init=[proxy], restartPolicy="Never"))
    poll_until(lambda: state_of(agent, "sidecar", "proxy") == "running", WAIT_S, "the sidecar")
    poll_until(lambda: (files / "proxy.pid").exists(), WAIT_S, "the sidecar's process")
    never_within(2, lambda: None if (phase(agent, "sidecar") == "Pending"
                                     and state_of(agent, "sidecar", "app") == "waiting")
                 else "the app started before its sidecar had")  # the sidecar's startup probe fails meanwhile
    p = agent.pod("sidecar")
    assert p is not None and kubectl_status(p) == "Init:0/1"
    gate.touch()
    poll_until(lambda: phase(agent, "sidecar") == "Succeeded", WAIT_S, "the pod to complete")
    assert read(files / "out") == "served\n"
    assert up.stat().st_mtime <= timestamps_start(files / "app")  # the app started once the sidecar had
    proxy_state = status_of(agent, "sidecar", "proxy")["state"]
    assert "terminated" in proxy_state, proxy_state  # stopped once the app was done
    assert status_of(agent, "sidecar", "proxy")["restartCount"] == 0


def timestamps_start(path: Path) -> float:
    return float(path.read_text().split()[1])


# ---- probes ----


def test_a_liveness_failure_restarts_the_container_with_unhealthy_then_killing(agent: AgentProcess,
                                                                               files: Path) -> None:
    # "$$$$": Kubernetes reads "$$" in a command as a literal "$", so the shell sees "$$" (its PID)
    script = f"echo $$$$ > {files}/pid; trap 'echo term >> {files}/terms; exit 0' TERM; {LOOP}"
    probe = exec_probe(f"cat /proc/self/cgroup > {files}/probe.tmp; mv {files}/probe.tmp {files}/probe.cgroup; "
                       f"test ! -e {files}/unhealthy-$(cat {files}/pid)", failureThreshold=2)
    manifest = pod_of("live", [sh("app", script, livenessProbe=probe)], terminationGracePeriodSeconds=10)
    uid = manifest["metadata"]["uid"]
    agent.create_ok(manifest)
    first, _ = agent.wait_running("live", WAIT_S, container="app")
    poll_until(lambda: (files / "probe.cgroup").exists(), WAIT_S, "a liveness probe")
    assert in_container_cgroup(files / "probe.cgroup", uid, "app")  # the exec probe ran in the container
    poll_until(lambda: read(files / "pid").strip() == str(first), WAIT_S, "the first run's pid")
    (files / f"unhealthy-{first}").touch()

    poll_until(lambda: status_of(agent, "live", "app")["restartCount"] == 1, WAIT_S, "a restart")
    second, _ = agent.wait_running("live", WAIT_S, container="app")
    assert second != first
    assert read(files / "terms") == "term\n"  # SIGTERM within its grace period, not a SIGKILL
    assert status_of(agent, "live", "app")["lastState"]["terminated"]["exitCode"] == 0
    events = pod_events(agent, "live")
    assert [e for e in events if e[0] in ("Unhealthy", "Killing")][:3] == [
        ("Unhealthy", "spec.containers{app}", "Liveness probe failed: "),
        ("Unhealthy", "spec.containers{app}", "Liveness probe failed: "),
        ("Killing", "spec.containers{app}", "Container app failed liveness probe, will be restarted")]
    never_within(3, lambda: None if status_of(agent, "live", "app")["restartCount"] == 1 else "restarted again")


def test_readiness_flips_the_pods_ready_condition_both_ways(agent: AgentProcess, files: Path) -> None:
    ready = files / "ready"
    agent.create_ok(pod_of("ready", [sh("app", "exec sleep 100000", readinessProbe=exec_probe(f"test -e {ready}"))]))
    agent.wait_running("ready", WAIT_S, container="app")
    poll_until(lambda: conditions(agent, "ready").get("Ready") == "False", WAIT_S, "not ready")
    assert status_of(agent, "ready", "app")["ready"] is False
    assert conditions(agent, "ready")["ContainersReady"] == "False"
    ready.touch()
    poll_until(lambda: conditions(agent, "ready") == {"Initialized": "True", "Ready": "True",
                                                      "ContainersReady": "True"}, WAIT_S, "ready")
    assert status_of(agent, "ready", "app")["ready"] is True
    ready.unlink()
    poll_until(lambda: conditions(agent, "ready")["Ready"] == "False", WAIT_S, "unready again")
    assert status_of(agent, "ready", "app")["ready"] is False
    assert status_of(agent, "ready", "app")["restartCount"] == 0  # readiness never restarts
    assert phase(agent, "ready") == "Running"


def test_an_http_readiness_probe_reaches_the_containers_server(agent: AgentProcess, files: Path) -> None:
    port = free_port()
    server = f"exec python3 -m http.server {port} --bind 127.0.0.1 --directory {files} 2>> {files}/http.log"
    probe = {"httpGet": {"path": "/", "port": "web"}, "periodSeconds": 1, "timeoutSeconds": 5}
    agent.create_ok(pod_of("http", [sh("app", server, readinessProbe=probe,
                                       ports=[{"name": "web", "containerPort": port}])]))
    poll_until(lambda: conditions(agent, "http").get("Ready") == "True", WAIT_S, "ready over HTTP")
    assert status_of(agent, "http", "app")["ready"] is True
    assert '"GET / HTTP/1.1" 200' in read(files / "http.log")  # the probe's request, answered


def test_a_tcp_liveness_probe_to_a_closed_port_restarts_the_container(agent: AgentProcess) -> None:
    port = free_port()  # nothing listens there
    probe = {"tcpSocket": {"port": port}, "periodSeconds": 1, "timeoutSeconds": 5, "failureThreshold": 1}
    agent.create_ok(pod_of("tcp", [sh("app", "exec sleep 100000", livenessProbe=probe)]))
    poll_until(lambda: status_of(agent, "tcp", "app")["restartCount"] >= 1, WAIT_S, "a restart")
    events = [e for e in pod_events(agent, "tcp") if e[0] in ("Unhealthy", "Killing")]
    assert events[:2] == [
        ("Unhealthy", "spec.containers{app}", f"Liveness probe failed: dial tcp 127.0.0.1:{port}: connect: "
                                              "connection refused"),
        ("Killing", "spec.containers{app}", "Container app failed liveness probe, will be restarted")]


def test_a_startup_probe_holds_liveness_and_readiness_back(agent: AgentProcess, files: Path) -> None:
    started = files / "started"
    app = sh("app", "exec sleep 100000",
             startupProbe=exec_probe(f"test -e {started}", failureThreshold=120),
             readinessProbe=exec_probe(f"touch {files}/readiness-ran"),
             livenessProbe=exec_probe(f"touch {files}/liveness-ran", failureThreshold=1))
    agent.create_ok(pod_of("startup", [app]))
    agent.wait_running("startup", WAIT_S, container="app")

    def held() -> str | None:
        cs = status_of(agent, "startup", "app")
        if cs["started"] or cs["ready"]:
            return f"started/ready too early: {cs}"
        ran = [n for n in ("readiness-ran", "liveness-ran") if (files / n).exists()]
        return f"probes ran before the startup probe succeeded: {ran}" if ran else None

    never_within(4, held)
    started.touch()
    poll_until(lambda: status_of(agent, "startup", "app")["started"], WAIT_S, "started")
    poll_until(lambda: status_of(agent, "startup", "app")["ready"], WAIT_S, "ready")
    poll_until(lambda: (files / "liveness-ran").exists(), WAIT_S, "the liveness probe")
    assert status_of(agent, "startup", "app")["restartCount"] == 0


# ---- lifecycle hooks ----


def test_post_start_and_pre_stop_hooks_run_in_the_container_pre_stop_before_sigterm(agent: AgentProcess,
                                                                                   files: Path) -> None:
    log = files / "log"
    script = f"trap 'echo term >> {log}; exit 0' TERM; echo main >> {log}; {LOOP}"
    hooks = {
        "postStart": {"exec": {"command": ["/bin/sh", "-c",
                                           f"cat /proc/self/cgroup > {files}/post.cgroup; echo post-start >> {log}"]}},
        "preStop": {"exec": {"command": ["/bin/sh", "-c",
                                         f"sleep 1; cat /proc/self/cgroup > {files}/pre.cgroup; echo pre-stop >> {log}"]}},
    }
    manifest = pod_of("hooks", [sh("app", script, lifecycle=hooks)], terminationGracePeriodSeconds=20)
    uid = manifest["metadata"]["uid"]
    agent.create_ok(manifest)
    poll_until(lambda: "post-start" in read(log) and "main" in read(log), WAIT_S, "the postStart hook")
    assert in_container_cgroup(files / "post.cgroup", uid, "app")
    status, _ = agent.delete("hooks")
    assert status == 200
    poll_until(lambda: agent.pod("hooks") is None, WAIT_S, "the pod to go")
    lines = read(log).split()
    assert lines[-2:] == ["pre-stop", "term"], lines  # the hook, then the SIGTERM it came before
    assert in_container_cgroup(files / "pre.cgroup", uid, "app")


def test_an_http_pre_stop_hook_and_a_failing_post_start_hook(agent: AgentProcess, files: Path) -> None:
    port = free_port()
    server = f"exec python3 -m http.server {port} --bind 127.0.0.1 --directory {files} 2>> {files}/http.log"
    probe = {"httpGet": {"path": "/", "port": port}, "periodSeconds": 1, "timeoutSeconds": 5}
    app = sh("app", server, readinessProbe=probe,
             lifecycle={"preStop": {"httpGet": {"path": "/pre-stop", "port": port}}})
    agent.create_ok(pod_of("web", [app], terminationGracePeriodSeconds=20))
    poll_until(lambda: conditions(agent, "web").get("Ready") == "True", WAIT_S, "the server to be ready")
    assert agent.delete("web")[0] == 200
    poll_until(lambda: agent.pod("web") is None, WAIT_S, "the pod to go")
    assert "GET /pre-stop" in read(files / "http.log")

    bad = {"postStart": {"exec": {"command": ["/bin/sh", "-c", "echo cannot register; exit 3"]}}}
    agent.create_ok(pod_of("post", [sh("app", "exec sleep 100000", lifecycle=bad)], restartPolicy="Never"))
    poll_until(lambda: phase(agent, "post") == "Failed", WAIT_S, "the container killed")
    events = [e for e in pod_events(agent, "post") if e[0] in ("FailedPostStartHook", "Killing")]
    assert [(r, f) for r, f, _ in events] == [("FailedPostStartHook", "spec.containers{app}"),
                                              ("Killing", "spec.containers{app}")], events
    assert "exited with 3" in events[0][2] and "cannot register" in events[0][2]


# ---- termination messages ----


def test_termination_messages_from_the_file_and_from_the_log(agent: AgentProcess, files: Path) -> None:
    msg = files / "termination-log"
    agent.create_ok(pod_of("done", [
        sh("file", f"echo 'bad config: port' > {msg}; exit 3", terminationMessagePath=str(msg)),
        sh("logs", "echo starting; echo 'panic: nil map' >&2; exit 2",
           terminationMessagePath=str(files / "absent"), terminationMessagePolicy="FallbackToLogsOnError")],
        restartPolicy="Never"))
    poll_until(lambda: phase(agent, "done") == "Failed", WAIT_S, "both containers to end")
    assert status_of(agent, "done", "file")["state"]["terminated"]["message"] == "bad config: port\n"
    assert status_of(agent, "done", "logs")["state"]["terminated"]["message"] == "starting\npanic: nil map\n"

    again = files / "again-log"
    agent.create_ok(pod_of("again", [sh("app", f"echo 'run failed' > {again}; exit 1",
                                        terminationMessagePath=str(again))], restartPolicy="OnFailure"))
    poll_until(lambda: status_of(agent, "again", "app")["restartCount"] >= 1, WAIT_S, "a restart")
    assert status_of(agent, "again", "app")["lastState"]["terminated"]["message"] == "run failed\n"


# ---- the downward API ----


def test_downward_api_env_reaches_the_process(agent: AgentProcess, files: Path) -> None:
    def field(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    def resource(name: str, what: str, divisor: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"resourceFieldRef": {"resource": what, "divisor": divisor}}}

    env = [field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace"),
           field("POD_UID", "metadata.uid"), field("APP", "metadata.labels['app']"),
           field("TEAM", "metadata.annotations['team']"), field("NODE", "spec.nodeName"),
           field("SA", "spec.serviceAccountName"), field("POD_IP", "status.podIP"),
           field("HOST_IP", "status.hostIP"), resource("MEM_MI", "limits.memory", "1Mi"),
           resource("CPU_M", "requests.cpu", "1m"), resource("CPU_LIMIT_M", "limits.cpu", "1m"),
           {"name": "GREETING", "value": "hello $(POD_NAME) on $(NODE)"}]
    app = sh("app", f"env > {files}/env", env=env,
             envFrom=[{"configMapRef": {"name": "not-on-this-node", "optional": True}}],
             resources={"requests": {"cpu": "250m"}, "limits": {"memory": "64Mi"}})
    manifest = pod_of("downward", [app], restartPolicy="Never", serviceAccountName="robot")
    agent.create_ok(manifest)
    poll_until(lambda: phase(agent, "downward") == "Succeeded", WAIT_S, "the container to finish")
    seen = dict(line.split("=", 1) for line in read(files / "env").splitlines() if "=" in line)
    node = agent.node()
    ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    cpu = parse_quantity(node["status"]["allocatable"]["cpu"]).milli_value()
    wanted = {"POD_NAME": "downward", "POD_NAMESPACE": "default", "POD_UID": manifest["metadata"]["uid"],
              "APP": "web", "TEAM": "blue", "NODE": NODE_NAME, "SA": "robot", "POD_IP": ip, "HOST_IP": ip,
              "MEM_MI": "64", "CPU_M": "250", "CPU_LIMIT_M": str(cpu), "GREETING": f"hello downward on {NODE_NAME}"}
    assert {k: seen.get(k) for k in wanted} == wanted
    p = agent.pod("downward")
    assert p is not None and (p["status"]["podIP"], p["status"]["hostIP"]) == (ip, ip)


def test_a_missing_env_source_is_a_config_error_not_a_start(agent: AgentProcess, files: Path) -> None:
    app = sh("app", f"touch {files}/ran", env=[{"name": "X", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}])
    agent.create_ok(pod_of("cfg", [app]))
    poll_until(lambda: status_of(agent, "cfg", "app")["state"].get("waiting", {}).get("reason")
               == "CreateContainerConfigError", WAIT_S, "the config error")
    assert status_of(agent, "cfg", "app")["state"]["waiting"]["message"] == 'secret "db" not found'
    assert ("Failed", "spec.containers{app}", 'Error: secret "db" not found') in pod_events(agent, "cfg")
    assert phase(agent, "cfg") == "Pending" and not (files / "ran").exists()


# ---- an agent restart ----


def recorded_exit(agent: AgentProcess, pod: str, container: str) -> int | None:
    """The exit code of `container` as the pod's durable record has it (None: not recorded)."""
    record = CheckpointJournal(CheckpointStore.open(agent.state_dir)).read().get(("default", pod))
    saved = record.container(container) if record else None
    current = saved.last_state.get("current") if saved else None
    return current["terminated"]["exitCode"] if current else None


def test_a_crashed_agent_resumes_init_where_it_was_and_probes_adopted_containers(agent: AgentProcess,
                                                                                 files: Path) -> None:
    gate, ready = files / "gate", files / "ready"
    one = sh("one", f"echo one >> {files}/runs")
    two = sh("two", f"echo two >> {files}/runs; while ! test -e {gate}; do sleep 0.05; done")
    app = sh("app", f"echo app >> {files}/runs; exec sleep 100000", readinessProbe=exec_probe(f"test -e {ready}"))
    agent.create_ok(pod_of("resume", [app], init=[one, two]))
    poll_until(lambda: state_of(agent, "resume", "two") == "running", WAIT_S, "the second init container")
    two_id = status_of(agent, "resume", "two")["containerID"]
    poll_until(lambda: recorded_exit(agent, "resume", "one") == 0, WAIT_S, "the first one's success on disk")
    agent.crash()  # kill -9 mid-init
    agent.start()
    assert status_of(agent, "resume", "one")["state"]["terminated"]["exitCode"] == 0  # recorded, not run again
    assert status_of(agent, "resume", "two")["containerID"] == two_id  # adopted, not started again
    gate.touch()
    # The adopted process is not the new agent's child: its exit status cannot be read, so its
    # exit is ContainerStatusUnknown (137), a failure, and the init container runs once more, as
    # the kubelet does with a container whose status the runtime lost.
    poll_until(lambda: read(files / "runs") == "one\ntwo\ntwo\napp\n", WAIT_S, "the app after init")
    assert status_of(agent, "resume", "one")["restartCount"] == 0
    two = status_of(agent, "resume", "two")
    assert (two["restartCount"], two["lastState"]["terminated"]["reason"]) == (1, "ContainerStatusUnknown"), two

    ready.touch()
    poll_until(lambda: conditions(agent, "resume").get("Ready") == "True", WAIT_S, "ready")
    agent.crash()
    agent.start()
    poll_until(lambda: conditions(agent, "resume").get("Ready") == "True", WAIT_S, "ready after the restart")
    ready.unlink()
    poll_until(lambda: conditions(agent, "resume").get("Ready") == "False", WAIT_S, "probed by the new agent")
    assert read(files / "runs") == "one\ntwo\ntwo\napp\n"  # the app was adopted, not run again
