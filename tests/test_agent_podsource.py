"""The pure parts of the agent's server pod sync (agent/cluster_client/podsource.py, podstatus.py):
what to do given the server's pods and the local ones, the manifest the agent admits, the watch
events, the status patch and its coalescing and back-off."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest

from nodeagent.agent.cluster_client.podsource import (
    SERVER_UID,
    Action,
    Gone,
    LocalPod,
    apply_event,
    local_manifest,
    plan_actions,
    server_event,
)
from nodeagent.agent.cluster_client.podstatus import StatusTracker, refused_status, server_status, status_patch
from nodeagent.agent.cluster_client.sync import ApiError
from nodeagent.agent.events import EventRecorder
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import parse_pod

K = ("default", "web")


def spod(uid: str = "u1", *, deleting: bool = False, grace: int = 30, phase: str = "Pending") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "default", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["deletionGracePeriodSeconds"] = grace
    return {"metadata": meta, "spec": {}, "status": {"phase": phase}}


OURS = LocalPod("u1", "u1", removing=False)
OURS_REMOVING = LocalPod("u1", "u1", removing=True)
OURS_OLD = LocalPod("u0", "u0", removing=False)
LOCAL_API = LocalPod("x", None, removing=False)  # created through the agent's own API (or static)


@pytest.mark.parametrize(("server", "local", "skip", "expected"), [
    # nothing here yet: start it
    ({K: spod()}, {}, (), [Action("Create", K, "u1")]),
    # running already (e.g. re-adopted after an agent restart): nothing twice
    ({K: spod(phase="Running")}, {K: OURS}, (), []),
    # terminal on the server (refused before, or finished and cleaned up here): never again
    ({K: spod(phase="Failed")}, {}, (), []),
    ({K: spod(phase="Succeeded")}, {}, (), []),
    # refused at admission this run (skip): not retried
    ({K: spod()}, {}, ("u1",), []),
    # deleted on the server: stop with its grace, then confirm once gone
    ({K: spod(deleting=True, grace=7)}, {K: OURS}, (), [Action("Delete", K, "u1", 7)]),
    ({K: spod(deleting=True)}, {K: OURS_REMOVING}, (), []),
    ({K: spod(deleting=True)}, {}, (), [Action("Finalize", K, "u1")]),
    # deleted on the server while a local API pod of that name runs: confirm, never touch the local one
    ({K: spod(deleting=True)}, {K: LOCAL_API}, (), [Action("Finalize", K, "u1")]),
    # gone from the server (deleted while the agent was down): stop ours
    ({}, {K: OURS}, (), [Action("Delete", K, "u1")]),
    ({}, {K: OURS_REMOVING}, (), []),
    # re-created on the server under the same name: the old one stops; the new one starts after
    ({K: spod("u2")}, {K: OURS_OLD}, (), [Action("Delete", K, "u0")]),
    ({K: spod("u2", deleting=True)}, {K: OURS_OLD}, (), [Action("Delete", K, "u0"), Action("Finalize", K, "u2")]),
    # local API and static pods: never deleted; a server pod of that name is a conflict
    ({}, {K: LOCAL_API}, (), []),
    ({K: spod()}, {K: LOCAL_API}, (), [Action("Conflict", K, "u1")]),
    ({K: spod()}, {K: LOCAL_API}, ("u1",), []),
])
def test_plan_actions(server: dict[tuple[str, str], Any], local: dict[tuple[str, str], LocalPod],
                      skip: tuple[str, ...], expected: list[Action]) -> None:
    assert sorted(plan_actions(server, local, skip), key=lambda a: a.kind) == sorted(expected, key=lambda a: a.kind)


def test_local_manifest_keeps_what_the_model_knows_and_marks_the_owner() -> None:
    server_pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "9",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "web"},
                     "annotations": {"kubernetes.io/config.source": "file", "a": "b"},
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "command": ["sleep", "1"],
                                                   "terminationMessagePath": "/dev/termination-log",
                                                   "madeUpByAServer": True}],
                 "madeUpField": 1, "restartPolicy": "Never"},
        "status": {"phase": "Pending"},
    }
    out = local_manifest(server_pod)
    assert out["metadata"]["annotations"] == {"a": "b", "kubernetes.io/config.source": "api", SERVER_UID: "u1"}
    assert "resourceVersion" not in out["metadata"] and "managedFields" not in out["metadata"]
    assert "status" not in out and "madeUpField" not in out["spec"]
    assert "madeUpByAServer" not in out["spec"]["containers"][0]
    pod = parse_pod(out)
    assert pod.metadata.uid == "u1" and pod.spec.restart_policy == "Never"
    assert server_pod["spec"]["madeUpField"] == 1  # the watched copy is not changed


def test_apply_event() -> None:
    pods: dict[tuple[str, str], dict[str, Any]] = {}
    added = {**spod(), "metadata": {**spod()["metadata"], "resourceVersion": "5"}}
    assert apply_event(pods, {"type": "ADDED", "object": added}) == "5"
    assert pods[K]["metadata"]["uid"] == "u1"
    assert apply_event(pods, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}}) == "8"
    assert K in pods
    gone = {**added, "metadata": {**added["metadata"], "resourceVersion": "9"}}
    assert apply_event(pods, {"type": "DELETED", "object": gone}) == "9"
    assert pods == {}
    with pytest.raises(Gone):
        apply_event(pods, {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})
    with pytest.raises(ApiError):
        apply_event(pods, {"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError"}})


LOCAL_STATUS = {
    "phase": "Running", "qosClass": "BestEffort", "startTime": "T0", "hostIP": "10.0.0.1", "podIP": "10.0.0.1",
    "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": "T1"}],
    "containerStatuses": [{"name": "main", "ready": True}],
    "nodeagentOnly": "x",
}


def test_server_status_keeps_podstatus_keys_and_clears_reason_and_message() -> None:
    out = server_status({"status": LOCAL_STATUS})
    assert "nodeagentOnly" not in out
    assert out["reason"] is None and out["message"] is None and out["phase"] == "Running"


def test_status_patch_tests_the_uid_and_merges_conditions_by_type() -> None:
    status = server_status({"status": LOCAL_STATUS})
    current = {"phase": "Pending", "reason": "Old", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "DisruptionTarget", "status": "True"},
        {"type": "Ready", "status": "False", "message": "stale"}]}
    ops = status_patch("u1", status, current)
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "u1"}
    by_path = {op["path"]: op for op in ops[1:]}
    assert by_path["/status/reason"] == {"op": "remove", "path": "/status/reason"}
    assert "/status/message" not in by_path  # not on the server: nothing to remove
    assert by_path["/status/phase"]["value"] == "Running"
    conditions = by_path["/status/conditions"]["value"]
    assert [c["type"] for c in conditions] == ["PodScheduled", "DisruptionTarget", "Ready"]
    assert conditions[2] == {"type": "Ready", "status": "True", "lastTransitionTime": "T1"}  # whole: no stale message


def test_status_patch_adds_pod_scheduled_when_nobody_has_it() -> None:
    ops = status_patch("u1", server_status({"status": LOCAL_STATUS}), {"phase": "Pending"})
    conditions = next(op["value"] for op in ops if op["path"] == "/status/conditions")
    assert {"type": "PodScheduled", "status": "True", "lastTransitionTime": "T0"} in conditions


def test_refused_status_patch() -> None:
    ops = status_patch("u1", refused_status("OutOfmemory", "Node didn't have enough resource: memory"),
                       {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]})
    assert ops[1:] == [{"op": "add", "path": "/status/phase", "value": "Failed"},
                       {"op": "add", "path": "/status/reason", "value": "OutOfmemory"},
                       {"op": "add", "path": "/status/message", "value": "Node didn't have enough resource: memory"}]


def test_tracker_sends_changes_once_and_backs_off() -> None:
    t = StatusTracker()
    a, b = {"phase": "Pending"}, {"phase": "Running"}
    assert t.due(K, "u1", a, 0.0)
    t.sent(K, "u1", a)
    assert not t.due(K, "u1", a, 0.1)  # unchanged: coalesced away
    assert t.due(K, "u1", b, 0.2)
    assert t.failed(K, "u1", 0.2) == pytest.approx(0.2)
    assert not t.due(K, "u1", b, 0.3)  # backing off
    assert t.due(K, "u1", b, 0.41)
    assert t.failed(K, "u1", 0.41) == pytest.approx(0.4)
    t.sent(K, "u1", b)
    assert not t.due(K, "u1", b, 5.0)
    # the same name, another uid: a new pod, sent from scratch
    assert t.due(K, "u2", b, 5.0)
    t.forget(set())
    assert t.pods == {}
    t.sent(K, "u1", b)
    t.reset()
    assert t.due(K, "u1", b, 6.0)


def test_server_event_only_for_server_pods_with_a_run_unique_name() -> None:
    recorder = EventRecorder(FakeClock(), "n1")
    mine = recorder.record("Unhealthy", "Readiness probe failed", namespace="default", name="web", uid="u1",
                           field_path="spec.containers{main}")
    other = recorder.record("Unhealthy", "x", namespace="default", name="local", uid="local-uid")
    node = recorder.record("EvictionThresholdMet", "x", kind="Node", name="n1")
    body = server_event(mine, "abcd", {"u1"})
    assert body is not None
    assert body["metadata"] == {"name": "web.abcd1", "namespace": "default"}
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "web",
                                      "uid": "u1", "fieldPath": "spec.containers{main}"}
    assert (body["reason"], body["type"], body["count"], body["reportingInstance"]) == ("Unhealthy", "Warning", 1, "n1")
    assert server_event(mine, "abcd", {"u1"}) == body  # stable: a retry posts the same name
    assert server_event(other, "abcd", {"u1"}) is None and server_event(node, "abcd", {"u1"}) is None


async def test_watch_resumes_from_bookmarks_and_relists_on_410() -> None:
    """The watch loop against a scripted apiserver (aiohttp): list, watch from the list's
    resourceVersion, a bookmark moves it, an ERROR 410 re-lists, the next watch starts from the
    new list's resourceVersion."""
    from types import SimpleNamespace
    from typing import cast

    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from nodeagent.agent.cluster_client.podsource import PodSync
    from nodeagent.agent.cluster_client.sync import ApiClient
    from nodeagent.agent.config.settings import Config
    from nodeagent.agent.pods.manager import PodManager
    from nodeagent.daemonkit.kubeconfig import ClusterCredentials

    def pod(name: str, rv: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": rv}}

    seen: list[tuple[str, str | None]] = []
    lists = iter([{"metadata": {"resourceVersion": "10"}, "items": [pod("a", "9")]},
                  {"metadata": {"resourceVersion": "20"}, "items": [pod("b", "11")]}])
    held = asyncio.Event()

    async def pods(request: web.Request) -> web.StreamResponse:
        assert request.query["fieldSelector"] == "spec.nodeName=n1"
        if request.query.get("watch") != "true":
            seen.append(("list", None))
            return web.json_response(next(lists))
        rv = request.query.get("resourceVersion")
        seen.append(("watch", rv))
        assert request.query["allowWatchBookmarks"] == "true"
        resp = web.StreamResponse()
        await resp.prepare(request)
        if rv == "10":
            for event in ({"type": "ADDED", "object": pod("b", "11")},
                          {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}):
                await resp.write(json.dumps(event).encode() + b"\n")
            return resp  # the server ends this watch: resumed from 12
        if rv == "12":
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
            await resp.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            return resp
        held.set()
        await asyncio.sleep(30)
        return resp

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    server = TestServer(app)
    await server.start_server()
    sync = PodSync(cast(PodManager, None), "n1")
    sync.client = ApiClient(ClusterCredentials(server=str(server.make_url("")).rstrip("/")))
    sync._kubeconfig = "kc"
    config = cast(Config, SimpleNamespace(kubeconfig="kc", node_status_update_frequency=1.0))
    task = asyncio.create_task(sync.watch_loop(lambda: config))
    try:
        await asyncio.wait_for(held.wait(), 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await sync.close()
        await server.close()
    assert seen == [("list", None), ("watch", "10"), ("watch", "12"), ("list", None), ("watch", "20")]
    assert set(sync.server) == {("default", "b")} and sync.relists == 2 and sync.resource_version == "20"
