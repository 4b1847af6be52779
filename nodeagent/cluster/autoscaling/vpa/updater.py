"""The VPA updater's decisions for one VPA and its pods (vertical-pod-autoscaler/pkg/updater).

Modes: Off and Initial never touch running pods (Initial acts at admission only, vpa.admission);
Recreate (and the deprecated Auto) evicts; InPlaceOrRecreate resizes in place and falls back to
eviction.

Which pods want an update (priority/update_priority_calculator.go): with the recommendation capped
for the pod, a pod is a candidate when some container's request is outside [lowerBound, upperBound]
or has no request, or a container was OOM-killed less than 10 min after it started (quick OOM, if
that changes anything), or, for a pod running 12 h or more, when the relative difference between
its total requests and the recommended totals, summed over resources, is at least 10% (the update
threshold). Candidates go by priority: pods that grow first, then the larger difference.

Who may be disrupted (restriction/): pods are grouped by their controlling owner; a group with fewer
live pods than min-replicas (2, or updatePolicy.minReplicas) is left alone; within a group at most
int(configured * 0.5) pods may be down at once (but one, when the tolerance rounds to zero and all
configured replicas run). Pending pods may always be evicted. Evictions also go through the
PodDisruptionBudgets: `pdb_allowed` gives each budget's disruptionsAllowed, and a pod whose budget is
spent is not evicted (the API would answer 429).

InPlaceOrRecreate (restriction/pods_inplace_restriction.go): a pod with no resize under way is
resized in place when its group allows a disruption; a pod whose resize is pending or in progress
is evicted instead once the resize is Infeasible, Deferred for more than 5 min, InProgress for more
than 1 h, or failed with an Error; and a resize that would change the pod's QoS class is not sent
(the API refuses it) but evicted, so the replacement is admitted with the new resources.
Deviation: evictionRequirements and the updater's rate limiters are not modelled.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nodeagent.cluster.autoscaling.resize import IN_PROGRESS, PENDING, Resources, qos_class
from nodeagent.cluster.autoscaling.vpa.policy import (
    cap_for_pod,
    container_requests_and_limits,
    parse_recommendation,
    pod_resources,
)
from nodeagent.cluster.autoscaling.vpa.spec import VPASpec
from nodeagent.core.timefmt import parse_rfc3339

Action = Literal["none", "evict", "resize"]
DEFERRED_RESIZE_TIMEOUT = 300.0
IN_PROGRESS_RESIZE_TIMEOUT = 3600.0
EVICTED_MESSAGE = "Pod was evicted by VPA Updater to apply resource recommendation."
RESIZED_MESSAGE = "Pod was resized in place by VPA Updater."


@dataclass(frozen=True, slots=True)
class UpdaterConfig:
    """vpa-updater's flags (updater/config/config.go defaults)."""

    min_replicas: int = 2
    eviction_tolerance: float = 0.5
    update_threshold: float = 0.1
    pod_lifetime_threshold: float = 12 * 3600.0
    evict_after_oom: float = 600.0


@dataclass(frozen=True, slots=True)
class PodDecision:
    pod: str
    action: Action
    reason: str
    patch: tuple[dict[str, Any], ...] = ()  # for "resize": the JSON patch for pods/<name>/resize


@dataclass(frozen=True, slots=True)
class Plan:
    decisions: tuple[PodDecision, ...]
    in_place_attempts: dict[str, float] = field(default_factory=dict)  # pod -> when its in-place resize began


@dataclass(frozen=True, slots=True)
class Priority:
    outside_range: bool
    scale_up: bool
    resource_diff: float

    def key(self) -> tuple[bool, float]:
        return (self.scale_up, self.resource_diff)


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    m = pod.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    s = pod.get("status")
    return s if isinstance(s, Mapping) else {}


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec")
    raw = spec.get("containers") if isinstance(spec, Mapping) else None
    return [c for c in raw or [] if isinstance(c, Mapping)]


def creator(pod: Mapping[str, Any]) -> str | None:
    """The controlling owner ("Kind/name"), None for a bare pod."""
    for ref in _meta(pod).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return f"{ref.get('kind', '')}/{ref.get('name', '')}"
    return None


