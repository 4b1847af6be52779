"""One DaemonSet sync (syncDaemonSet, manage, podsShouldBeOnNode, syncNodes, rollingUpdate,
updateDaemonSetStatus), as plans.

Inputs: the DaemonSet; every node; the pods of its namespace that match its selector or are
controlled by it; every ControllerRevision of its namespace; whether its expectations are
satisfied; a read-only view of the failed-pods back-off; now.

Output: `plan` (claims, history writes, events, the pod creates in slow-start batches, the pod
deletes, old revisions deleted) and `status` (the status write and the requeue the loop runs even
when the plan failed, as upstream writes the status after a failed manage). The loop sets the
expectations from `expect_creations`/`expect_deletions` before running the plan and calls
`Backoff.next(key, now)` for each key of `backoff_next`.

Upstream iterates a Go map of nodes to pods where the rolling update picks its candidates; here
the order is the node list's (then pods on nodes no longer listed, by name), so a decision is
reproducible.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodeagent.cluster.controllers.common import ownership, selectors
from nodeagent.cluster.controllers.common.actions import (
    Create,
    Delete,
    Event,
    ObjectRef,
    Plan,
    SlowStart,
    UpdateStatus,
)
from nodeagent.cluster.controllers.common.intstr import IntOrStringError, scaled_value
from nodeagent.cluster.controllers.common.meta import (
    annotations_of,
    being_deleted,
    creation_time,
    generation,
    int_field,
    key,
    labels,
    name,
    namespace,
    new_controller_ref,
    resource_version,
    spec,
    status,
    uid,
)
from nodeagent.cluster.controllers.common.pods import is_available, is_ready, is_terminal, node_name, phase
from nodeagent.cluster.controllers.common.podtemplate import pod_from_template
from nodeagent.cluster.controllers.daemonset import history, placement
from nodeagent.cluster.controllers.daemonset.history import HASH_LABEL

API_VERSION, KIND = "apps/v1", "DaemonSet"
BURST_REPLICAS = 250  # daemon_controller.go BurstReplicas
FAILED_PODS_BACKOFF = (1.0, 15 * 60.0)  # kube-controller-manager: flowcontrol.NewBackOff(1s, 15m)
TEMPLATE_GENERATION_LABEL = "pod-template-generation"  # extensions.DaemonSetTemplateGenerationKey
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
_INT64 = re.compile(r"[+-]?[0-9]+")
Obj = Mapping[str, Any]


class BackoffView(Protocol):
    """What a sync reads of the loop's failed-pods back-off (common.backoff.Backoff has it)."""

    def get(self, key: str) -> float: ...

    def in_backoff_since_update(self, key: str, now: float) -> bool: ...


# ---- small upstream helpers -------------------------------------------------------------


def template_generation(ds: Obj) -> int | None:
    """GetTemplateGeneration: the deprecated annotation, None when absent or unparseable."""
    text = annotations_of(ds).get(TEMPLATE_GENERATION_ANNOTATION)
    return int(text) if isinstance(text, str) and _INT64.fullmatch(text) else None


def is_pod_updated(pod: Obj, hash_: str, gen: int | None) -> bool:
    """IsPodUpdated: the pod carries the current hash, or the (legacy) template generation."""
    lbls = labels(pod)
    template_matches = gen is not None and lbls.get(TEMPLATE_GENERATION_LABEL) == str(gen)
    return (bool(hash_) and lbls.get(HASH_LABEL) == hash_) or template_matches


def _rolling(ds: Obj) -> Mapping[str, Any] | None:
    strategy = spec(ds).get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return None
    r = strategy.get("rollingUpdate")
    return r if isinstance(r, Mapping) else None


def surge_count(ds: Obj, number_to_schedule: int) -> int:
    """SurgeCount: maxSurge of the nodes to schedule, percentages rounded up; 0 unless RollingUpdate."""
    r = _rolling(ds)
    if r is None or r.get("maxSurge") is None:
        return 0
    return scaled_value(r.get("maxSurge"), number_to_schedule, True)


def unavailable_count(ds: Obj, number_to_schedule: int) -> int:
    """UnavailableCount: maxUnavailable of the nodes to schedule, percentages rounded up."""
    r = _rolling(ds)
    if r is None:
        return 0
    if r.get("maxUnavailable") is None:
        raise IntOrStringError("nil value for IntOrString")
    return scaled_value(r.get("maxUnavailable"), number_to_schedule, True)


