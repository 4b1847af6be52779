"""ResourceQuota over the registry: admission (every namespaced create) and status.used.

What a quota's usage is: the live objects it covers, read from the store's memory (pods' usage
cached by uid, their resources being immutable), plus the objects admitted but not yet seen
there ("in flight"). Admission awaits every read first, then checks every quota and records the
new object as in flight with no await in between, so concurrent creates on the event loop are
serialised exactly where it matters: `used + requested <= hard` is never decided on a count that
misses an admitted object. An in-flight entry goes when a listing shows its object (its name; an
AlreadyExists failure is the object listed already) or after IN_FLIGHT_SECONDS (a create that
failed for another reason). A refusal is 403 Forbidden with kube's "exceeded quota" message.

A pods/resize is charged as upstream's quota admission charges an update (the pod evaluator handles
UPDATE on the resize subresource): the constraints first ("must specify"), then only the growth,
usage(new) - usage(old) floored at zero per resource; nothing grows, nothing is checked. The pod's
usage is cached by (uid, generation), a resize bumping the generation; an admitted resize is in
flight with its generation, and stays so until a listing shows the pod at that generation.

`QuotaStatus.run` keeps status.hard and status.used written (the quota controller's job): for a
namespace marked dirty (an admission, a pod or quota change from a Feed) and every RESYNC, so a
restart or a missed change converges.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import Any

import structlog

from nodeagent.cluster.admission.quota import (
    LEGACY_OBJECT_COUNTS,
    PodFacts,
    QuotaExceeded,
    ResourceQuota,
    check,
    check_usage,
    constraints,
    object_usage,
    parse_resource_quota,
    pod_usage,
    resize_delta,
)
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.kinds.pods import pod_model
from nodeagent.cluster.registry.options import Context, ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.core.clock import Clock
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.model import Pod
from nodeagent.core.qos import qos_class
from nodeagent.core.quantity import Quantity
from nodeagent.core.waits import wait_for

log = structlog.get_logger(__name__)

IN_FLIGHT_SECONDS = 30.0
RESYNC_SECONDS = 10.0
_ZERO = Quantity.from_value(0)
Obj = dict[str, Any]
Usage = dict[str, Quantity]
Objects = dict[tuple[str, str, str], tuple[Usage, PodFacts | None]]  # (group, plural, name) -> what it uses


@dataclass(frozen=True)
class _Charge:
    usage: Usage
    facts: PodFacts | None
    until: float
    generation: int = 0  # a resize's: the listed pod replaces the charge once it is at least this new


def count_name(info: ResourceInfo) -> str:
    """The `count/<resource>.<group>` name (no group for the core group)."""
    return f"count/{info.plural}" + (f".{info.group}" if info.group else "")


def pod_facts(obj: Obj, pod: Pod) -> PodFacts:
    spec = obj.get("spec") or {}
    deadline = spec.get("activeDeadlineSeconds")
    return PodFacts(terminating=isinstance(deadline, int) and deadline >= 0, best_effort=qos_class(pod) == "BestEffort",
                    priority_class=str(spec.get("priorityClassName") or ""))


def _generation(obj: Obj) -> int:
    value = obj["metadata"].get("generation")
    return value if isinstance(value, int) else 0


def _live(obj: Obj) -> bool:
    """A pod that counts: not terminal, not being deleted."""
    return not obj["metadata"].get("deletionTimestamp") and \
        (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class QuotaLedger:
    """Usage per quota from the store's memory and the admissions in flight (see the module docstring)."""

    def __init__(self, registry: Registry, clock: Clock) -> None:
        self.registry, self.clock = registry, clock
        self.quotas = registry.resource("", "v1", "resourcequotas")
        self.pods = registry.resource("", "v1", "pods")
        self.in_flight: dict[str, dict[tuple[str, str, str], _Charge]] = {}  # ns -> (group, plural, name)
        self._pod_usage: dict[str, tuple[int, Usage, PodFacts]] = {}  # uid -> generation, usage, facts
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()

    async def quotas_of(self, namespace: str) -> list[tuple[Obj, ResourceQuota]]:
        out = []
        for obj in (await self.quotas.list(namespace, ListOptions())).items:
            try:
                out.append((obj, parse_resource_quota({**obj, "apiVersion": "v1", "kind": "ResourceQuota"})))
            except ValidationErrors:
                continue
        return out

    def _stores_for(self, quota: ResourceQuota) -> list[GenericStore]:
        """The kinds whose objects a quota's hard resources count."""
        out: dict[tuple[str, str], GenericStore] = {}
        for name in quota.hard:
            if "/" not in name and name not in LEGACY_OBJECT_COUNTS:
                out[("", "pods")] = self.pods  # pods, cpu, requests.*, limits.*, hugepages...
            elif name in LEGACY_OBJECT_COUNTS:
                if (gs := self.registry.stores.get(("", "v1", name))) is not None:
                    out[("", name)] = gs
            elif name.startswith("count/"):
                plural, _, group = name[len("count/"):].partition(".")
                for (g, _v, p), gs in self.registry.stores.items():
                    if p == plural and g == group and gs.info.namespaced:
                        out[(g, p)] = gs
        return list(out.values())

    def _usage(self, info: ResourceInfo, obj: Obj) -> tuple[Usage, PodFacts | None] | None:
        if info.group == "" and info.plural == "pods":
            uid = str(obj["metadata"].get("uid") or "")
            generation = _generation(obj)
            cached = self._pod_usage.get(uid)
            if cached is None or cached[0] != generation:  # a resize changed the pod's resources
                try:
                    pod = pod_model(obj)
                except (ValidationErrors, ValueError):
                    return None
                cached = (generation, {**pod_usage(pod), count_name(info): Quantity.from_value(1)},
                          pod_facts(obj, pod))
                if uid:
                    self._pod_usage[uid] = cached
            return cached[1], cached[2]
        return object_usage(info.plural if not info.group else f"{info.plural}.{info.group}"), None

    async def snapshot(self, namespace: str, stores: list[GenericStore]) -> Objects:
        """Every object the quotas may count, by (group, plural, name): listed ones, then those in flight."""
        now = self.clock.now()
        out: Objects = {}
        generations: dict[tuple[str, str, str], int] = {}
        seen_uids: set[str] = set()
        for gs in stores:
            for obj in (await gs.list(namespace, ListOptions())).items:
                is_pod = gs is self.pods
                if is_pod:
                    seen_uids.add(str(obj["metadata"].get("uid") or ""))
                    if not _live(obj):
                        continue
                got = self._usage(gs.info, obj)
                if got is not None:
                    key = (gs.info.group, gs.info.plural, obj["metadata"]["name"])
                    out[key] = got
                    generations[key] = _generation(obj)
        flying = self.in_flight.get(namespace, {})
        for key, charge in list(flying.items()):
            if (key in out and generations.get(key, 0) >= charge.generation) or charge.until <= now:
                del flying[key]
            else:
                out[key] = (charge.usage, charge.facts)
        if not flying:
            self.in_flight.pop(namespace, None)
        if len(self._pod_usage) > 4 * max(1, len(seen_uids)) + 1024:  # forget pods long gone
            self._pod_usage = {u: v for u, v in self._pod_usage.items() if u in seen_uids}
        return out

    async def snapshot_for(self, namespace: str, quotas: list[ResourceQuota]) -> Objects:
        """The snapshot of every kind these quotas count."""
        stores: dict[int, GenericStore] = {}
        for q in quotas:
            for gs in self._stores_for(q):
                stores[id(gs)] = gs
        return await self.snapshot(namespace, list(stores.values()))

    @staticmethod
    def used(quota: ResourceQuota, objects: Objects) -> Usage:
        total = dict.fromkeys(quota.hard, _ZERO)
        for usage, facts in objects.values():
            if quota.scopes and not quota.matches(facts):
                continue
            for name in quota.hard:
                if name in usage:
                    total[name] = total[name] + usage[name]
        return total

    def mark(self, namespace: str) -> None:
        self.dirty.add(namespace)
        self.wake.set()


