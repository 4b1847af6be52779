"""The pods the control plane binds to this node, run by the agent as a kubelet's "api" source.

Watch: list `/api/v1/pods?fieldSelector=spec.nodeName=<node>`, then watch from that
resourceVersion with bookmarks; a 410 Gone (as a status or an ERROR event) re-lists; a dropped
connection resumes from the last resourceVersion seen, with back-off (200 ms doubling to 7 s).

Ownership: a pod the agent starts for the server carries the annotation `nodeagent.io/server-uid`
(the server pod's uid, also its local uid). Only such pods are ever stopped by this sync; pods
created through the agent's own API and static pods are never touched, even if they share a
name with a server pod (that server pod is then reported Failed, reason NodeNameConflict). The
agent's API strips the annotation from what clients send, so no client can mark a pod as ours.

Reconcile (`plan_actions`, pure, table-tested), once the first list succeeded:
- server pod, not terminal, not being deleted, nothing local of that name   -> Create (through
  PodManager.create_pod: the same admission as the local API; a refusal is written to the server
  as Failed with the admission's reason and message, as the kubelet's rejectPod, and never retried)
- server pod being deleted, ours locally with its uid, not yet being removed -> Delete with the
  server's deletionGracePeriodSeconds (preStop, SIGTERM, SIGKILL as the agent's own delete)
- server pod being deleted and nothing of ours with its uid left            -> Finalize: DELETE with
  gracePeriodSeconds=0 and a uid precondition (what `kubectl delete` waits for)
- ours locally, the server has no pod of that name or one with another uid -> Delete with the
  pod's own grace (deleted or re-created on the server while the agent was down or partitioned)
After an agent restart the pods come back from checkpoints (PodManager.restore) with their
annotation, so a re-list finds them and starts nothing twice.

Resize (KEP-1287): a server pod of ours whose containers' resources differ from what the agent
holds as desired (`resize_patch`, pure) is handed to the agent's own pods/resize path (admission
Infeasible/Deferred/accepted, live cgroup writes or RestartContainer), once per metadata.generation;
the status then carries allocatedResources/resources, PodResizePending/PodResizeInProgress and
`observedGeneration` (the generation whose spec the agent has taken in).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import structlog
from pydantic import ValidationError

from nodeagent.agent.cluster_client import bodies, podstatus
from nodeagent.agent.cluster_client.sync import ApiClient, ApiError, KubeconfigClient
from nodeagent.agent.config.settings import Config
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.pods.errors import AdmissionError, AlreadyExists, DurabilityError
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.resize import MERGE
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.eventcorrelator import Correlator
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.resize import resources_of
from nodeagent.core.timefmt import parse_rfc3339
from nodeagent.core.waits import wait_for
from nodeagent.core.wellknown import API_SERVER_SOURCE, CONFIG_HASH, CONFIG_MIRROR, CONFIG_SOURCE, SERVER_UID
from nodeagent.daemonkit.kubeconfig import KubeconfigError

log = structlog.get_logger(__name__)

TERMINAL = ("Succeeded", "Failed")
WATCH_TIMEOUT_S = 300  # the server ends a watch after this; it is resumed at once
RESYNC_S = 1.0  # statuses are recomputed at least this often (probe results move readiness)
COALESCE_S = 0.1  # changes closer than this are handled in one round
Key = tuple[str, str]


class Gone(Exception):
    """410: the resourceVersion is too old; list again."""


# ---- pure: what to do -------------------------------------------------------------------------

@dataclass(frozen=True)
class LocalPod:
    """What reconcile needs of a pod the agent has."""
    uid: str
    server_uid: str | None  # the annotation: set only on pods started for the server
    removing: bool  # a delete is under way (it leaves the list once stopped)


@dataclass(frozen=True)
class Action:
    kind: str  # Create, Delete, Finalize, Conflict
    key: Key
    uid: str
    grace: int | None = None


def _meta(pod: Mapping[str, Any]) -> dict[str, Any]:
    return pod.get("metadata") or {}


def plan_actions(server: Mapping[Key, Mapping[str, Any]], local: Mapping[Key, LocalPod],
                 skip: Iterable[str] = ()) -> list[Action]:
    """The actions that bring the local pods to what the server binds here (module docstring).
    `skip`: server uids not to create again (refused at admission, or being finalized)."""
    skipped = set(skip)
    actions: list[Action] = []
    for key, pod in server.items():
        meta = _meta(pod)
        uid = str(meta.get("uid") or "")
        deleting = bool(meta.get("deletionTimestamp"))
        phase = (pod.get("status") or {}).get("phase")
        have = local.get(key)
        ours = have is not None and have.server_uid is not None
        same = ours and have is not None and have.server_uid == uid
        if deleting:
            if same and have is not None and not have.removing:
                grace = meta.get("deletionGracePeriodSeconds")
                actions.append(Action("Delete", key, uid, int(grace) if grace is not None else None))
            elif not same:
                actions.append(Action("Finalize", key, uid))
            continue
        if have is None:
            if phase not in TERMINAL and uid not in skipped:
                actions.append(Action("Create", key, uid))
        elif not ours and phase not in TERMINAL and uid not in skipped:
            actions.append(Action("Conflict", key, uid))
    for key, have in local.items():
        if have.server_uid is None or have.removing:
            continue
        current = server.get(key)
        if current is None or str(_meta(current).get("uid") or "") != have.server_uid:
            actions.append(Action("Delete", key, have.server_uid))
    return actions


def local_manifest(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The server pod as the agent's model takes it: metadata the agent keeps, its spec without
    the fields the model does not know (server defaults such as dnsPolicy or schedulerName), the
    source annotations (config.source "api", and our ownership mark)."""
    meta = _meta(pod)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k not in (CONFIG_SOURCE, CONFIG_MIRROR, CONFIG_HASH)}
    annotations[CONFIG_SOURCE] = API_SERVER_SOURCE
    annotations[SERVER_UID] = str(meta.get("uid") or "")
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "labels", "creationTimestamp") if k in meta}
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {**keep, "annotations": annotations},
                                "spec": dict(pod.get("spec") or {})}
    return _without_unknown(manifest)