def allows_surge(ds: Obj) -> bool:
    """AllowsSurge: maxSurge of one node is above zero."""
    try:
        return surge_count(ds, 1) > 0
    except IntOrStringError:
        return False


def creation_order(pod: Obj) -> tuple[int, float, str]:
    """podByCreationTimestampAndPhase: scheduled pods first, then oldest, then by name."""
    t = creation_time(pod)
    return (0 if node_name(pod) else 1, float("-inf") if t is None else t, name(pod))


def nodes_to_pods(pods: Sequence[Obj], include_deleted_terminal: bool = False) -> dict[str, list[Obj]]:
    """getNodesToDaemonPods over claimed pods: by target node; a terminal pod being deleted is
    left out unless asked (kubelet or pod GC finishes it; the controller has nothing to do)."""
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        if not include_deleted_terminal and is_terminal(pod) and being_deleted(pod):
            continue
        target = placement.target_node_name(pod)
        if target is None:
            continue
        out.setdefault(target, []).append(pod)
    return out


def failed_pods_backoff_key(ds: Obj, node: str) -> str:
    return f"{uid(ds)}/{int_field(status(ds).get('observedGeneration'))}/{node}"


# ---- manage -----------------------------------------------------------------------------


@dataclass(slots=True)
class _NodeWork:
    needing: list[str] = field(default_factory=list)  # nodes to create a pod on
    delete: list[Obj] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    backoff_next: list[str] = field(default_factory=list)
    requeue: list[float] = field(default_factory=list)


def pods_should_be_on_node(
    ds: Obj, node: Obj, node_pods: Mapping[str, Sequence[Obj]], hash_: str, now: float,
    backoff: BackoffView | None, work: _NodeWork,
) -> None:
    """podsShouldBeOnNode: create where a pod should run and none exists; where pods may stay,
    delete failed (with back-off) and succeeded ones and the excess (the oldest stays; with surge,
    an old and a new pod while the new one is not available yet); elsewhere delete them all."""
    should_run, should_continue = placement.should_run(node, ds)
    nname = name(node)
    daemon_pods = node_pods.get(nname)
    ref = ObjectRef.of(ds, API_VERSION, KIND)
    if should_run and daemon_pods is None:
        work.needing.append(nname)
        return
    if should_continue:
        running: list[Obj] = []
        for pod in daemon_pods or []:
            if being_deleted(pod):
                continue
            if phase(pod) == "Failed":
                # the controller and a kubelet that rejects the pod fight here: back off per node
                bkey = failed_pods_backoff_key(ds, nname)
                if backoff is not None and backoff.in_backoff_since_update(bkey, now):
                    work.requeue.append(backoff.get(bkey))
                    continue
                work.backoff_next.append(bkey)
                work.events.append(Event(ref, "Warning", "FailedDaemonPod",
                                         f"Found failed daemon pod {namespace(pod)}/{name(pod)} on node {nname}, "
                                         "will try to kill it"))
                work.delete.append(pod)
            elif phase(pod) == "Succeeded":
                work.events.append(Event(ref, "Normal", "SucceededDaemonPod",
                                         f"Found succeeded daemon pod {namespace(pod)}/{name(pod)} on node {nname}, "
                                         "will try to delete it"))
                work.delete.append(pod)
            else:
                running.append(pod)
        running.sort(key=creation_order)
        if not allows_surge(ds):
            work.delete.extend(running[1:])
            return
        if len(running) <= 1:
            if not running and should_run:  # surging: at least one pod not being deleted
                work.needing.append(nname)
            return
        oldest_new: Obj | None = None
        oldest_old: Obj | None = None
        for pod in running:
            if labels(pod).get(HASH_LABEL) == hash_:
                if oldest_new is None:
                    oldest_new = pod
                    continue
            elif oldest_old is None:
                oldest_old = pod
                continue
            work.delete.append(pod)
        if oldest_new is not None and oldest_old is not None:
            mrs = int_field(spec(ds).get("minReadySeconds"))
            if not is_ready(oldest_old) or is_available(oldest_new, mrs, now):
                work.delete.append(oldest_old)
        return
    if daemon_pods:
        work.delete.extend(p for p in daemon_pods if not being_deleted(p))


