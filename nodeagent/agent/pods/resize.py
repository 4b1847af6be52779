"""In-place pod resize on the agent (KEP-1287): the pods/resize subresource, admission, actuation.

As the kubelet (1.33+) does it, with the agent as its own API server:
- The patch (strategic-merge or JSON merge) is applied to the pod as its spec reads now, and only
  the containers' `resources` are taken from the result (the API server's dropNonResizeUpdates);
  only cpu and memory may change, no container may be added or removed, a regular init container
  not at all, and the pod's QoS class must stay (422 naming the field).
- Admission (nodeagent.core.resize.decide, the allocation manager's canResizePod): Infeasible when
  the pod can never fit the node's allocatable (never retried until the spec changes), Deferred
  when it does not fit next to the other pods now (retried in `retry_order` whenever a pod
  changes, and every RETRY_S), else accepted: the allocation becomes the spec.
- Durability: the pod's record (its manifest is the allocation; `resize` holds a spec that
  differs from it, what the cgroups were last given where it differs, the restarts still owed) is
  in the journal before the 200, so an agent killed right after carries the resize on.
- Actuation (kuberuntime doPodResizeAction): pod cgroup widened first, container cgroups
  updated (decreases first), pod cgroup narrowed last, all through the driver's update() on the
  running process's own cgroups: the PID stays. A memory limit decrease below the container's
  working set (or the pod's usage below its new limit) is held back, PodResizeInProgress with
  reason Error, and retried every RETRY_S; a container whose changed resource says
  RestartContainer is restarted (preStop, SIGTERM, grace) with its cgroup set while it is down.
- Status: `allocatedResources` (the allocated requests) and `resources` (what the cgroups were
  given) per container, PodResizePending (Deferred | Infeasible) and PodResizeInProgress.

A restarted agent re-creates the cgroups with, per value, the looser of the allocation and what
they were last given (never a memory limit below what either allowed), then actuates again.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.agent.pods.errors import DurabilityError
from nodeagent.agent.pods.plan import ContainerPlan, PodPlan
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.model.pod import Container, ResourceRequirements
from nodeagent.core.qos import qos_class as pod_qos_class
from nodeagent.core.resize import (
    PENDING,
    QOS_CHANGE_MESSAGE,
    Node,
    PendingResize,
    ResizeDecision,
    Resources,
    conditions,
    decide,
    memory_decrease_held,
    qos_class,
    resource_change_errors,
    resources_of,
    retry_order,
)
from nodeagent.core.resources import pod_resources
from nodeagent.core.timefmt import rfc3339
from nodeagent.core.waits import wait_for
from nodeagent.daemonkit.tasks import GuardedTasks

if TYPE_CHECKING:
    from nodeagent.agent.pods.manager import PodManager
    from nodeagent.agent.pods.worker import PodWorker

log = structlog.get_logger(__name__)

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
PATCH_TYPES = (STRATEGIC, MERGE)
RETRY_S = 5.0  # deferred resizes and held-back decreases are tried again this often (and on every pod change)
_NAMED_LISTS = ("containers", "initContainers")  # merged by name in a strategic patch


# ---- the patch (pure) ----------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge(target: Any, patch: Any, path: str = "") -> Any:
    """The strategic merge patch of a Pod as far as a resize needs it: objects merge, null deletes,
    `containers` and `initContainers` merge by name (`$patch: delete` removes one), other lists
    replace; `$setElementOrder/...` and `$retainKeys` are accepted and ignored, `$patch: replace`
    replaces an object. FieldError for another directive or a list element without a name."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(target)
    for key, value in patch.items():
        where = f"{path}.{key}" if path else key
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$"):
            raise FieldError(where, f"Unsupported value: {key!r}: not a patch directive this API knows")
        if value is None:
            out.pop(key, None)
        elif key in _NAMED_LISTS and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_named(out[key], value, where)
        else:
            out[key] = strategic_merge(out.get(key), value, where)
    return out