def _without_unknown(manifest: dict[str, Any]) -> dict[str, Any]:
    """Drop the fields the model forbids as unknown (what the server stores is valid already)."""
    for _ in range(8):
        try:
            Pod.model_validate(manifest, by_alias=True, by_name=False)
            return manifest
        except ValidationError as exc:
            extra = [e["loc"] for e in exc.errors(include_url=False) if e["type"] == "extra_forbidden"]
            if not extra:
                return manifest  # create_pod names what is wrong
            for loc in extra:
                cur: Any = manifest
                try:
                    for part in loc[:-1]:
                        cur = cur[part]
                    cur.pop(loc[-1], None)
                except (KeyError, IndexError, TypeError, AttributeError):
                    return manifest
    return manifest


def resize_patch(server_pod: Mapping[str, Any], desired: Pod) -> dict[str, Any] | None:
    """The merge patch for the agent's pods/resize that brings `desired` (the spec the agent
    holds: allocated, or a pending resize) to the server pod's containers' resources and
    resizePolicy; None when their resources agree (or the server pod cannot be read)."""
    try:
        server = parse_pod(local_manifest(server_pod))
    except ValidationErrors:
        return None
    want = {c.name: resources_of(c) for c in (*server.spec.init_containers, *server.spec.containers)}
    have = {c.name: resources_of(c) for c in (*desired.spec.init_containers, *desired.spec.containers)}
    if set(want) != set(have):
        return None  # not a resize (the server refuses added or removed containers)
    if all((want[n].requests, want[n].limits) == (have[n].requests, have[n].limits) for n in want):
        return None
    spec = server_pod.get("spec") or {}
    patch: dict[str, Any] = {}
    for key in ("initContainers", "containers"):
        items = [c for c in spec.get(key) or [] if isinstance(c, dict)]
        if items:
            patch[key] = [{"name": c.get("name"), "resources": c.get("resources") or {},
                           **({"resizePolicy": c["resizePolicy"]} if c.get("resizePolicy") else {})}
                          for c in items]
    return {"spec": patch}