def unscheduled_pods_without_node(nodes: Sequence[Obj], node_pods: Mapping[str, Sequence[Obj]]) -> list[Obj]:
    """getUnscheduledPodsWithoutNode: pending pods pinned to a node that no longer exists (the pod
    GC never sees them: they have no spec.nodeName)."""
    present = {name(n) for n in nodes}
    return [p for n, pods in node_pods.items() if n not in present for p in pods if not node_name(p)]


# ---- rolling update ---------------------------------------------------------------------


def _find_updated_pods_on_node(pods: Sequence[Obj], hash_: str, gen: int | None) -> tuple[Obj | None, Obj | None, bool]:
    """findUpdatedPodsOnNode: (new, old, ok) over pods not being deleted; not ok with two of a kind."""
    new: Obj | None = None
    old: Obj | None = None
    for pod in pods:
        if being_deleted(pod):
            continue
        if is_pod_updated(pod, hash_, gen):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


def desired_node_counts(
    ds: Obj, nodes: Sequence[Obj], node_pods: dict[str, list[Obj]]
) -> tuple[int, int, int]:
    """updatedDesiredNodeCounts: (maxSurge, maxUnavailable, desiredNumberScheduled); every node
    that should run a pod gets an entry in `node_pods` (an empty one: it counts as unavailable).
    A configuration allowing neither surge nor unavailability gets maxUnavailable 1."""
    desired = 0
    for node in nodes:
        if placement.should_run(node, ds)[0]:
            desired += 1
            node_pods.setdefault(name(node), [])
    max_unavailable = unavailable_count(ds, desired)
    max_surge = surge_count(ds, desired)
    if desired > 0 and max_unavailable == 0 and max_surge == 0:
        max_unavailable = 1
    return max_surge, max_unavailable, desired


def _ordered(nodes: Sequence[Obj], node_pods: Mapping[str, list[Obj]]) -> list[str]:
    listed = [name(n) for n in nodes if name(n) in node_pods]
    seen = set(listed)
    return listed + sorted(n for n in node_pods if n not in seen)


def rolling_update(
    ds: Obj, nodes: Sequence[Obj], node_pods_in: Mapping[str, list[Obj]], hash_: str, now: float
) -> tuple[list[Obj], list[str]]:
    """rollingUpdate: (old pods to delete, nodes to create a new pod on).

    Without surge, delete old available pods while the unavailable nodes (no pod, a new pod not
    yet available, an old unavailable pod, a pod being deleted) stay within maxUnavailable; the
    manage pass recreates them. With surge, create a new pod beside an old one on up to maxSurge
    nodes, delete the old one once the new one is available; nodes that fell out of the
    placement lose their pods only as other nodes' pods become available. Raises
    IntOrStringError on an invalid maxSurge/maxUnavailable, KeyError on a node missing.
    """
    node_pods = {k: list(v) for k, v in node_pods_in.items()}
    max_surge, max_unavailable, desired = desired_node_counts(ds, nodes, node_pods)
    mrs = int_field(spec(ds).get("minReadySeconds"))
    gen = template_generation(ds)
    order = _ordered(nodes, node_pods)

    def available(p: Obj) -> bool:
        return is_available(p, mrs, now)

    if max_surge == 0:
        num_unavailable = 0
        replacements: list[Obj] = []
        candidates: list[Obj] = []
        for nname in order:
            new, old, ok = _find_updated_pods_on_node(node_pods[nname], hash_, gen)
            if not ok:  # the manage pass prunes the excess first
                num_unavailable += 1
                continue
            if (old is None) == (new is None):
                num_unavailable += 1
            elif new is not None:
                if not available(new):
                    num_unavailable += 1
            elif old is not None:
                if not available(old):
                    replacements.append(old)
                    num_unavailable += 1
                elif num_unavailable < max_unavailable:
                    candidates.append(old)
        remaining = min(max(max_unavailable - num_unavailable, 0), len(candidates))
        return replacements + candidates[:remaining], []

    by_name = {name(n): n for n in nodes}
    to_delete: list[Obj] = []
    should_not_run: list[Obj] = []
    candidate_nodes: list[str] = []
    allowed_nodes: list[str] = []
    num_surge = num_available = 0
    for nname in order:
        new, old, ok = _find_updated_pods_on_node(node_pods[nname], hash_, gen)
        if not ok:
            num_surge += 1
            continue
        if old is not None:
            num_available += available(old)
        elif new is not None:
            num_available += available(new)
        if old is None:
            continue
        if new is None:
            node = by_name[nname]
            runs = placement.should_run(node, ds)[0]
            if not available(old):
                if not runs:
                    to_delete.append(old)
                    continue
                allowed_nodes.append(nname)
            else:
                if not runs:
                    should_not_run.append(old)
                    continue
                if num_surge >= max_surge:
                    continue
                candidate_nodes.append(nname)
            continue
        if not available(new):
            num_surge += 1
            continue
        to_delete.append(old)
    # with surge the owner expects full availability: a pod on a node that left the placement
    # goes only as pods elsewhere become available
    deletable = min(num_available - desired, len(should_not_run))
    if deletable > 0:
        to_delete.extend(should_not_run[:deletable])
    remaining = min(max(max_surge - num_surge, 0), len(candidate_nodes))
    return to_delete, allowed_nodes + candidate_nodes[:remaining]


