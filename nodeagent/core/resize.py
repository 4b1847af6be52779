"""In-place pod resize (KEP-1287), the agent's decision as a pure function, and the API's checks.

The agent holds four sets of resources per container: desired (the pod spec, changed through the
pods/resize subresource), allocated (what it admitted: its checkpoint, reported as
containerStatuses[].allocatedResources), acknowledged (what it passed to the cgroups) and actual
(what the cgroups say: containerStatuses[].resources). `decide` is the kubelet's admission of a
resize (pkg/kubelet/allocation/allocation_manager.go canResizePod and handlePodResourcesResize):
- nothing to do when desired equals allocated;
- Infeasible (never retried until the spec changes): a static pod; a Guaranteed pod with the static
  CPU manager and a CPU change, or with the static memory manager; a QoS class that would change
  (the API refuses these, the agent too, should one get through); requests above the node's
  allocatable ("Node didn't have enough capacity: memory, requested: N, capacity: N", cpu in
  millicores);
- Deferred (retried whenever a pod is added, resized or removed, higher priority, then higher QoS,
  then older requests first: `retry_order`): it fits allocatable but not next to the other pods'
  allocations ("Node didn't have enough resource: cpu, requested: N, used: N, capacity: N");
- else accepted: allocated becomes desired, and per container the changes to apply live, or by a
  restart where the resource's resizePolicy says RestartContainer (RestartContainer wins over
  NotRequired/PreferNoRestart when both resources change). A memory limit decrease applied live is
  skipped while the container's usage is above the new limit (best-effort OOM avoidance, 1.35):
  PodResizeInProgress stays with reason Error and a message with both figures.

`conditions` gives PodResizePending (Deferred | Infeasible) and PodResizeInProgress ("" | Error) as
the agent writes them. Quantities are integers: CPU in millicores, memory in bytes
(`resources_of` turns a parsed container into them).

Here in core because both rooms need it: the agent decides and actuates resizes
(nodeagent.agent.pods.resize), the control plane's autoscalers and scheduler reason about them
(nodeagent.cluster.autoscaling.resize re-exports this and adds the scheduler's accounting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from nodeagent.core.errors import FieldError
from nodeagent.core.model import Container
from nodeagent.core.quantity import Quantity

Outcome = Literal["none", "accepted", "deferred", "infeasible"]
QOS = Literal["Guaranteed", "Burstable", "BestEffort"]
RESIZABLE = ("cpu", "memory")
NOT_REQUIRED = "NotRequired"
PREFER_NO_RESTART = "PreferNoRestart"
RESTART_CONTAINER = "RestartContainer"
PENDING = "PodResizePending"
IN_PROGRESS = "PodResizeInProgress"
QOS_CHANGE_MESSAGE = "Pod QOS Class may not change as a result of resizing"


@dataclass(frozen=True, slots=True)
class Resources:
    """One container's requests and limits (cpu millicores, memory bytes) and its resizePolicy."""

    name: str
    requests: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    resize_policy: Mapping[str, str] = field(default_factory=dict)  # resource -> restartPolicy

    def restart_policy(self, resource: str) -> str:
        return self.resize_policy.get(resource, NOT_REQUIRED)