def _merge_named(items: list[Any], patches: list[Any], path: str) -> list[Any]:
    result = list(items)
    for i, p in enumerate(patches):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise FieldError(f"{path}[{i}].name", "Required value: a container in a patch is named")
        at = next((j for j, item in enumerate(result) if isinstance(item, dict) and item.get("name") == p["name"]),
                  None)
        if p.get("$patch") == "delete":
            if at is not None:
                del result[at]
        elif at is None:
            result.append({k: v for k, v in p.items() if k != "$patch"})
        else:
            result[at] = strategic_merge(result[at], p, f"{path}[{i}]")
    return result


def patched_pod(current: Pod, patch: Mapping[str, Any], patch_type: str) -> Pod:
    """The pod as the resize asks for it: the patch applied to `current` (its spec as it reads
    now), of which only the containers' resources (and resizePolicy) are kept. ValidationErrors or FieldError."""
    base = current.to_dict()
    merged = strategic_merge(base, patch) if patch_type == STRATEGIC else merge_patch(base, patch)
    spec = merged.get("spec") if isinstance(merged, dict) else None
    if not isinstance(spec, dict):
        raise FieldError("spec", "Required value: a resize patches the pod's spec")
    out_spec = dict(base["spec"])
    for key in _NAMED_LISTS:
        old = base["spec"].get(key, [])
        new = spec.get(key, [])
        if not isinstance(new, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in new):
            raise FieldError(f"spec.{key}", "Invalid value: must be a list of named containers")
        by_name = {c["name"]: c for c in new}
        if set(by_name) != {c["name"] for c in old} or len(by_name) != len(new):
            raise FieldError(f"spec.{key}", "Forbidden: containers may not be added or removed by a resize")
        if old:  # resizePolicy too, when the patch names it (the server's pods/resize lets it change)
            out_spec[key] = [{**c, "resources": by_name[c["name"]].get("resources") or {},
                              **({"resizePolicy": by_name[c["name"]]["resizePolicy"]}
                                 if by_name[c["name"]].get("resizePolicy") else {})} for c in old]
    return parse_pod({**base, "spec": out_spec})


def resize_errors(old: Pod, new: Pod, admitted_qos: str) -> list[FieldError]:
    """ValidatePodResize: only cpu and memory change, in app containers and sidecars; the QoS class
    the pod was admitted with stays."""
    errors = resource_change_errors([resources_of(c) for c in old.spec.containers],
                                    [resources_of(c) for c in new.spec.containers], "spec.containers")
    errors += resource_change_errors([resources_of(c) for c in old.spec.init_containers],
                                     [resources_of(c) for c in new.spec.init_containers], "spec.initContainers")
    for i, (o, n) in enumerate(zip(old.spec.init_containers, new.spec.init_containers, strict=True)):
        if not o.is_sidecar and o.resources != n.resources:
            errors.append(FieldError(f"spec.initContainers[{i}].resources",
                                     "Forbidden: resize is not supported for non-restartable init containers"))
    new_qos = pod_qos_class(new)
    if new_qos != admitted_qos:
        errors.append(FieldError("spec", f'Invalid value: "{new_qos}": {QOS_CHANGE_MESSAGE}'))
    return errors


def resizable(pod: Pod) -> list[Resources]:
    """The containers a resize weighs: the app containers and the sidecars (a regular init
    container runs alone before them and cannot be resized)."""
    return [resources_of(c) for c in (*(i for i in pod.spec.init_containers if i.is_sidecar), *pod.spec.containers)]


def node_of(allocatable: Mapping[str, Any]) -> Node:
    cpu, memory = allocatable.get("cpu"), allocatable.get("memory")
    return Node(allocatable_cpu=cpu.milli_value() if cpu is not None else 0,
                allocatable_memory=memory.value() if memory is not None else 0)


# ---- cgroup values (pure) ------------------------------------------------------------------