# ---- syncNodes --------------------------------------------------------------------------


def daemon_pod_template(ds: Obj, hash_: str) -> dict[str, Any]:
    """CreatePodTemplate: the template with the daemon tolerations, the hash label and (legacy)
    the template generation label."""
    template = copy.deepcopy(dict(spec(ds).get("template") or {}))
    template["spec"] = placement.add_daemon_tolerations(template.get("spec") or {})
    meta = template.setdefault("metadata", {})
    lbls = dict(meta.get("labels") or {})
    gen = template_generation(ds)
    if gen is not None:
        lbls[TEMPLATE_GENERATION_LABEL] = str(gen)
    if hash_:
        lbls[HASH_LABEL] = hash_
    meta["labels"] = lbls
    return template


def new_daemon_pod(ds: Obj, node: str, hash_: str) -> dict[str, Any]:
    """The pod syncNodes creates for `node`: pinned by node affinity, the scheduler binds it."""
    pod = pod_from_template(daemon_pod_template(ds, hash_), ds, new_controller_ref(ds, API_VERSION, KIND))
    pod["spec"]["affinity"] = placement.pin_to_node(pod["spec"].get("affinity"), node)
    return pod


# ---- status -----------------------------------------------------------------------------


def calculate_status(ds: Obj, nodes: Sequence[Obj], node_pods: Mapping[str, Sequence[Obj]], hash_: str,
                     now: float) -> dict[str, int]:
    """updateDaemonSetStatus's counts: per node that should run a pod, its oldest pod decides
    ready, available and updated; a pod on a node that should not run one is misscheduled."""
    mrs = int_field(spec(ds).get("minReadySeconds"))
    gen = template_generation(ds)
    desired = current = miss = ready = updated = available = 0
    for node in nodes:
        run = placement.should_run(node, ds)[0]
        pods = node_pods.get(name(node)) or []
        if run:
            desired += 1
            if not pods:
                continue
            current += 1
            pod = min(pods, key=creation_order)
            if is_ready(pod):
                ready += 1
                if is_available(pod, mrs, now):
                    available += 1
            if is_pod_updated(pod, hash_, gen):
                updated += 1
        elif pods:
            miss += 1
    return {
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberMisscheduled": miss,
        "numberReady": ready,
        "updatedNumberScheduled": updated,
        "numberAvailable": available,
        "numberUnavailable": desired - available,
    }


def status_plan(ds: Obj, nodes: Sequence[Obj], node_pods: Mapping[str, Sequence[Obj]], hash_: str, now: float,
                update_observed_generation: bool) -> Plan:
    """storeDaemonSetStatus (no write when every count is the same and observedGeneration is
    current) and the requeue after minReadySeconds while a ready pod is not yet available."""
    plan = Plan()
    counts = calculate_status(ds, nodes, node_pods, hash_, now)
    st = status(ds)
    same = all(int_field(st.get(k)) == v for k, v in counts.items())
    if not same or int_field(st.get("observedGeneration")) < generation(ds):
        obj = copy.deepcopy(dict(ds))
        new_status = dict(obj.get("status") or {})
        new_status.update(counts)
        if update_observed_generation:
            new_status["observedGeneration"] = generation(ds)
        obj["status"] = new_status
        if resource_version(ds):
            obj["metadata"]["resourceVersion"] = resource_version(ds)
        plan.add(UpdateStatus(obj))
    mrs = int_field(spec(ds).get("minReadySeconds"))
    if mrs > 0 and counts["numberReady"] != counts["numberAvailable"]:
        plan.requeue(float(mrs))
    return plan