class QuotaAdmission:
    def __init__(self, registry: Registry, ledger: QuotaLedger | None = None) -> None:
        self.ledger = ledger or QuotaLedger(registry, registry.clock)

    async def admit(self, info: ResourceInfo, obj: Obj) -> None:
        if not info.namespaced or (info.group in ("", "events.k8s.io") and info.plural == "events"):
            return  # events are never refused for quota (they would hide why something failed)
        ns = str(obj["metadata"].get("namespace") or "")
        name = str(obj["metadata"].get("name") or "")
        ledger = self.ledger
        quotas = await ledger.quotas_of(ns)
        if not quotas:
            return
        is_pod = info.group == "" and info.plural == "pods"
        pod: Pod | None = None
        if is_pod:
            try:
                pod = pod_model(obj)
            except (ValidationErrors, ValueError):
                return  # validation refuses it
            usage: Usage = {**pod_usage(pod), count_name(info): Quantity.from_value(1)}
            facts: PodFacts | None = pod_facts(obj, pod)
        else:
            usage, facts = object_usage(info.plural if not info.group else f"{info.plural}.{info.group}"), None
        relevant = [q for _, q in quotas if q.matches(facts) and set(q.hard) & set(usage)]
        if not relevant:
            return
        objects = await ledger.snapshot_for(ns, relevant)
        # ---- no await from here: check every quota, then record the object as in flight ----
        key = (info.group, info.plural, name)
        objects.pop(key, None)  # an object of this name listed already: AlreadyExists follows
        for q in relevant:
            used = ledger.used(q, objects)
            refusal: QuotaExceeded | None = check(q, used, pod) if pod is not None else check_usage(q, used, usage)
            if refusal is not None:
                raise errors.forbidden(info.plural, info.group, name, refusal.message)
        ledger.in_flight.setdefault(ns, {})[key] = _Charge(usage, facts, ledger.clock.now() + IN_FLIGHT_SECONDS)
        ledger.mark(ns)

    async def admit_resize(self, new: Obj, old: Obj) -> None:
        """A pods/resize: refused (403) when the growth of the pod's usage would exceed a quota."""
        ns = str(new["metadata"].get("namespace") or "")
        name = str(new["metadata"].get("name") or "")
        ledger = self.ledger
        quotas = await ledger.quotas_of(ns)
        if not quotas or not _live(old):
            return
        try:
            pod, before = pod_model(new), pod_model(old)
        except (ValidationErrors, ValueError):
            return  # validation refuses it
        facts = pod_facts(new, pod)
        matching = [q for _, q in quotas if q.matches(facts)]
        for q in matching:
            if (missing := constraints(q, pod)) is not None:
                raise errors.forbidden("pods", "", name, missing.message)
        usage: Usage = {**pod_usage(pod), "count/pods": Quantity.from_value(1)}
        delta = resize_delta(usage, pod_usage(before))
        relevant = [q for q in matching if set(q.hard) & set(delta)]
        if not relevant:
            return
        objects = await ledger.snapshot_for(ns, relevant)
        # ---- no await from here (see admit) ----
        key = ("", "pods", name)  # counted in `objects` as it is (or as a resize in flight makes it)
        for q in relevant:
            used = ledger.used(q, objects)
            refusal = check_usage(q, used, delta)
            if refusal is not None:
                raise errors.forbidden("pods", "", name, refusal.message)
        ledger.in_flight.setdefault(ns, {})[key] = _Charge(usage, facts, ledger.clock.now() + IN_FLIGHT_SECONDS,
                                                            _generation(new))
        ledger.mark(ns)