def _observed(pod: Mapping[str, Any]) -> set[str] | None:
    raw = (_meta(pod).get("annotations") or {}).get("vpaObservedContainers")
    if not isinstance(raw, str):
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def update_priority(pod: Mapping[str, Any], spec: VPASpec, recommendation: object) -> Priority:
    """GetUpdatePriority over the recommendation capped for this pod."""
    recs = parse_recommendation(recommendation)
    observed = _observed(pod)
    outside = scale_up = False
    total_request: dict[str, int] = {}
    total_recommended: dict[str, int] = {}
    for c in _containers(pod):
        name = str(c.get("name", ""))
        if observed is not None and name not in observed:
            continue
        rec = recs.get(name)
        if rec is None:
            continue
        capped, _ = cap_for_pod(rec, c, spec)
        requests, _ = container_requests_and_limits(c)
        for resource, recommended in capped.target.items():
            total_recommended[resource] = total_recommended.get(resource, 0) + recommended.milli_value()
            request = requests.get(resource)
            if request is None:
                scale_up = outside = True
                continue
            total_request[resource] = total_request.get(resource, 0) + request.milli_value()
            if recommended.milli_value() > request.milli_value():
                scale_up = True
            lower = capped.lower_bound.get(resource)
            upper = capped.upper_bound.get(resource)
            if (lower is not None and request < lower) or (upper is not None and request > upper):
                outside = True
    diff = 0.0
    for resource, recommended_total in total_recommended.items():
        request_total = max(float(total_request.get(resource, 0)), 1.0)
        diff += abs(request_total - recommended_total) / request_total
    return Priority(outside, scale_up, diff)


def _quick_oom(pod: Mapping[str, Any], spec: VPASpec, threshold: float) -> bool:
    observed = _observed(pod)
    for cs in _status(pod).get("containerStatuses") or []:
        if not isinstance(cs, Mapping):
            continue
        name = str(cs.get("name", ""))
        if (observed is not None and name not in observed) or spec.scaling_off(name):
            continue
        last = cs.get("lastState") or cs.get("lastTerminationState") or {}
        term = last.get("terminated") if isinstance(last, Mapping) else None
        if isinstance(term, Mapping) and term.get("reason") == "OOMKilled":
            started, finished = parse_rfc3339(term.get("startedAt")), parse_rfc3339(term.get("finishedAt"))
            if started is not None and finished is not None and finished - started < threshold:
                return True
    return False


