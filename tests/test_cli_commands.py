"""The client verbs end to end: `nodeagent.cli.main.main([...])` against the real aiohttp API app,
served from a thread on a temporary Unix socket and on TCP (plain and TLS), over a fake backend."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from nodeagent.agent.api import AdmissionError, AlreadyExists, create_app
from nodeagent.agent.node.status import ConditionTracker, NodeStatusInput, build_node
from nodeagent.agent.runtime import logs
from nodeagent.cli import client_commands as cli_commands
from nodeagent.cli.client import _error_message
from nodeagent.cli.client_commands import LogFollower, UsageError, pod_ref, socket_path_from_config
from nodeagent.cli.main import main
from nodeagent.core.clock import FakeClock
from nodeagent.core.errors import FieldError
from nodeagent.core.model import parse_pod
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.timefmt import rfc3339


def manifest(name: str, ns: str | None = None, containers: tuple[str, ...] = ("app",),
             cpu: str = "100m") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name} if ns is None else {"name": name, "namespace": ns}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": c, "image": "x", "command": ["sleep", "60"],
                                     "resources": {"requests": {"cpu": cpu}}} for c in containers]}}


class FakeAgent:
    """The AgentBackend with real pod validation (parse_pod) and real Node shapes (build_node)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str, str], list[str]] = {}
        self.deleted: list[tuple[str, str, int | None]] = []
        self.created: list[dict[str, Any]] = []
        self.log_calls: list[tuple[str | None, bool]] = []
        self.log_dir = tempfile.TemporaryDirectory()
        self.on_log: Callable[[FakeAgent, int], None] | None = None
        self.event_list: list[dict[str, Any]] = []
        self.fail_node = False
        q = parse_quantity
        self.node_obj = build_node(NodeStatusInput(
            name="node-a", capacity={"cpu": q("2"), "memory": q("4Gi"),
                                     "ephemeral-storage": q("10Gi"), "pods": q("110")},
            allocatable={"cpu": q("1"), "memory": q("3Gi"), "ephemeral-storage": q("9Gi"),
                         "pods": q("110")},
            usage={"memory": q("1536Mi")}, addresses=[], node_info={}),
            ConditionTracker(FakeClock()))

    def add(self, m: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
        pod = parse_pod(m).to_dict()
        pod["status"] = {"phase": phase, "qosClass": "Burstable", "startTime": rfc3339(0),
                         "containerStatuses": [{"name": c["name"], "restartCount": 0, "ready": True}
                                               for c in pod["spec"]["containers"]]}
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
        return pod

    def node(self) -> dict[str, Any]:
        if self.fail_node:
            raise RuntimeError("node status broke")
        return self.node_obj

    def list_pods(self) -> list[dict[str, Any]]:
        return list(self.pods.values())

    def get_pod(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((ns, name))

    async def create_pod(self, m: dict[str, Any]) -> dict[str, Any]:
        self.created.append(m)
        pod = parse_pod(m)  # ValidationErrors -> 422 Invalid
        if pod.metadata.name == "huge":
            raise AdmissionError("OutOfmemory", "Node didn't have enough resource: memory")
        if (pod.metadata.namespace, pod.metadata.name) in self.pods:
            raise AlreadyExists(pod.metadata.namespace, pod.metadata.name)
        return self.add(m, "Pending")

    async def delete_pod(self, ns: str, name: str, grace: int | None) -> dict[str, Any] | None:
        self.deleted.append((ns, name, grace))
        return self.pods.pop((ns, name), None)

    def log_source(self, ns: str, name: str, container: str | None, previous: bool) -> logs.LogSource | None:
        """The lines of `logs` written to a file, as the agent's log files are."""
        self.log_calls.append((container, previous))
        if self.on_log is not None:
            self.on_log(self, len(self.log_calls))
        pod = self.pods.get((ns, name))
        if pod is None:
            return None
        names = [c["name"] for c in pod["spec"]["containers"]]
        if container is None:
            if len(names) != 1:
                raise FieldError("container", "a container name must be given: one of " + ", ".join(names))
            container = names[0]
        if container not in names:
            return None
        path = Path(self.log_dir.name) / f"{ns}_{name}_{container}.log"
        path.write_text("".join(line + "\n" for line in self.logs.get((ns, name, container), [])))
        return logs.LogSource(str(path), lambda: False)

    def events(self) -> list[dict[str, Any]]:
        return self.event_list


class AgentServer:
    """The API app in a thread with its own event loop, on a Unix socket and a TCP port."""

    def __init__(self, backend: FakeAgent, socket_path: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.backend, self.socket_path, self.ssl_context = backend, socket_path, ssl_context
        self.headers: list[dict[str, str]] = []
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    async def _start(self) -> web.AppRunner:
        app = create_app(self.backend)  # type: ignore[arg-type]

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            self.headers.append(dict(request.headers))
            return await handler(request)

        app.middlewares.append(record)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.UnixSite(runner, self.socket_path).start()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        self.port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
        return runner

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            runner = self.loop.run_until_complete(self._start())
        except BaseException as e:  # reported to the test thread
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())
        self.loop.close()

    def __enter__(self) -> AgentServer:
        self.thread.start()
        self.ready.wait(10)
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        if self.error is None:
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A short path: AF_UNIX paths are limited to 107 bytes, pytest's tmp_path can be longer."""
    d = tempfile.mkdtemp(prefix="na-cli-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def agent() -> FakeAgent:
    return FakeAgent()


@pytest.fixture
def server(agent: FakeAgent, short_dir: str) -> Iterator[AgentServer]:
    with AgentServer(agent, os.path.join(short_dir, "nodeagent.sock")) as srv:
        yield srv


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def sock(server: AgentServer) -> tuple[str, str]:
    return "--socket", server.socket_path


# ---- status, pods, events ----
def test_status_over_the_unix_socket(server: AgentServer, agent: FakeAgent,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    agent.add(manifest("web", cpu="250m"))
    agent.add(manifest("db", "team-a", cpu="500m"))
    agent.add(manifest("old", cpu="4"), phase="Succeeded")
    rc, out, err = run(capsys, "status", *sock(server))
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "Node: node-a"
    assert any(ln.split()[:2] == ["Ready", "True"] for ln in lines)
    assert ["cpu", "2", "1", "750m", "(75%)", "-"] in [ln.split() for ln in lines]
    assert ["memory", "4Gi", "3Gi", "0", "(0%)", "1.5Gi", "(50%)"] in [ln.split() for ln in lines]
    assert ["pods", "110", "110", "2", "(1%)", "-"] in [ln.split() for ln in lines]
    assert "Pods (2 active, 3 total):" in lines
    assert [ln.split()[:3] for ln in lines[-3:]] == [
        ["default", "old", "Succeeded"], ["default", "web", "Running"], ["team-a", "db", "Running"]]


def test_socket_found_through_the_config_file(server: AgentServer, short_dir: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = Path(short_dir, "config.yaml")
    config.write_text(f"stateDir: {short_dir}\n")
    rc, out, _ = run(capsys, "pods", "--config", str(config))
    assert rc == 0 and out == ""
    assert socket_path_from_config(str(config)) == server.socket_path


def test_default_config_path_then_embedded_defaults(short_dir: str) -> None:
    missing = os.path.join(short_dir, "absent.yaml")
    assert socket_path_from_config(None, missing) == "/var/lib/nodeagent/nodeagent.sock"
    present = Path(short_dir, "config.yaml")
    present.write_text("stateDir: /srv/agent\n")
    assert socket_path_from_config(None, str(present)) == "/srv/agent/nodeagent.sock"


def test_the_config_files_unix_socket_is_the_one_dialled(short_dir: str) -> None:
    config = Path(short_dir, "config.yaml")
    config.write_text("stateDir: /srv/agent\nunixSocket: /run/nodeagent/api.sock\n")
    assert socket_path_from_config(str(config)) == "/run/nodeagent/api.sock"
    config.write_text("unixSocket: null\n")
    with pytest.raises(UsageError, match="unixSocket is null"):
        socket_path_from_config(str(config))


def test_bad_config_is_one_line(short_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = Path(short_dir, "config.yaml")
    config.write_text("stateDir: relative/path\n")
    rc, out, err = run(capsys, "status", "--config", str(config))
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"nodeagent: {config}: ") and "stateDir" in err


def test_pods_table_namespace_and_formats(server: AgentServer, agent: FakeAgent,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    agent.add(manifest("web"))
    agent.add(manifest("db", "team-a"))
    rc, out, _ = run(capsys, "pods", *sock(server))
    assert rc == 0
    assert [ln.split()[:2] for ln in out.splitlines()] == [["NAMESPACE", "NAME"], ["default", "web"],
                                                           ["team-a", "db"]]
    rc, out, _ = run(capsys, "pods", "-n", "team-a", *sock(server))
    assert [ln.split()[1] for ln in out.splitlines()] == ["NAME", "db"]
    rc, out, _ = run(capsys, "pods", "-o", "json", *sock(server))
    listing = json.loads(out)
    assert listing["kind"] == "PodList" and len(listing["items"]) == 2
    assert listing["items"][0] == agent.pods[("default", "web")]
    rc, out, _ = run(capsys, "pods", "-n", "team-a", "-o", "yaml", *sock(server))
    assert [p["metadata"]["name"] for p in yaml.safe_load(out)["items"]] == ["db"]
    rc, out, _ = run(capsys, "pods", "-o", "wide", *sock(server))
    assert out.splitlines()[0].split()[2] == "READY" and "100m" in out.splitlines()[1]
    rc, out, err = run(capsys, "pods", "-n", "nobody", *sock(server))
    assert (rc, out, err) == (0, "", 'No pods in namespace "nobody".\n')


def test_events(server: AgentServer, agent: FakeAgent, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "events", *sock(server))
    assert (rc, out, err) == (0, "", "No events.\n")
    agent.event_list.append({"involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
                             "reason": "Evicted", "type": "Warning", "message": "low on memory",
                             "lastTimestamp": rfc3339(0)})
    rc, out, _ = run(capsys, "events", *sock(server))
    assert out.splitlines()[1].split()[1:] == ["Warning", "Evicted", "pod/default/web", "low", "on",
                                               "memory"]
    rc, out, _ = run(capsys, "events", "-o", "json", *sock(server))
    assert json.loads(out)["items"] == agent.event_list


# ---- apply ----
def test_apply_multi_document_yaml(server: AgentServer, agent: FakeAgent, short_dir: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    f = Path(short_dir, "pods.yaml")
    f.write_text(yaml.safe_dump_all([manifest("web"), None, manifest("db", "team-a")]))
    rc, out, err = run(capsys, "apply", "-f", str(f), *sock(server))
    assert (rc, out, err) == (0, "pod/web created\npod/db created\n", "")
    assert set(agent.pods) == {("default", "web"), ("team-a", "db")}
    assert agent.pods[("default", "web")]["metadata"]["annotations"] == {
        "kubernetes.io/config.source": "api"}  # went through the real route


def test_apply_json_list_from_stdin_with_namespace(server: AgentServer, agent: FakeAgent,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": [manifest("a"), manifest("b")]}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(doc)))
    rc, out, _ = run(capsys, "apply", "-f", "-", "-n", "team-b", *sock(server))
    assert (rc, out) == (0, "pod/a created\npod/b created\n")
    assert set(agent.pods) == {("team-b", "a"), ("team-b", "b")}


def test_apply_reports_each_failure_and_goes_on(server: AgentServer, agent: FakeAgent,
                                                short_dir: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    agent.add(manifest("taken"))
    bad = manifest("bad")
    del bad["spec"]["containers"][0]["command"]
    del bad["spec"]["containers"][0]["image"]  # with an image, its entrypoint would do
    f = Path(short_dir, "pods.yaml")
    f.write_text(yaml.safe_dump_all([manifest("taken"), bad, manifest("huge"), manifest("ok")]))
    rc, out, err = run(capsys, "apply", "-f", str(f), *sock(server))
    assert rc == 1 and out == "pod/ok created\n"
    lines = err.splitlines()
    assert lines[0] == 'nodeagent: pods "taken" already exists in namespace "default"'
    assert lines[1].startswith('nodeagent: Pod "bad" is invalid: spec.containers[0].command')
    assert lines[2] == "nodeagent: pod/huge: Node didn't have enough resource: memory"
    assert len(lines) == 3


@pytest.mark.parametrize(("text", "message"), [
    ("kind: Pod\nmetadata: {name: [unclosed\n", "invalid YAML: "),
    ("- just\n- a list\n", "document 2 is not an object (a pod manifest)"),
    ("metadata:\n  name: t\n  when: 2024-01-01\nbad: .nan\n", "document 2: Out of range float"),
])
def test_apply_bad_files_post_nothing(server: AgentServer, agent: FakeAgent, short_dir: str,
                                      capsys: pytest.CaptureFixture[str], text: str,
                                      message: str) -> None:
    f = Path(short_dir, "pods.yaml")
    f.write_text(yaml.safe_dump(manifest("first")) + "---\n" + text)  # the good one waits too
    rc, out, err = run(capsys, "apply", "-f", str(f), *sock(server))
    assert rc == 1 and out == "" and agent.created == []
    assert err.startswith(f"nodeagent: {f}: {message}") and err.count("\n") == 1


def test_apply_empty_file(server: AgentServer, short_dir: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    f = Path(short_dir, "pods.yaml")
    f.write_text("# nothing\n---\n")
    rc, _, err = run(capsys, "apply", "-f", str(f), *sock(server))
    assert (rc, err) == (1, f"nodeagent: {f}: no objects to apply\n")


def test_apply_missing_file(server: AgentServer, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "apply", "-f", "/nonexistent/pods.yaml", *sock(server))
    assert (rc, err) == (1, "nodeagent: cannot read /nonexistent/pods.yaml: No such file or directory\n")


# ---- delete ----
def test_delete_forms_and_grace(server: AgentServer, agent: FakeAgent,
                                capsys: pytest.CaptureFixture[str]) -> None:
    agent.add(manifest("web"))
    agent.add(manifest("db", "team-a"))
    rc, out, _ = run(capsys, "delete", "team-a/db", "--grace-period", "5", *sock(server))
    assert (rc, out) == (0, "pod/db deleted\n")
    rc, out, _ = run(capsys, "delete", "web", *sock(server))
    assert (rc, out) == (0, "pod/web deleted\n")
    assert agent.deleted == [("team-a", "db", 5), ("default", "web", None)]
    rc, out, err = run(capsys, "delete", "x", "-n", "default", *sock(server))
    assert (rc, out, err) == (1, "", 'nodeagent: pods "x" not found in namespace "default"\n')


def test_delete_argument_errors(server: AgentServer, agent: FakeAgent,
                                capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "delete", "a/b", "-n", "c", *sock(server))
    assert rc == 1 and "names namespace 'a' but -n says 'c'" in err
    with pytest.raises(SystemExit) as exc:
        main(["delete", "a/b", "--grace-period", "-1", *sock(server)])
    assert exc.value.code == 2 and "must be an integer >= 0" in capsys.readouterr().err
    assert agent.deleted == []


@pytest.mark.parametrize(("ref", "ns", "expected"), [
    ("web", None, ("default", "web")), ("web", "x", ("x", "web")), ("a/web", None, ("a", "web")),
    ("a/web", "a", ("a", "web")),
])
def test_pod_ref(ref: str, ns: str | None, expected: tuple[str, str]) -> None:
    assert pod_ref(ref, ns) == expected


@pytest.mark.parametrize("ref", ["/web", "a/", "a/b/c", ""])
def test_pod_ref_rejects(ref: str) -> None:
    with pytest.raises(cli_commands.UsageError):
        pod_ref(ref, None)


# ---- logs ----
def test_logs_plain_tail_and_container(server: AgentServer, agent: FakeAgent,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    agent.add(manifest("web"))
    agent.add(manifest("two", containers=("a", "b")))
    agent.logs[("default", "web", "app")] = ["one", "two", "three"]
    agent.logs[("default", "two", "b")] = ["from b"]
    assert run(capsys, "logs", "default/web", *sock(server))[:2] == (0, "one\ntwo\nthree\n")
    assert run(capsys, "logs", "web", "--tail", "1", *sock(server))[:2] == (0, "three\n")
    assert agent.log_calls[-1] == (None, False)
    assert run(capsys, "logs", "two", "-c", "b", *sock(server))[:2] == (0, "from b\n")
    rc, out, err = run(capsys, "logs", "two", *sock(server))
    assert (rc, out, err) == (1, "", "nodeagent: container: a container name must be given: one of a, b\n")
    rc, _, err = run(capsys, "logs", "gone", *sock(server))
    assert (rc, err) == (1, 'nodeagent: pod "gone" not found in namespace "default"\n')


def _follow(capsys: pytest.CaptureFixture[str], server: AgentServer, *extra: str) -> tuple[int, str, str]:
    return run(capsys, "logs", "default/web", "-f", "--poll-interval", "0", *extra, *sock(server))


def test_follow_prints_each_line_once_until_the_pod_finishes(
        server: AgentServer, agent: FakeAgent, capsys: pytest.CaptureFixture[str]) -> None:
    agent.add(manifest("web"))
    agent.logs[("default", "web", "app")] = ["old 1", "old 2", "hello"]

    def grow(a: FakeAgent, n: int) -> None:
        if n <= 4:
            a.logs[("default", "web", "app")] += [f"line {n}", "same"]  # repeated text as well
        if n == 4:
            a.pods[("default", "web")]["status"]["phase"] = "Succeeded"

    agent.on_log = grow
    rc, out, err = _follow(capsys, server, "--tail", "1")
    assert (rc, err) == (0, "")
    assert out == "same\n" + "".join(f"line {n}\nsame\n" for n in range(2, 5))
    assert len(agent.log_calls) == 5  # the 5th poll sees Succeeded, reads the rest and stops


def test_follow_beyond_the_window_and_until_the_pod_is_deleted(
        server: AgentServer, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli_commands, "FOLLOW_WINDOW", 3)
    agent.add(manifest("web"))
    agent.logs[("default", "web", "app")] = [f"l{i}" for i in range(5)]
    counter = iter(range(5, 100))

    def grow(a: FakeAgent, n: int) -> None:
        if n in (2, 3):
            a.logs[("default", "web", "app")] += [f"l{next(counter)}" for _ in range(n)]
        if n == 4:
            del a.pods[("default", "web")]

    agent.on_log = grow
    rc, out, err = _follow(capsys, server)
    assert (rc, err) == (0, "")
    assert out == "".join(f"l{i}\n" for i in range(10))


def test_follow_shows_a_restarted_container_from_its_start(
        server: AgentServer, agent: FakeAgent, capsys: pytest.CaptureFixture[str]) -> None:
    pod = agent.add(manifest("web"))
    agent.logs[("default", "web", "app")] = ["starting"]

    def restart(a: FakeAgent, n: int) -> None:
        if n == 2:  # the new run prints the same first line as the old one
            pod["status"]["containerStatuses"][0]["restartCount"] = 1
            a.logs[("default", "web", "app")] = ["starting"]
        if n == 3:
            a.logs[("default", "web", "app")].append("crashed again")
            pod["status"]["phase"] = "Failed"

    agent.on_log = restart
    rc, out, _ = _follow(capsys, server)
    assert (rc, out) == (0, "starting\nstarting\ncrashed again\n")


def test_follow_stops_on_ctrl_c(server: AgentServer, agent: FakeAgent,
                                monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    agent.add(manifest("web"))
    agent.logs[("default", "web", "app")] = ["hi"]

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_commands, "_sleep", interrupted)
    rc, out, err = run(capsys, "logs", "web", "-f", *sock(server))
    assert (rc, out, err) == (130, "hi\n", "")


@pytest.mark.parametrize(("before", "read", "new"), [
    ([], ["a"], ["a"]),
    (["a", "b"], ["a", "b", "c"], ["c"]),
    (["a", "a"], ["a", "a", "a"], ["a"]),  # short logs are counted exactly, repeats included
    (["a", "b"], ["a", "b"], []),
    (["x", "y"], ["z"], ["z"]),  # shorter: the log began again
    (["p", "q", "r", "s"], ["r", "s", "t", "u"], ["t", "u"]),  # full window: overlap
    (["p", "q", "r", "s"], ["v", "w", "x", "y"], ["v", "w", "x", "y"]),  # fell behind a window
    (["p", "q"], ["q", "r", "s", "t"], ["r", "s", "t"]),  # grew past the window
])
def test_log_follower(before: list[str], read: list[str], new: list[str]) -> None:
    f = LogFollower(window=4)
    assert f.feed(before) == before
    assert f.feed(read) == new


def test_log_follower_reset_reprints() -> None:
    f = LogFollower(window=4)
    f.feed(["a"])
    f.reset()
    assert f.feed(["a"]) == ["a"]


# ---- errors and transports ----
def test_unreachable_socket_is_one_line(short_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(short_dir, "nodeagent.sock")
    rc, out, err = run(capsys, "status", "--socket", path)
    assert (rc, out, err) == (1, "", f"nodeagent: cannot reach the agent at {path}: No such file or directory\n")


def test_backend_bug_is_the_status_message(server: AgentServer, agent: FakeAgent,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    agent.fail_node = True
    rc, _, err = run(capsys, "status", *sock(server))
    assert (rc, err) == (1, "nodeagent: internal error; see the agent log\n")


def test_error_message_without_a_status_body() -> None:
    assert _error_message(502, "Bad Gateway", b"<html>\nupstream down") == \
        "the agent answered 502 Bad Gateway: <html>"
    assert _error_message(404, "Not Found", b'{"kind": "Status", "message": "gone"}') == "gone"


def test_tcp_with_bearer_token(server: AgentServer, agent: FakeAgent, short_dir: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    agent.add(manifest("web"))
    token = Path(short_dir, "token")
    token.write_text("s3cret-token\n")
    url = f"http://127.0.0.1:{server.port}"
    rc, out, _ = run(capsys, "pods", "--server", url, "--token-file", str(token))
    assert rc == 0 and "web" in out
    assert server.headers[-1]["Authorization"] == "Bearer s3cret-token"
    rc, out, _ = run(capsys, "pods", "--server", url)
    assert rc == 0 and "Authorization" not in server.headers[-1]


def test_tcp_refused(capsys: pytest.CaptureFixture[str]) -> None:
    import socket
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, _, err = run(capsys, "status", "--server", f"http://127.0.0.1:{port}")
    assert (rc, err) == (1, f"nodeagent: cannot reach the agent at http://127.0.0.1:{port}: Connection refused\n")


@pytest.mark.parametrize(("argv", "message"), [
    (["--cacert", "/x"], "--cacert needs --server"),
    (["--server", "ftp://host"], "must be an http:// or https:// URL"),
    (["--server", "http://host/api"], "bare scheme://host[:port]"),
    (["--server", "http://host:99999"], "Port out of range"),
    (["--server", "http://host", "--cacert", "/x"], "need an https:// --server"),
    (["--server", "https://host", "--key", "/x"], "--key needs --cert"),
    (["--server", "http://host", "--token-file", "/nonexistent"],
     "cannot read token file /nonexistent: No such file or directory"),
    (["--server", "http://h", "--socket", "/s"], "not both"),
])
def test_connection_option_errors(argv: list[str], message: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "pods", *argv)
    assert rc == 1 and err.startswith("nodeagent: ") and message in err and err.count("\n") == 1


def test_empty_token_file(short_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    Path(short_dir, "token").write_text("\n")
    rc, _, err = run(capsys, "pods", "--server", "http://h", "--token-file", f"{short_dir}/token")
    assert (rc, err) == (1, f"nodeagent: token file {short_dir}/token is empty\n")


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki() -> Iterator[Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    d = Path(tempfile.mkdtemp(prefix="na-pki-"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=nodeagent-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=str(d))
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        (d / f"{name}.ext").write_text(ext)
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=str(d))
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                 "-extfile", f"{name}.ext", cwd=str(d))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_https_with_ca_and_client_certificate(agent: FakeAgent, short_dir: str, pki: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki / "server.crt", pki / "server.key")
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(pki / "ca.crt")
    agent.add(manifest("web"))
    with AgentServer(agent, os.path.join(short_dir, "s.sock"), ctx) as srv:
        url = f"https://127.0.0.1:{srv.port}"
        rc, out, err = run(capsys, "pods", "--server", url, "--cacert", str(pki / "ca.crt"),
                           "--cert", str(pki / "client.crt"), "--key", str(pki / "client.key"))
        assert (rc, err) == (0, "") and "web" in out
        rc, _, err = run(capsys, "pods", "--server", url)  # the system CAs do not know ours
        assert rc == 1 and err.startswith(f"nodeagent: cannot reach the agent at {url}: TLS: ")
        assert "certificate" in err and err.count("\n") == 1  # OpenSSL's verify message
        rc, _, err = run(capsys, "pods", "--server", url, "--cacert", str(pki / "ca.crt"))
        assert rc == 1 and err.startswith("nodeagent: ") and err.count("\n") == 1  # no client cert
        rc, _, err = run(capsys, "pods", "--server", url, "--cacert", str(pki / "nope.crt"))
        assert (rc, err) == (1, f"nodeagent: cannot set up TLS for {url}: No such file or directory\n")


def test_the_agents_process_loads_no_control_plane_code() -> None:
    """`nodeagent run` imports the CLI and the agent only: the server's modules (and jwt and
    cryptography's x509 behind them, ~14 MiB resident) stay out of the agent's memory."""
    code = ("import sys, nodeagent.cli.main, nodeagent.agent.daemon; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jwt', 'cryptography') "
            "or m.startswith('nodeagent.cluster')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_agents_process_loads_no_client_verbs_or_tar_code() -> None:
    """`nodeagent run` parses its command line with the agent's own verbs: the client verbs'
    modules, and tarfile behind the image unpacker, stay out of the agent's memory (~0.5 MiB)."""
    code = ("import sys, nodeagent.cli.main as m; m.build_parser('run').parse_args(['run']); "
            "import nodeagent.agent.daemon; "
            "print(sorted(m for m in sys.modules if m == 'tarfile' or m.startswith('nodeagent.cli.')"
            " and m != 'nodeagent.cli.main'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_every_verb_is_listed_whichever_verb_is_parsed() -> None:
    """The help of the full parser lists the client and control-plane verbs; the agent's verbs
    parse the same with the short parser."""
    from nodeagent.cli.main import build_parser

    full = build_parser().format_help()
    for verb in ("run", "check-config", "pods", "exec", "image", "server", "scheduler"):
        assert verb in full
    assert build_parser("run").parse_args(["run", "--config", "x"]).config == "x"