# ---- syncDaemonSet ----------------------------------------------------------------------


@dataclass(slots=True)
class DaemonSetSync:
    plan: Plan = field(default_factory=Plan)
    status: Plan = field(default_factory=Plan)
    hash: str = ""
    claimed: list[Obj] = field(default_factory=list)
    expect_creations: int = 0
    expect_deletions: list[str] = field(default_factory=list)  # pod keys
    backoff_next: list[str] = field(default_factory=list)
    error: str | None = None  # the sync fails (requeue rate-limited) after running what it has


def sync(
    ds: Obj,
    nodes: Sequence[Obj],
    pods: Sequence[Obj],
    revisions: Sequence[Obj] = (),
    *,
    now: float,
    satisfied: bool = True,
    backoff: BackoffView | None = None,
    burst: int = BURST_REPLICAS,
) -> DaemonSetSync:
    out = DaemonSetSync()
    plan = out.plan
    ref = ObjectRef.of(ds, API_VERSION, KIND)
    if selectors.is_empty(spec(ds).get("selector")):
        plan.add(Event(ref, "Warning", "SelectingAll",
                       "This daemon set is selecting all pods. A non-empty selector is required."))
        return out
    if being_deleted(ds):  # its history may be gone already: no status either
        return out
    result = ownership.claim(ds, API_VERSION, KIND, spec(ds).get("selector"), pods)
    plan.actions.extend(ownership.claim_actions(ds, API_VERSION, KIND, result, "v1", "Pod"))
    out.claimed = result.claimed
    hist = history.construct(ds, revisions, result.claimed)
    plan.actions.extend(hist.actions)
    if hist.collision:
        bumped = copy.deepcopy(dict(ds))
        st = dict(bumped.get("status") or {})
        st["collisionCount"] = int_field(st.get("collisionCount")) + 1
        bumped["status"] = st
        plan.add(UpdateStatus(bumped, reason="HashCollision"))
        out.error = "hash collision: a ControllerRevision of another template has this name"
        return out
    out.hash = hist.hash
    node_pods = nodes_to_pods(result.claimed)
    if not satisfied:
        out.status = status_plan(ds, nodes, node_pods, out.hash, now, False)
        return out

    work = _NodeWork()
    for node in nodes:
        pods_should_be_on_node(ds, node, node_pods, out.hash, now, backoff, work)
    work.delete.extend(unscheduled_pods_without_node(nodes, node_pods))
    plan.actions.extend(work.events)
    out.backoff_next = work.backoff_next
    for delay in work.requeue:
        plan.requeue(delay)
    needing, to_delete = work.needing, work.delete
    if not needing and not to_delete and _rolling(ds) is not None:
        # expectations set to zero by manage are satisfied: the rolling update runs in this sync
        try:
            to_delete, needing = rolling_update(ds, nodes, node_pods, out.hash, now)
        except (IntOrStringError, KeyError) as e:
            out.error = f"couldn't get unavailable numbers: {e}"
    _sync_nodes(ds, out, to_delete, needing, burst)
    if out.error is None:
        live = [p for ps in nodes_to_pods(result.claimed, True).values() for p in ps]
        plan.actions.extend(history.cleanup(ds, hist.old, live))
    out.status = status_plan(ds, nodes, node_pods, out.hash, now, True)
    return out


def _sync_nodes(ds: Obj, out: DaemonSetSync, to_delete: list[Obj], needing: list[str], burst: int) -> None:
    """syncNodes: at most `burst` creates (slow start) and deletes, expected before they run."""
    needing, to_delete = needing[:burst], to_delete[:burst]
    if needing:
        out.plan.add(SlowStart(tuple(Create(new_daemon_pod(ds, n, out.hash), reason="SuccessfulCreate")
                                     for n in needing)))
    for pod in to_delete:
        out.plan.add(Delete(ObjectRef.of(pod, "v1", "Pod"), reason="SuccessfulDelete"))
    out.expect_creations = len(needing)
    out.expect_deletions = [key(p) for p in to_delete]