def _looser(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(a, b)


def widest(a: CgroupSpec, b: CgroupSpec) -> CgroupSpec:
    """Per value the looser of two specs (None is unlimited): a cgroup set to it holds what
    either allowed, so it is safe to write before moving from one to the other."""
    shares = None if a.cpu_shares is None and b.cpu_shares is None else max(a.cpu_shares or 0, b.cpu_shares or 0)
    return dataclasses.replace(b, cpu_shares=shares, cpu_quota_us=_looser(a.cpu_quota_us, b.cpu_quota_us),
                               memory_max=_looser(a.memory_max, b.memory_max),
                               memory_high=_looser(a.memory_high, b.memory_high),
                               pids_max=_looser(a.pids_max, b.pids_max))


def _narrows(a: CgroupSpec, b: CgroupSpec) -> bool:
    """b lowers a limit of a (written first: decreases go before increases)."""
    return widest(a, b) != b


def with_resources(pod: Pod, resources: Mapping[str, ResourceRequirements]) -> Pod:
    """The pod with these containers' resources (the others as they are)."""

    def swap(containers: list[Container]) -> list[Container]:
        return [c.model_copy(update={"resources": resources[c.name]}) if c.name in resources else c
                for c in containers]

    spec = pod.spec.model_copy(update={"containers": swap(pod.spec.containers),
                                       "init_containers": swap(pod.spec.init_containers)})
    return pod.model_copy(update={"spec": spec})


def container_spec(c: ContainerPlan, resources: ResourceRequirements) -> CgroupSpec:
    """The container cgroup's values for these resources (layout's one definition)."""
    values = layout.container_cgroup_spec(c.spec.model_copy(update={"resources": resources}),
                                          cpu_period_us=c.cgroup_spec.cpu_period_us)
    return dataclasses.replace(c.cgroup_spec, cpu_shares=values.cpu_shares, cpu_quota_us=values.cpu_quota_us,
                               memory_max=values.memory_max)


def pod_spec(plan: PodPlan, resources: Mapping[str, ResourceRequirements]) -> CgroupSpec:
    """The pod cgroup's values with these containers' resources (the plan's pids and period kept)."""
    values = layout.pod_cgroup_spec(plan.qos, pod_resources(with_resources(plan.pod, resources)),
                                    cpu_period_us=plan.cgroup_spec.cpu_period_us)
    return dataclasses.replace(plan.cgroup_spec, cpu_shares=values.cpu_shares, cpu_quota_us=values.cpu_quota_us,
                               memory_max=values.memory_max)


def _requirements_data(r: ResourceRequirements) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, items in (("requests", r.requests), ("limits", r.limits)):
        if items:
            out[kind] = {k: str(v) for k, v in sorted(items.items())}
    return out


def _requirements(data: Any) -> ResourceRequirements:
    return ResourceRequirements.model_validate(data, by_alias=True, by_name=False)


# ---- actuation (blocking: cgroupfs) --------------------------------------------------------


@dataclass(frozen=True)
class Actuation:
    acknowledged: dict[str, ResourceRequirements]  # where the cgroups still differ from the allocation
    error: str = ""  # held back or failed (PodResizeInProgress reason Error)


def actuate(driver: CgroupDriver, plan: PodPlan, acknowledged: Mapping[str, ResourceRequirements],
            restarting: frozenset[str] = frozenset()) -> Actuation:
    """Move the pod's cgroups from what they were given (`acknowledged`, per container where it
    differs from the allocation `plan`) to the allocation, in the kubelet's order; blocking.

    The pod cgroup is widened first, then the containers' are written, those lowering a value
    first, then the pod cgroup gets its final values. A memory limit decrease below the
    container's working set, or the pod's below the pod's usage, is held back (the kernel would
    refuse it on v1 and OOM-kill on v2). A container in `restarting` is only widened (its
    process is about to be killed; its final values are written while it is down)."""
    alloc = {c.name: c.spec.resources for c in plan.all_containers}
    before = {**alloc, **{n: r for n, r in acknowledged.items() if n in alloc}}
    after = dict(before)
    held: list[str] = []
    plans = {c.name: c for c in plan.all_containers}
    for name in acknowledged:
        c = plans.get(name)
        if c is None or name in restarting:
            continue
        target = alloc[name]
        old_mem, new_mem = before[name].limits.get("memory"), target.limits.get("memory")
        usage = None
        if new_mem is not None and (old_mem is None or new_mem < old_mem):
            total, inactive = driver.memory_usage(c.cgroup_path)
            usage = max(0, total - inactive)
        why = memory_decrease_held(f"container {name}", old_mem.value() if old_mem is not None else None,
                                   new_mem.value() if new_mem is not None else None, usage)
        if why:
            held.append(why)
            limits = dict(target.limits)
            if old_mem is None:
                limits.pop("memory", None)
            else:
                limits["memory"] = old_mem
            target = target.model_copy(update={"limits": limits})
        after[name] = target
    pod_before = pod_spec(plan, before)
    pod_after, pod_held = _hold_pod_memory(driver, plan, pod_before, pod_spec(plan, after))
    if pod_held:
        held.append(pod_held)
    grow = widest(pod_before, pod_after)
    try:
        if grow != pod_before:
            driver.update(plan.cgroup_path, grow)
    except OSError as e:
        return Actuation(dict(acknowledged), f"pod cgroup {plan.cgroup_path}: {e}")
    order = sorted((n for n in acknowledged if n in plans), key=lambda n: not _narrows(
        container_spec(plans[n], before[n]), container_spec(plans[n], after[n])))
    for name in order:
        c = plans[name]
        old = container_spec(c, before[name])
        new = widest(old, container_spec(c, alloc[name])) if name in restarting else container_spec(c, after[name])
        if new == old:
            continue
        try:
            driver.update(c.cgroup_path, new)
        except OSError as e:
            after[name] = before[name]
            held.append(f"container {name}: {e}")
    final = pod_spec(plan, after)
    if pod_held:
        final = dataclasses.replace(final, memory_max=pod_before.memory_max)
    try:
        if final != grow:
            driver.update(plan.cgroup_path, final)
    except OSError as e:
        held.append(f"pod cgroup {plan.cgroup_path}: {e}")
    left = {n: r for n, r in after.items() if r != alloc[n] or n in restarting}
    return Actuation(left, " ".join(held))


def _hold_pod_memory(driver: CgroupDriver, plan: PodPlan, before: CgroupSpec,
                     after: CgroupSpec) -> tuple[CgroupSpec, str]:
    """The pod's memory limit is not lowered to or below its usage (kuberuntime's "Aborting
    attempt to set pod memory limit less than current memory usage")."""
    if after.memory_max is None or (before.memory_max is not None and after.memory_max >= before.memory_max):
        return after, ""
    usage, _ = driver.memory_usage(plan.cgroup_path)
    if usage < after.memory_max:
        return after, ""
    return dataclasses.replace(after, memory_max=before.memory_max), (
        f"pod: memory usage {usage} is not below the desired pod memory limit {after.memory_max}; "
        f"the limit is not lowered until usage falls below it")


# ---- one pod's resize state ----------------------------------------------------------------


@dataclass
class ResizeState:
    """What a PodWorker keeps of its resizes; its plan is the allocation."""

    desired: Pod | None = None  # the spec as patched, while it differs from the allocation
    acknowledged: dict[str, ResourceRequirements] = field(default_factory=dict)  # cgroups, where not the allocation
    restarts: set[str] = field(default_factory=set)  # RestartContainer owed
    decision: ResizeDecision | None = None  # the last admission
    requested_at: float = 0.0  # wall time of the resize being decided (retry order)
    error: str = ""
    conditions: list[dict[str, str]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one resize of this pod at a time

    @property
    def deferred(self) -> bool:
        return self.desired is not None and self.decision is not None and self.decision.outcome == "deferred"

    @property
    def unactuated(self) -> bool:
        return bool(self.acknowledged or self.restarts)

    def snapshot(self) -> tuple[Any, ...]:
        return (self.desired, dict(self.acknowledged), set(self.restarts), self.decision, self.requested_at,
                self.error, list(self.conditions))

    def rollback(self, snap: tuple[Any, ...]) -> None:
        (self.desired, self.acknowledged, self.restarts, self.decision, self.requested_at,
         self.error, self.conditions) = snap

    # -- record --
    def to_record(self) -> dict[str, Any] | None:
        data: dict[str, Any] = {}
        if self.desired is not None:
            data["desired"] = {c.name: _requirements_data(c.resources)
                               for c in (*self.desired.spec.init_containers, *self.desired.spec.containers)}
            data["requestedAt"] = self.requested_at
        if self.acknowledged:
            data["acknowledged"] = {n: _requirements_data(r) for n, r in sorted(self.acknowledged.items())}
        if self.restarts:
            data["restarts"] = sorted(self.restarts)
        return data or None

    def restore(self, data: Mapping[str, Any] | None, plan: PodPlan) -> None:
        """From a record (a defect is logged and that part dropped: the allocation stands)."""
        if not data:
            return
        names = {c.name for c in plan.all_containers}
        try:
            desired = data.get("desired")
            if isinstance(desired, dict):
                self.desired = with_resources(plan.pod, {n: _requirements(r) for n, r in desired.items()
                                                         if n in names})
                self.requested_at = float(data.get("requestedAt") or 0.0)
            acknowledged = data.get("acknowledged") or {}
            self.acknowledged = {n: _requirements(r) for n, r in acknowledged.items() if n in names}
            self.restarts = {n for n in data.get("restarts") or () if n in names}
        except (TypeError, ValueError, AttributeError) as e:
            log.error("resize_record_invalid", pod=plan.pod.key, error=str(e))

    # -- cgroups at (re)start --
    def pod_cgroup_spec(self, plan: PodPlan) -> CgroupSpec:
        if not self.acknowledged:
            return plan.cgroup_spec
        alloc = {c.name: c.spec.resources for c in plan.all_containers}
        return widest(pod_spec(plan, {**alloc, **self.acknowledged}), plan.cgroup_spec)

    def container_cgroup_spec(self, c: ContainerPlan) -> CgroupSpec:
        r = self.acknowledged.get(c.name)
        return c.cgroup_spec if r is None else widest(container_spec(c, r), c.cgroup_spec)

    # -- status --
    def refresh(self, plan: PodPlan, now: float) -> None:
        pending = self.decision if self.desired is not None and self.decision is not None else None
        if pending is not None and pending.outcome not in ("deferred", "infeasible"):
            pending = None
        previous = self.conditions if pending is not None else [c for c in self.conditions if c["type"] != PENDING]
        allocated = [resources_of(c.spec) for c in plan.all_containers]
        actual = [resources_of(c.spec.model_copy(update={"resources": self.acknowledged[c.spec.name]}))
                  if c.name in self.acknowledged else resources_of(c.spec) for c in plan.all_containers]
        self.conditions = conditions(pending, allocated, actual, rfc3339(now), previous, self.error)

    def decorate(self, out: dict[str, Any], plan: PodPlan) -> None:
        """The pod as reported: the spec as patched, allocatedResources and resources per
        container, the resize conditions."""
        if self.desired is not None:
            out["spec"] = self.desired.to_dict()["spec"]
        status = out.setdefault("status", {})
        for key in ("initContainerStatuses", "containerStatuses"):
            for cs in status.get(key, []):
                c = plan.any_container(cs.get("name", ""))
                if c is None:
                    continue
                allocated = _requirements_data(c.spec.resources).get("requests")
                if allocated:
                    cs["allocatedResources"] = allocated
                actual = _requirements_data(self.acknowledged.get(c.name, c.spec.resources))
                if actual:
                    cs["resources"] = actual
        if self.conditions:
            status["conditions"] = [*status.get("conditions", []), *self.conditions]


# ---- the manager's side: admission, durability, retries ------------------------------------


class Resizes:
    """The PodManager's resizes: one at a time per pod, admissions one at a time with creates."""

    def __init__(self, manager: PodManager, admission: asyncio.Lock, on_change: Callable[[PodWorker], None], *,
                 retry_period: float = RETRY_S) -> None:
        """`admission`: the lock creates are admitted under; `on_change`: checkpoint the pod (soon)."""
        self.manager = manager
        self._admission = admission
        self._on_change = on_change
        self.retry_period = retry_period
        self._tasks = GuardedTasks("resizes")
        self._loop: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()

    # -- the API --
    async def resize(self, namespace: str, name: str, patch: Mapping[str, Any],
                     patch_type: str) -> dict[str, Any] | None:
        """The pods/resize subresource: validate, admit, record durably, actuate; the pod as it
        is then. None if there is no such pod; ValidationErrors / FieldError (422), DurabilityError."""
        worker = self.manager.pods.get((namespace, name))
        if worker is None:
            return None
        state = worker.resize
        async with state.lock:
            current = state.desired or worker.plan.pod
            desired = patched_pod(current, patch, patch_type)
            errors = resize_errors(current, desired, worker.plan.qos)
            if errors:
                raise ValidationErrors(errors)
            await self._admit(worker, desired, self.manager.env.clock.wall())
        self._wake()
        return worker.to_dict()

    # -- admission, record, actuation (under the pod's lock) --
    async def _admit(self, worker: PodWorker, desired: Pod, requested_at: float) -> None:
        state = worker.resize
        manager = self.manager
        async with self._admission:
            snap, plan = state.snapshot(), worker.plan
            decision = self._decide(worker, desired)
            if decision.outcome == "accepted":
                new_plan = manager.env.plan(desired)
                for c in plan.all_containers:  # the cgroups keep what they have until actuated
                    if c.name not in state.acknowledged and c.spec.resources != desired_resources(desired, c.name):
                        state.acknowledged[c.name] = c.spec.resources
                state.restarts |= {a.name for a in decision.actions if a.restart}
                worker.plan = new_plan
                state.desired = None
                manager.update_qos_cgroups()
            elif decision.outcome == "none":
                state.desired = None
            else:
                if state.desired is None or state.decision is None or state.decision.outcome == "accepted":
                    state.requested_at = requested_at
                state.desired = desired
            state.decision = decision
            state.refresh(worker.plan, manager.env.clock.wall())
        try:
            deletion = worker.deletion
            await manager.journal.put(worker.record())
            worker.mark_recorded(deletion)
        except OSError as e:
            state.rollback(snap)
            worker.plan = plan
            manager.update_qos_cgroups()
            log.error("pod_resize_record_failed", pod=worker.pod.key, error=str(e))
            raise DurabilityError(f"cannot record the resize of pod {worker.pod.key} in "
                                  f"{manager.checkpoints.directory}: {e}") from e
        log.info("pod_resize_admitted", pod=worker.pod.key, outcome=decision.outcome, reason=decision.reason,
                 message=decision.message)
        if state.unactuated:
            await self._actuate(worker)

    def _decide(self, worker: PodWorker, desired: Pod) -> ResizeDecision:
        plan = worker.plan
        others = [{"cpu": p.cpu_request_milli, "memory": _memory(p)}
                  for p in self.manager.active_plans() if p.uid != plan.uid]
        allocated = resizable(plan.pod)
        return decide(resizable(desired), allocated, node_of(self.manager.allocatable), others,
                      qos=qos_class(allocated), static_pod=plan.static)

    async def _actuate(self, worker: PodWorker) -> None:
        """Live updates now; restarts owed in the background (the answer does not wait for a grace period)."""
        state, driver = worker.resize, self.manager.env.driver
        if worker.terminal and not worker.running:
            return  # stopped or stopping: its cgroups are going away
        before = dict(state.acknowledged)
        restarting = frozenset(n for n in state.restarts if worker.container_running(n))
        done = await asyncio.to_thread(actuate, driver, worker.plan, before, restarting)
        state.acknowledged, state.error = done.acknowledged, done.error
        state.restarts &= restarting
        for name in restarting:
            self._tasks.start(self._restart(worker, name), name=f"resize restart {worker.pod.key}/{name}")
        state.refresh(worker.plan, self.manager.env.clock.wall())
        if before != state.acknowledged or done.error:
            log.info("pod_resize_actuated", pod=worker.pod.key, pending=sorted(state.acknowledged),
                     restarting=sorted(restarting), error=done.error)
            self._on_change(worker)

    async def _restart(self, worker: PodWorker, name: str) -> None:
        """RestartContainer: the container is killed as the kubelet kills it (preStop, SIGTERM,
        grace), its cgroup gets the allocation while it is down, its supervisor starts it again."""
        log.info("pod_resize_restarting_container", pod=worker.pod.key, container=name)
        await worker.restart_container(name)
        state = worker.resize
        async with state.lock:
            state.restarts.discard(name)
            await self._actuate(worker)

    # -- retries --
    def changed(self) -> None:
        """A pod moved (added, resized, stopped, removed): a deferred resize may fit now.

        Called on every change of every pod, so it is free when no resize waits: the retry
        loop runs exactly while one does (resize() and restored() start it)."""
        if self._loop is None or self._loop.done():
            return
        if any(w.resize.deferred for w in self.manager.pods.values()):
            self._kick.set()

    def _waiting(self) -> bool:
        return any((w.resize.deferred or w.resize.unactuated) and not w.terminal for w in self.manager.pods.values())

    def _wake(self) -> None:
        if self._waiting() and (self._loop is None or self._loop.done()):
            self._loop = self._tasks.start(self._retry_loop(), name="resize retries")

    async def _retry_loop(self) -> None:
        while self._waiting():
            try:
                await wait_for(self._kick.wait(), self.retry_period)
            except TimeoutError:
                pass
            self._kick.clear()
            await self.retry()

    async def retry(self) -> None:
        """Deferred resizes in retry order (priority, QoS class, age), then actuations still owed."""
        workers = {"/".join(k): w for k, w in self.manager.pods.items()}
        pending = [PendingResize(key, w.pod.spec.priority, w.plan.qos, w.resize.requested_at)
                   for key, w in workers.items() if w.resize.deferred and not w.terminal]
        for p in retry_order(pending):
            w = workers[p.pod]
            async with w.resize.lock:
                if w.resize.deferred and w.resize.desired is not None:
                    try:
                        await self._admit(w, w.resize.desired, w.resize.requested_at)
                    except DurabilityError:
                        continue
        for w in list(self.manager.pods.values()):
            if w.resize.unactuated and not w.terminal and not w.resize.lock.locked():
                async with w.resize.lock:
                    await self._actuate(w)

    def restored(self) -> None:
        """After restore(): admissions and actuations a previous agent left are taken up again."""
        for w in self.manager.pods.values():
            if w.resize.desired is not None:
                w.resize.decision = ResizeDecision("deferred")  # re-admitted at the first retry
        self._kick.set()
        self._wake()

    async def close(self) -> None:
        await self._tasks.close()


def desired_resources(pod: Pod, name: str) -> ResourceRequirements | None:
    c = next((c for c in (*pod.spec.init_containers, *pod.spec.containers) if c.name == name), None)
    return c.resources if c is not None else None


def _memory(plan: PodPlan) -> int:
    q = plan.requests.get("memory")
    return q.value() if q is not None else 0