class QuotaStatus:
    """The quota controller's part we need: status.hard = spec.hard and status.used kept true."""

    def __init__(self, ledger: QuotaLedger) -> None:
        self.ledger = ledger
        self.ctx = Context(field_manager="resourcequota-controller")
        self.writes = 0

    def observe(self, event_type: str, obj: Obj) -> None:
        """A Feed's callback (pods, resourcequotas): that namespace's quotas may have moved."""
        ns = (obj.get("metadata") or {}).get("namespace")
        if ns:
            self.ledger.mark(str(ns))

    async def sync(self, namespace: str) -> None:
        ledger = self.ledger
        quotas = await ledger.quotas_of(namespace)
        if not quotas:
            return
        objects = await ledger.snapshot_for(namespace, [q for _, q in quotas])
        for obj, q in quotas:
            hard = {k: str(v) for k, v in q.hard.items()}
            used = {k: str(v) for k, v in ledger.used(q, objects).items()}
            status = obj.get("status") or {}
            if status.get("hard") == hard and status.get("used") == used:
                continue

            def mutate(old: Obj, hard: dict[str, str] = hard, used: dict[str, str] = used) -> Obj:
                new = copy.deepcopy(old)
                new["status"] = {"hard": hard, "used": used}
                return new

            try:
                await ledger.quotas.guaranteed_update(namespace, obj["metadata"]["name"], mutate, self.ctx,
                                                      subresource="status")
                self.writes += 1
            except errors.StatusError as e:
                if e.code != 404:
                    log.warning("quota_status_write_failed", quota=f"{namespace}/{obj['metadata']['name']}",
                                error=e.status.get("message"))

    async def run(self) -> None:
        ledger = self.ledger
        loop = asyncio.get_running_loop()
        next_resync = loop.time()
        while True:
            if loop.time() >= next_resync:
                for obj in (await ledger.quotas.list(None, ListOptions())).items:
                    ledger.dirty.add(str(obj["metadata"]["namespace"]))
                next_resync = loop.time() + RESYNC_SECONDS
            while ledger.dirty:
                ns = ledger.dirty.pop()
                try:
                    await self.sync(ns)
                except Exception:  # one namespace's failure must not stop the others' status
                    log.exception("quota_status_sync_failed", namespace=ns)
            ledger.wake.clear()
            try:
                await wait_for(ledger.wake.wait(), max(0.0, next_resync - loop.time()))
            except TimeoutError:
                pass