def apply_event(pods: dict[Key, dict[str, Any]], event: Mapping[str, Any]) -> str | None:
    """One watch event onto the map; the resourceVersion it carries. Gone on a 410 ERROR."""
    kind = event.get("type")
    obj = event.get("object") or {}
    if kind == "ERROR":
        if obj.get("code") == 410 or obj.get("reason") in ("Expired", "Gone"):
            raise Gone(str(obj.get("message") or "resourceVersion too old"))
        raise ApiError("WATCH", "pods", int(obj.get("code") or 500), obj)
    meta = _meta(obj)
    rv = meta.get("resourceVersion")
    if kind == "BOOKMARK":
        return str(rv) if rv else None
    key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    if kind == "DELETED":
        pods.pop(key, None)
    elif kind in ("ADDED", "MODIFIED"):
        pods[key] = dict(obj)
    return str(rv) if rv else None


def server_event(event: Mapping[str, Any], run_token: str, server_uids: set[str]) -> dict[str, Any] | None:
    """The agent's Event for the server, or None when it is not about a pod the server has. Its
    name is the object's and a per-run token with the local sequence (unique, stable on retry)."""
    involved = dict(event.get("involvedObject") or {})
    if involved.get("kind") != "Pod" or involved.get("uid") not in server_uids:
        return None
    local_name = str(_meta(event).get("name") or "")
    seq = local_name.rsplit(".", 1)[-1]
    namespace = str(involved.get("namespace") or "default")
    involved["apiVersion"] = "v1"
    source = dict(event.get("source") or {})
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{involved.get('name')}.{run_token}{seq}", "namespace": namespace},
            "involvedObject": involved, "reason": event.get("reason"), "message": event.get("message"),
            "type": event.get("type") or "Normal", "source": source,
            "firstTimestamp": event.get("firstTimestamp"), "lastTimestamp": event.get("lastTimestamp"),
            "count": event.get("count") or 1, "reportingComponent": source.get("component") or "nodeagent",
            "reportingInstance": source.get("host") or ""}


# ---- the loop -------------------------------------------------------------------------------

def _pod_path(key: Key) -> str:
    return f"/api/v1/namespaces/{quote(key[0], safe='')}/pods/{quote(key[1], safe='')}"