def qos_class(containers: Sequence[Resources]) -> QOS:
    """GetPodQOS over plain values (the same rules as nodeagent.core.qos.qos_class)."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for c in containers:
        for r in RESIZABLE:
            if c.requests.get(r, 0) > 0:
                requests[r] = requests.get(r, 0) + c.requests[r]
        found = {r for r in RESIZABLE if c.limits.get(r, 0) > 0}
        for r in found:
            limits[r] = limits.get(r, 0) + c.limits[r]
        if found != set(RESIZABLE):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and len(requests) == len(limits) and all(limits.get(r) == v for r, v in requests.items()):
        return "Guaranteed"
    return "Burstable"


def _sum(containers: Sequence[Resources], resource: str) -> int:
    return sum(c.requests.get(resource, 0) for c in containers)


@dataclass(frozen=True, slots=True)
class Node:
    allocatable_cpu: int  # millicores
    allocatable_memory: int  # bytes
    static_cpu_manager: bool = False
    static_memory_manager: bool = False


@dataclass(frozen=True, slots=True)
class ContainerAction:
    """What the agent does to one container for an accepted resize."""

    name: str
    live: Mapping[str, tuple[int | None, int | None]]  # resource -> (new request, new limit), written to cgroups
    restart: bool = False  # a resource with RestartContainer changed: restart the container with the new values
    skipped: str = ""  # why a live memory limit decrease is held back (usage above the new limit)


@dataclass(frozen=True, slots=True)
class ResizeDecision:
    outcome: Outcome
    reason: str = ""  # "Infeasible" | "Deferred" | "" (for PodResizePending)
    message: str = ""
    allocated: tuple[Resources, ...] = ()  # the allocation to checkpoint
    actions: tuple[ContainerAction, ...] = ()


def _changed(a: Resources, b: Resources, resource: str) -> bool:
    return a.requests.get(resource) != b.requests.get(resource) or a.limits.get(resource) != b.limits.get(resource)


def memory_decrease_held(what: str, old_limit: int | None, new_limit: int | None, usage: int | None) -> str:
    """Why a memory limit decrease is held back (usage above the new limit: cgroup v1 refuses the
    write, v2 would OOM-kill), or "" when it may be written. `what` names the cgroup ("container
    app", "pod"); None limits are unlimited, a None usage is unknown (not held)."""
    decreasing = new_limit is not None and (old_limit is None or new_limit < old_limit)
    if not decreasing or usage is None or new_limit is None or usage <= new_limit:
        return ""
    return (
        f"{what}: memory usage {usage} is above the desired memory limit {new_limit}; "
        f"the limit is not lowered until usage falls below it"
    )


def decide(
    desired: Sequence[Resources],
    allocated: Sequence[Resources],
    node: Node,
    others: Sequence[Mapping[str, int]],
    *,
    qos: QOS | None = None,
    static_pod: bool = False,
    memory_usage: Mapping[str, int] | None = None,
) -> ResizeDecision:
    """The agent's answer to a resize (see the module docstring).

    `desired` is the pod spec's containers (and sidecars), `allocated` the agent's checkpoint, `others`
    the allocated requests ({"cpu": m, "memory": b}) of the node's other pods, `qos` the pod's class
    as admitted (status.qosClass; computed from `allocated` when not given), `memory_usage` the
    containers' working sets for the memory-limit-decrease check.
    """
    by_name = {c.name: c for c in allocated}
    if all(c.name in by_name and not any(_changed(c, by_name[c.name], r) for r in RESIZABLE) for c in desired):
        return ResizeDecision("none", allocated=tuple(allocated))
    keep = tuple(allocated)
    if static_pod:
        return ResizeDecision("infeasible", "Infeasible", "In-place resize of static-pods is not supported", keep)
    admitted_qos = qos or qos_class(allocated)
    if qos_class(desired) != admitted_qos:
        return ResizeDecision("infeasible", "Infeasible", QOS_CHANGE_MESSAGE, keep)
    if admitted_qos == "Guaranteed":
        cpu_changes = any(c.name in by_name and _changed(c, by_name[c.name], "cpu") for c in desired)
        if node.static_cpu_manager and cpu_changes:
            return ResizeDecision(
                "infeasible",
                "Infeasible",
                'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"',
                keep,
            )
        if node.static_memory_manager:
            return ResizeDecision(
                "infeasible",
                "Infeasible",
                'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"',
                keep,
            )
    cpu, memory = _sum(desired, "cpu"), _sum(desired, "memory")
    if memory > node.allocatable_memory:
        return ResizeDecision(
            "infeasible",
            "Infeasible",
            f"Node didn't have enough capacity: memory, requested: {memory}, capacity: {node.allocatable_memory}",
            keep,
        )
    if cpu > node.allocatable_cpu:
        return ResizeDecision(
            "infeasible",
            "Infeasible",
            f"Node didn't have enough capacity: cpu, requested: {cpu}, capacity: {node.allocatable_cpu}",
            keep,
        )
    used_cpu = sum(o.get("cpu", 0) for o in others)
    used_memory = sum(o.get("memory", 0) for o in others)
    for resource, requested, used, capacity in (
        ("cpu", cpu, used_cpu, node.allocatable_cpu),
        ("memory", memory, used_memory, node.allocatable_memory),
    ):
        if requested + used > capacity:
            return ResizeDecision(
                "deferred",
                "Deferred",
                f"Node didn't have enough resource: {resource}, requested: "
                f"{requested}, used: {used}, capacity: {capacity}",
                keep,
            )
    actions = []
    for c in desired:
        old = by_name.get(c.name, Resources(c.name))
        changed = [r for r in RESIZABLE if _changed(c, old, r)]
        if not changed:
            continue
        restart = any(c.restart_policy(r) == RESTART_CONTAINER for r in changed)
        skipped = ""
        if not restart and "memory" in changed and memory_usage is not None:
            skipped = memory_decrease_held(
                f"container {c.name}", old.limits.get("memory"), c.limits.get("memory"), memory_usage.get(c.name)
            )
        live = (
            {}
            if restart
            else {r: (c.requests.get(r), c.limits.get(r)) for r in changed if not (skipped and r == "memory")}
        )
        actions.append(ContainerAction(c.name, live, restart, skipped))
    return ResizeDecision("accepted", allocated=tuple(desired), actions=tuple(actions))


def conditions(
    decision: ResizeDecision | None,
    allocated: Sequence[Resources],
    actual: Sequence[Resources],
    now_rfc3339: str,
    previous: Sequence[Mapping[str, str]] = (),
    error: str = "",
) -> list[dict[str, str]]:
    """The pod's resize conditions after a decision (None: no new resize) and what the cgroups show.

    PodResizePending while a resize is Deferred or Infeasible; PodResizeInProgress while allocated
    and actual differ, with reason Error and the message when an actuation failed or was held back.
    A condition keeps its lastTransitionTime while present.
    """
    out: list[dict[str, str]] = []
    before = {c.get("type"): c for c in previous}

    def put(kind: str, reason: str, message: str) -> None:
        cond = {
            "type": kind,
            "status": "True",
            "lastTransitionTime": before.get(kind, {}).get("lastTransitionTime", now_rfc3339),
        }
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        out.append(cond)

    if decision is not None and decision.outcome in ("deferred", "infeasible"):
        put(PENDING, decision.reason, decision.message)
    elif decision is None and PENDING in before:
        prev = before[PENDING]
        put(PENDING, prev.get("reason", ""), prev.get("message", ""))
    held = error or (" ".join(a.skipped for a in decision.actions if a.skipped) if decision is not None else "")
    actual_by_name = {c.name: c for c in actual}
    differs = any(
        c.name in actual_by_name and any(_changed(c, actual_by_name[c.name], r) for r in RESIZABLE) for c in allocated
    )
    if held:
        put(IN_PROGRESS, "Error", held)
    elif differs:
        put(IN_PROGRESS, "", "")
    return out


@dataclass(frozen=True, slots=True)
class PendingResize:
    pod: str
    priority: int
    qos: QOS
    requested_at: float


_QOS_RANK = {"Guaranteed": 0, "Burstable": 1, "BestEffort": 2}


def retry_order(pending: Sequence[PendingResize]) -> list[PendingResize]:
    """Deferred resizes are retried by priority (high first), then QoS class, then age (oldest first)."""
    return sorted(pending, key=lambda p: (-p.priority, _QOS_RANK[p.qos], p.requested_at, p.pod))


def resource_change_errors(old: Sequence[Resources], new: Sequence[Resources], path: str) -> list[FieldError]:
    """One list of containers (`path`, e.g. "spec.containers"): none added or removed, and only
    cpu and memory changed (requests and limits)."""
    errors: list[FieldError] = []
    old_by_name = {c.name: c for c in old}
    if {c.name for c in new} != set(old_by_name):
        errors.append(FieldError(path, "Forbidden: containers may not be added or removed by a resize"))
        return errors
    for i, c in enumerate(new):
        o = old_by_name[c.name]
        for kind in ("requests", "limits"):
            a, b = getattr(o, kind), getattr(c, kind)
            for r in sorted(set(a) | set(b)):
                if r not in RESIZABLE and a.get(r) != b.get(r):
                    errors.append(
                        FieldError(
                            f"{path}[{i}].resources.{kind}[{r}]",
                            "Forbidden: only cpu and memory resources are mutable",
                        )
                    )
    return errors


def validate_resize(
    old: Sequence[Resources], new: Sequence[Resources], old_qos: QOS | None = None, path: str = "spec"
) -> list[FieldError]:
    """The API server's checks on pods/resize: only cpu and memory may change, the QoS class may not."""
    errors = resource_change_errors(old, new, f"{path}.containers")
    if errors and errors[0].path == f"{path}.containers":
        return errors
    new_qos = qos_class(new)
    if new_qos != (old_qos or qos_class(old)):
        errors.append(FieldError(path, f'Invalid value: "{new_qos}": {QOS_CHANGE_MESSAGE}'))
    return errors


def _amount(resource: str, q: Quantity) -> int:
    return q.milli_value() if resource == "cpu" else q.value()


def resources_of(c: Container) -> Resources:
    """A parsed container's requests and limits as integers (cpu in millicores, the rest in whole
    units) and its resizePolicy."""
    return Resources(
        c.name,
        {r: _amount(r, q) for r, q in c.resources.requests.items()},
        {r: _amount(r, q) for r, q in c.resources.limits.items()},
        {p.resource_name: p.restart_policy for p in c.resize_policy},
    )