def _resize_state(pod: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """isInPlaceUpdating: the first resize condition that is True, with its type."""
    for c in _status(pod).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") in (PENDING, IN_PROGRESS):
            return (str(c["type"]), c) if c.get("status") == "True" else None
    return None


@dataclass(slots=True)
class _Group:
    configured: int
    tolerance: int
    running: int
    evicted: int = 0
    in_place: int = 0

    def disruptable(self) -> bool:
        should_be_alive = self.configured - self.tolerance
        alive = self.running - (self.evicted + self.in_place)
        return alive > should_be_alive or (
            self.configured == self.running and self.tolerance == 0 and self.evicted == 0 and self.in_place == 0
        )


def _resources_for_qos(pod: Mapping[str, Any], new: Sequence[Any]) -> tuple[list[Resources], list[Resources]]:
    before, after = [], []
    for c, n in zip(_containers(pod), new, strict=True):
        requests, limits = container_requests_and_limits(c)
        old = Resources(
            str(c.get("name", "")),
            {r: q.milli_value() for r, q in requests.items() if r in ("cpu", "memory")},
            {r: q.milli_value() for r, q in limits.items() if r in ("cpu", "memory")},
        )
        before.append(old)
        if n is None:
            after.append(old)
            continue
        req = dict(old.requests) | {r: q.milli_value() for r, q in n.requests.items()}
        lim = dict(old.limits) | {r: q.milli_value() for r, q in n.limits.items()}
        after.append(Resources(old.name, req, lim))
    return before, after


def resize_patch(pod: Mapping[str, Any], new: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """The JSON patch for pods/resize: the new requests (and limits) of each container."""
    ops: list[dict[str, Any]] = []
    for i, (c, n) in enumerate(zip(_containers(pod), new, strict=True)):
        if n is None:
            continue
        resources = c.get("resources") if isinstance(c.get("resources"), Mapping) else None
        if resources is None:
            ops.append({"op": "add", "path": f"/spec/containers/{i}/resources", "value": {}})
            resources = {}
        for kind, values in (("requests", n.requests), ("limits", n.limits)):
            if not values:
                continue
            if not isinstance(resources.get(kind), Mapping):
                ops.append({"op": "add", "path": f"/spec/containers/{i}/resources/{kind}", "value": {}})
            for r in sorted(values):
                ops.append({"op": "add", "path": f"/spec/containers/{i}/resources/{kind}/{r}", "value": str(values[r])})
    return tuple(ops)


def plan(
    spec: VPASpec,
    recommendation: object,
    pods: Sequence[Mapping[str, Any]],
    now: float,
    config: UpdaterConfig = UpdaterConfig(),
    *,
    configured_replicas: Mapping[str, int] | None = None,
    pdb_allowed: Mapping[str, int] | None = None,
    pod_pdbs: Mapping[str, Sequence[str]] | None = None,
    in_place_attempts: Mapping[str, float] | None = None,
) -> Plan:
    """What the updater does this round for one VPA (see the module docstring)."""
    mode = spec.update_mode
    attempts = dict(in_place_attempts or {})
    names = [str(_meta(p).get("name", "")) for p in pods]
    if mode in ("Off", "Initial"):
        return Plan(
            tuple(PodDecision(n, "none", f"updateMode {mode} does not update running pods") for n in names), attempts
        )
    if not isinstance(recommendation, Mapping) or not parse_recommendation(recommendation):
        return Plan(tuple(PodDecision(n, "none", "no recommendation yet") for n in names), attempts)
    live = [
        p
        for p in pods
        if _meta(p).get("deletionTimestamp") is None and _status(p).get("phase") not in ("Succeeded", "Failed")
    ]
    decisions: dict[str, PodDecision] = {n: PodDecision(n, "none", "not live (deleted or finished)") for n in names}

    # groups of replicas
    by_creator: dict[str, list[Mapping[str, Any]]] = {}
    for p in live:
        key = creator(p)
        name = str(_meta(p).get("name", ""))
        if key is None:
            decisions[name] = PodDecision(name, "none", "not managed by a controller: VPA does not disrupt it")
            continue
        by_creator.setdefault(key, []).append(p)
    required = spec.min_replicas or config.min_replicas
    groups: dict[str, _Group] = {}
    pod_group: dict[str, str] = {}
    for key, members in by_creator.items():
        if len(members) < required:
            for p in members:
                name = str(_meta(p).get("name", ""))
                decisions[name] = PodDecision(
                    name, "none", f"too few replicas: {len(members)} live, {required} required"
                )
            continue
        configured = (configured_replicas or {}).get(key, len(members))
        pending = sum(1 for p in members if _status(p).get("phase") == "Pending")
        groups[key] = _Group(configured, int(configured * config.eviction_tolerance), len(members) - pending)
        for p in members:
            pod_group[str(_meta(p).get("name", ""))] = key

    # candidates, by priority
    candidates: list[tuple[Priority, Mapping[str, Any]]] = []
    for p in live:
        name = str(_meta(p).get("name", ""))
        if name not in pod_group:
            continue
        priority = update_priority(p, spec, recommendation)
        quick_oom = _quick_oom(p, spec, config.evict_after_oom)
        if not priority.outside_range and not quick_oom:
            start = parse_rfc3339(_status(p).get("startTime"))
            if start is None:
                decisions[name] = PodDecision(name, "none", "missing status.startTime")
                continue
            if now < start + config.pod_lifetime_threshold:
                decisions[name] = PodDecision(name, "none", "short-lived pod, requests within the recommended range")
                continue
            if priority.resource_diff < config.update_threshold:
                decisions[name] = PodDecision(name, "none", "resource difference below the update threshold")
                continue
        if quick_oom and priority.resource_diff == 0:
            decisions[name] = PodDecision(name, "none", "quick OOM, but the resources would not change")
            continue
        candidates.append((priority, p))
        decisions[name] = PodDecision(name, "none", "no disruption allowed now")
    candidates.sort(key=lambda c: c[0].key(), reverse=True)

    budgets = dict(pdb_allowed or {})

    def evict(p: Mapping[str, Any], why: str) -> None:
        name = str(_meta(p).get("name", ""))
        group = groups[pod_group[name]]
        pending = _status(p).get("phase") == "Pending"
        state = _resize_state(p)
        if not pending:
            if state is not None:
                first = attempts.setdefault(name, now)
                if not (group.disruptable() and _resize_stalled(state, first, now)):
                    decisions[name] = PodDecision(name, "none", "in-place resize under way")
                    return
            elif not group.disruptable():
                decisions[name] = PodDecision(name, "none", "eviction would take the group below its availability")
                return
        blocking = [b for b in (pod_pdbs or {}).get(name, ()) if budgets.get(b, 1) <= 0]
        if blocking:
            decisions[name] = PodDecision(
                name,
                "none",
                f"Cannot evict pod as it would violate the pod's disruption budget. ({', '.join(blocking)})",
            )
            return
        for b in (pod_pdbs or {}).get(name, ()):
            if b in budgets:
                budgets[b] -= 1
        if not pending:
            group.evicted += 1
        attempts.pop(name, None)
        decisions[name] = PodDecision(name, "evict", f"{EVICTED_MESSAGE} ({why})")

    if mode in ("Recreate", "Auto"):
        for _, p in candidates:
            evict(p, "Recreate")
        return Plan(tuple(decisions[n] for n in names), attempts)

    # InPlaceOrRecreate
    for _, p in candidates:
        name = str(_meta(p).get("name", ""))
        group = groups[pod_group[name]]
        if _status(p).get("phase") == "Pending":
            decisions[name] = PodDecision(name, "none", "pending: in-place update deferred")
            continue
        state = _resize_state(p)
        if state is not None:
            first = attempts.setdefault(name, now)
            if group.disruptable() and _resize_stalled(state, first, now):
                evict(p, f"in-place resize {state[1].get('reason') or 'in progress'} too long or failed")
            else:
                decisions[name] = PodDecision(name, "none", "in-place resize under way")
            continue
        if not group.disruptable():
            decisions[name] = PodDecision(name, "none", "in-place update deferred: the group is at its availability")
            continue
        new = pod_resources(p, spec, recommendation)
        before, after = _resources_for_qos(p, new)
        admitted = _status(p).get("qosClass")
        if qos_class(after) != (
            admitted if admitted in ("Guaranteed", "Burstable", "BestEffort") else qos_class(before)
        ):
            evict(p, "the resize would change the QoS class")
            continue
        patch = resize_patch(p, new)
        if not patch:
            decisions[name] = PodDecision(name, "none", "nothing to resize")
            continue
        group.in_place += 1
        attempts[name] = now
        decisions[name] = PodDecision(name, "resize", RESIZED_MESSAGE, patch)
    return Plan(tuple(decisions[n] for n in names), attempts)


def _resize_stalled(state: tuple[str, Mapping[str, Any]], first_attempt: float, now: float) -> bool:
    """CanEvictInPlacingPod's timeouts: Infeasible or Error at once, Deferred after 5 min, InProgress after 1 h."""
    kind, cond = state
    reason = cond.get("reason") or ""
    if kind == PENDING:
        if reason == "Deferred":
            return now - first_attempt > DEFERRED_RESIZE_TIMEOUT
        return True  # Infeasible, or a reason we do not know
    if not reason and not cond.get("message"):
        return now - first_attempt > IN_PROGRESS_RESIZE_TIMEOUT
    return True  # Error, or anything else


def apply_patch(pod: Mapping[str, Any], patch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Apply our "add" operations (tests and the simulation use it; the API server applies real patches)."""
    out = copy.deepcopy(dict(pod))
    for op in patch:
        if op.get("op") != "add":
            raise ValueError(f"only add operations are produced here, got {op!r}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        target: Any = out
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        target[parts[-1]] = copy.deepcopy(op["value"])
    return out