class PodSync(KubeconfigClient):
    """The server's pods for one node: the watch, the reconcile, the status writes."""

    def __init__(self, manager: PodManager, node_name: str, *, clock: Clock | None = None,
                 timeout: float = 10.0, watch_timeout: int = WATCH_TIMEOUT_S,
                 events: EventRecorder | None = None) -> None:
        """`events`: the agent's recorder; its events about server pods are posted to the server."""
        self.manager = manager
        self.events = events
        self._run_token = secrets.token_hex(4)  # event names differ from a previous run's
        self.events_posted: set[str] = set()
        self.correlator = Correlator()  # as the kubelet's recorder: repeats become count+1 of one Event
        self._correlated: dict[str, dict[str, Any]] = {}  # local name -> the Event to write, until written
        self._server_uids: set[str] = set()  # server pods seen this run: a deleted pod's events still go
        self._events_failures = 0
        self._events_retry_at = 0.0
        super().__init__(timeout)
        self.node_name = node_name
        self.clock = clock or SystemClock()
        self.watch_timeout = watch_timeout
        self.server: dict[Key, dict[str, Any]] = {}
        self.synced = False  # a list succeeded: absence from `server` means deleted there
        self.resource_version: str | None = None
        self.refused: dict[str, tuple[Key, str, str]] = {}  # server uid -> (key, reason, message)
        self.finalized: set[str] = set()
        self.statuses = podstatus.StatusTracker()
        self.observed: dict[str, int] = {}  # server uid -> the generation whose spec the agent took in
        self.watch_failures = 0
        self.relists = 0
        self.last_error: str | None = None
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Something changed (a watch event, a local pod): reconcile soon."""
        self._wake.set()

    # ---- watch ----
    def _query(self, **extra: str) -> str:
        return urlencode({"fieldSelector": f"spec.nodeName={self.node_name}", **extra})

    async def relist(self, client: ApiClient) -> None:
        data = await client.call("GET", "/api/v1/pods?" + self._query())
        pods = {}
        for item in (data or {}).get("items") or []:
            meta = _meta(item)
            pods[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = item
        self.server = pods
        self.resource_version = str(((data or {}).get("metadata") or {}).get("resourceVersion") or "") or None
        self.synced = True
        self.relists += 1
        log.info("server_pods_listed", node=self.node_name, pods=len(pods), resource_version=self.resource_version)
        self.wake()

    async def watch_once(self, client: ApiClient) -> None:
        """One watch request, until the server ends it; events go into `server`."""
        query = self._query(watch="true", allowWatchBookmarks="true", timeoutSeconds=str(self.watch_timeout),
                            **({"resourceVersion": self.resource_version} if self.resource_version else {}))
        async for event in client.stream("/api/v1/pods?" + query, self.watch_timeout + 30):
            rv = apply_event(self.server, event)
            if rv:
                self.resource_version = rv
            self._recovered()
            self.wake()

    async def watch_loop(self, config: Callable[[], Config]) -> None:
        while True:
            cfg = config()
            if not cfg.kubeconfig:
                await self.idle()
                await asyncio.sleep(cfg.node_status_update_frequency)
                continue
            try:
                client = await self._client(cfg.kubeconfig)
                if not self.synced or self.resource_version is None:
                    await self.relist(client)
                    self._recovered()
                await self.watch_once(client)
                self._recovered()
                continue
            except Gone:
                log.info("server_pods_watch_expired", resource_version=self.resource_version)
                self.resource_version = None
                # the old map stays until the new list replaces it
                continue
            except (ApiError, KubeconfigError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
                if isinstance(e, ApiError) and e.code == 410:
                    self.resource_version = None
                    continue
                self.watch_failures += 1
                message = f"{type(e).__name__}: {e}"
                if self.watch_failures == 1:
                    log.warning("server_pods_watch_failed", error=message)
                self.last_error = message
                if not isinstance(e, ApiError) or e.code in (401, 403):
                    await self._drop_client()
                    self.statuses.reset()
                await asyncio.sleep(bodies.backoff_delay(self.watch_failures))

    def _recovered(self) -> None:
        if self.watch_failures:
            log.info("server_pods_watch_resumed", after_failures=self.watch_failures,
                     resource_version=self.resource_version)
        self.watch_failures, self.last_error = 0, None

    async def idle(self) -> None:
        """kubeconfig unset (or cleared by a reload): forget the server's pods, stop nothing (the
        agent is autonomous: what runs keeps running)."""
        await self._drop_client()
        self.server, self.synced, self.resource_version = {}, False, None

    # ---- reconcile and status ----
    def local_view(self) -> dict[Key, LocalPod]:
        out = {}
        for key, w in self.manager.pods.items():
            meta = w.pod.metadata
            removing = w.deletion is not None and w.deletion.remove
            out[key] = LocalPod(meta.uid, meta.annotations.get(SERVER_UID), removing)
        return out

    async def reconcile_once(self) -> None:
        """Act on the differences, then write the statuses that changed."""
        if not self.synced or self.client is None:
            return
        client = self.client
        skip = set(self.refused) | self.finalized
        for action in plan_actions(self.server, self.local_view(), skip):
            try:
                await self._act(client, action)
            except (ApiError, aiohttp.ClientError, TimeoutError, OSError) as e:
                log.warning("server_pod_action_failed", action=action.kind, pod="/".join(action.key), error=str(e))
        await self.resize_pods()
        await self.push_statuses(client)
        await self.post_events(client)

    async def resize_pods(self) -> None:
        """Server pods of ours whose generation the agent has not taken in: a resources change
        goes through the agent's pods/resize (once per generation; a refusal is an event)."""
        for key, pod in self.server.items():
            meta = _meta(pod)
            uid = str(meta.get("uid") or "")
            w = self.manager.pods.get(key)
            if w is None or w.pod.metadata.annotations.get(SERVER_UID) != uid or meta.get("deletionTimestamp"):
                continue
            generation = int(meta.get("generation") or 0)
            if self.observed.get(uid) == generation or w.terminal:
                continue
            patch = resize_patch(pod, w.resize.desired or w.plan.pod)
            if patch is not None:
                try:
                    await self.manager.resize_pod(key[0], key[1], patch, MERGE)
                    log.info("server_pod_resized", pod="/".join(key), uid=uid, generation=generation)
                except (ValidationErrors, FieldError) as e:
                    message = str(e).replace("\n", "; ")
                    log.warning("server_pod_resize_refused", pod="/".join(key), uid=uid, error=message)
                    if self.events is not None:
                        self.events.record("ResizeRefused", message, namespace=key[0], name=key[1], uid=uid)
                except DurabilityError as e:
                    log.error("server_pod_resize_failed", pod="/".join(key), error=str(e))
                    continue  # tried again next round
            self.observed[uid] = generation

    async def post_events(self, client: ApiClient) -> None:
        """The agent's events about pods the server has or had this run (same uid), as core/v1
        Events, correlated as the kubelet's recorder does: a repeat of an event (same pod, reason,
        message) is written as that Event again with count+1 and a new lastTimestamp (PUT, which
        creates an Event that is gone), so `kubectl describe pod` shows `(x4 over 2m)`; the spam
        filter drops a flood. Each local event is written once; a failure is retried after a back-off."""
        if self.events is None or self.clock.now() < self._events_retry_at:
            return
        self._server_uids.update(str(_meta(p).get("uid") or "") for p in self.server.values())
        recent = self.events.list()
        for event in recent:
            local_name = str(_meta(event).get("name") or "")
            if local_name in self.events_posted:
                continue
            body = self._correlated.get(local_name)
            if body is None:
                raw = server_event(event, self._run_token, self._server_uids)
                if raw is None:
                    continue
                when = parse_rfc3339(event.get("lastTimestamp")) or self.clock.wall()
                body = self.correlator.observe(raw, self.clock.now(), when)
                if body is None:  # the spam filter's
                    self.events_posted.add(local_name)
                    continue
                self._correlated[local_name] = body
            meta = body["metadata"]
            path = f"/api/v1/namespaces/{quote(meta['namespace'], safe='')}/events/{quote(meta['name'], safe='')}"
            code, data = await client.request("PUT", path, body)
            if code in (200, 201):
                self.events_posted.add(local_name)
                self._correlated.pop(local_name, None)
                self._events_failures = 0
            else:  # tried again after a back-off; the ring forgets it eventually
                self._events_failures += 1
                self._events_retry_at = self.clock.now() + bodies.backoff_delay(self._events_failures)
                if self._events_failures == 1:
                    log.warning("server_event_failed", reason=event.get("reason"),
                                error=str(ApiError("PUT", path, code, data)))
                break
        live = {str(_meta(e).get("name") or "") for e in recent}
        self.events_posted &= live
        self._correlated = {k: v for k, v in self._correlated.items() if k in live}
        current = {str(_meta(p).get("uid") or "") for p in self.server.values()}
        self._server_uids = current | {str((e.get("involvedObject") or {}).get("uid") or "") for e in recent
                                       if (e.get("involvedObject") or {}).get("uid") in self._server_uids}

    async def _act(self, client: ApiClient, action: Action) -> None:
        key, pod = action.key, self.server.get(action.key)
        if action.kind == "Create" and pod is not None:
            try:
                await self.manager.create_pod(local_manifest(pod))
                log.info("server_pod_started", pod="/".join(key), uid=action.uid)
            except AlreadyExists:
                pass
            except AdmissionError as e:
                self._refuse(action, e.reason, e.message)
            except ValidationErrors as e:
                self._refuse(action, "InvalidPod", str(e).replace("\n", "; "))
            except DurabilityError as e:
                log.error("server_pod_start_failed", pod="/".join(key), error=str(e))
        elif action.kind == "Conflict":
            self._refuse(action, "NodeNameConflict",
                         f"a pod {key[0]}/{key[1]} not from the control plane runs on node {self.node_name}")
        elif action.kind == "Delete":
            grace = action.grace
            local = self.manager.pods.get(key)
            if grace is None and local is not None:
                grace = local.pod.spec.termination_grace_period_seconds
            await self.manager.delete_pod(key[0], key[1], grace)
            log.info("server_pod_stopping", pod="/".join(key), uid=action.uid, grace=grace)
        elif action.kind == "Finalize":
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": action.uid}}
            code, data = await client.request("DELETE", _pod_path(key), body)
            if code in (200, 202, 404, 409):  # gone, or another pod of that name now
                self.finalized.add(action.uid)
                log.info("server_pod_deleted", pod="/".join(key), uid=action.uid, code=code)
            else:
                raise ApiError("DELETE", _pod_path(key), code, data)

    def _refuse(self, action: Action, reason: str, message: str) -> None:
        self.refused[action.uid] = (action.key, reason, message)
        if self.events is not None:  # the kubelet's rejectPod records it too
            self.events.record(reason, message, namespace=action.key[0], name=action.key[1], uid=action.uid)
        log.warning("server_pod_refused", pod="/".join(action.key), uid=action.uid, reason=reason, message=message)

    async def push_statuses(self, client: ApiClient) -> None:
        now = self.clock.now()
        wanted: list[tuple[Key, str, dict[str, Any]]] = []
        for key, w in self.manager.pods.items():
            uid = w.pod.metadata.annotations.get(SERVER_UID)
            pod = self.server.get(key)
            if uid is None or pod is None or str(_meta(pod).get("uid") or "") != uid:
                continue
            wanted.append((key, uid, podstatus.with_generation(podstatus.server_status(w.to_dict()),
                                                               self.observed.get(uid))))
        for uid, (key, reason, message) in self.refused.items():
            pod = self.server.get(key)
            if pod is not None and str(_meta(pod).get("uid") or "") == uid and not _meta(pod).get("deletionTimestamp"):
                wanted.append((key, uid, podstatus.refused_status(reason, message)))
        self.statuses.forget({key for key, _, _ in wanted})
        for key, uid, status in wanted:
            if not self.statuses.due(key, uid, status, now):
                continue
            current = (self.server.get(key) or {}).get("status") or {}
            code, data = await client.request("PATCH", _pod_path(key) + "/status",
                                              podstatus.status_patch(uid, status, current),
                                              content_type=podstatus.JSON_PATCH)
            if code == 200:
                self.statuses.sent(key, uid, status)
                if isinstance(data, dict) and str(_meta(data).get("uid") or "") == uid:
                    self.server[key] = data  # the next patch merges with what it wrote
            else:
                delay = self.statuses.failed(key, uid, now)
                log.warning("server_pod_status_failed", pod="/".join(key), code=code, retry_in=delay,
                            error=str(ApiError("PATCH", "status", code, data)))
        live = {uid for uid in self.refused if any(str(_meta(p).get("uid") or "") == uid for p in self.server.values())}
        self.refused = {uid: v for uid, v in self.refused.items() if uid in live}
        self.finalized &= {str(_meta(p).get("uid") or "") for p in self.server.values()}
        self.observed = {u: g for u, g in self.observed.items() if u in {uid for _, uid, _ in wanted}}

    async def reconcile_loop(self) -> None:
        while True:
            try:
                await wait_for(self._wake.wait(), RESYNC_S)
            except TimeoutError:
                pass
            await asyncio.sleep(COALESCE_S)
            self._wake.clear()
            try:
                await self.reconcile_once()
            except Exception:  # never let one bad round end the loop
                log.exception("server_pods_reconcile_crashed")
                await asyncio.sleep(bodies.BACKOFF_MAX_S)

    async def close(self) -> None:
        await self._drop_client()


async def pod_sync_loop(config: Callable[[], Config], sync: PodSync) -> None:
    """The watch and the reconcile, until cancelled (both idle while `kubeconfig` is unset)."""
    sync.manager.listeners.append(sync.wake)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(sync.watch_loop(config))
            group.create_task(sync.reconcile_loop())
    finally:
        if sync.wake in sync.manager.listeners:
            sync.manager.listeners.remove(sync.wake)
        await sync.close()

