"""ResourceQuota: per-namespace hard limits on requests, limits and object counts (pure).

Follows the API server's quota admission (plugin/pkg/admission/resourcequota) and the pod usage
evaluator (pkg/quota/v1/evaluator/core/pods.go):
- a pod uses pods=1 and count/pods=1, cpu and requests.cpu (its cpu requests), limits.cpu, the same
  for memory and ephemeral-storage, hugepages-<size> and requests.hugepages-<size>, and
  requests.<name> for extended resources; any other object uses count/<resource> (and the legacy
  name for services, configmaps, secrets, persistentvolumeclaims, replicationcontrollers,
  resourcequotas);
- if the quota limits cpu or memory (plain, requests. or limits.), every container must state that
  request or limit ("must specify ...");
- a request is refused when used + requested would exceed hard for a resource the request uses:
  "exceeded quota: <name>, requested: <r>=<q>, used: <r>=<q>, limited: <r>=<q>" (resources sorted,
  comma-separated, canonical quantities).
Callers pass live pods only (terminal pods do not count, as in Kubernetes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.names import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    invalid,
    is_extended_resource_name,
    is_hugepage_resource_name,
    qualified_name_errors,
)
from nodeagent.core.quantity import Quantity, coerce_quantity
from nodeagent.core.resources import pod_limits, pod_requests

if TYPE_CHECKING:
    from nodeagent.core.model import Pod

STANDARD_QUOTA_RESOURCES = frozenset({
    "pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps",
    "persistentvolumeclaims", "services.nodeports", "services.loadbalancers",
    "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.storage",
    "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage",
})
LEGACY_OBJECT_COUNTS = frozenset({"services", "configmaps", "secrets", "persistentvolumeclaims",
                                  "replicationcontrollers", "resourcequotas"})
# Quota on these makes every container state the matching request/limit (backward compatibility).
VALIDATION_SET = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu",
                            "limits.memory"})
_ONE = Quantity.from_value(1)
_ZERO = Quantity.from_value(0)


SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
          "CrossNamespacePodAffinity")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
CONFLICTING_SCOPES = (("Terminating", "NotTerminating"), ("BestEffort", "NotBestEffort"))
POD_OBJECT_COUNT = frozenset({"pods", "count/pods"})
POD_COMPUTE = frozenset({"cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
                         "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage"})


@dataclass(frozen=True)
class ScopeRequirement:
    """One scope: from spec.scopes (operator Exists) or spec.scopeSelector.matchExpressions."""

    scope: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodFacts:
    """What scopes ask of a pod (ResourceQuota's pod scope matching)."""

    terminating: bool  # spec.activeDeadlineSeconds set (>= 0)
    best_effort: bool
    priority_class: str


@dataclass(frozen=True)
class ResourceQuota:
    name: str
    namespace: str
    hard: Mapping[str, Quantity]
    scopes: tuple[ScopeRequirement, ...] = ()

    def matches(self, facts: PodFacts | None) -> bool:
        """Does the quota cover this object? Scoped quotas cover pods only (None: another kind)."""
        if not self.scopes:
            return True
        if facts is None:
            return False
        return all(_scope_matches(r, facts) for r in self.scopes)


def _scope_matches(r: ScopeRequirement, f: PodFacts) -> bool:
    if r.scope == "Terminating":
        return f.terminating
    if r.scope == "NotTerminating":
        return not f.terminating
    if r.scope == "BestEffort":
        return f.best_effort
    if r.scope == "NotBestEffort":
        return not f.best_effort
    if r.scope == "PriorityClass":
        if r.operator == "Exists":
            return bool(f.priority_class)
        if r.operator == "DoesNotExist":
            return not f.priority_class
        if r.operator == "In":
            return f.priority_class in r.values
        return f.priority_class not in r.values
    return False  # CrossNamespacePodAffinity: no pod of ours has cross-namespace affinity terms


def _parse_scopes(spec: Mapping[str, Any], hard: Mapping[str, Any],
                  errs: list[FieldError]) -> tuple[ScopeRequirement, ...]:
    """spec.scopes and spec.scopeSelector, validated as ValidateResourceQuotaSpec does."""
    out: list[ScopeRequirement] = []
    scopes = spec.get("scopes") or []
    if not isinstance(scopes, list):
        errs.append(FieldError("spec.scopes", invalid(str(scopes)[:40], "must be a list")))
        scopes = []
    for i, sc in enumerate(scopes):
        if sc not in SCOPES:
            errs.append(FieldError(f"spec.scopes[{i}]", invalid(sc, "unsupported scope")))
        else:
            out.append(ScopeRequirement(str(sc)))
    selector = spec.get("scopeSelector")
    exprs = selector.get("matchExpressions") if isinstance(selector, Mapping) else None
    if selector is not None and not isinstance(exprs, list):
        errs.append(FieldError("spec.scopeSelector.matchExpressions", "Required value"))
        exprs = []
    for i, e in enumerate(exprs or []):
        p = f"spec.scopeSelector.matchExpressions[{i}]"
        if not isinstance(e, Mapping):
            errs.append(FieldError(p, "Invalid value: must be an object"))
            continue
        scope, op, values = e.get("scopeName"), e.get("operator"), e.get("values") or []
        if scope not in SCOPES:
            errs.append(FieldError(f"{p}.scopeName", invalid(scope, "unsupported scope")))
            continue
        if op not in SELECTOR_OPERATORS:
            errs.append(FieldError(f"{p}.operator", f"Unsupported value: {op!r}: supported values: "
                                                    + ", ".join(f'"{o}"' for o in SELECTOR_OPERATORS)))
            continue
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            errs.append(FieldError(f"{p}.values", "Invalid value: must be a list of strings"))
            continue
        if op in ("In", "NotIn") and not values:
            errs.append(FieldError(f"{p}.values", "Required value: must be at least one value when `operator` "
                                                  "is 'In' or 'NotIn' for scope selector"))
        elif op in ("Exists", "DoesNotExist") and values:
            errs.append(FieldError(f"{p}.values", "Invalid value: must be no value when `operator` is 'Exist' "
                                                  "or 'DoesNotExist' for scope selector"))
        elif scope != "PriorityClass" and op not in ("Exists", "DoesNotExist"):
            errs.append(FieldError(f"{p}.operator", invalid(op, "must be 'Exist' when scope is any of "
                                                            "ResourceQuotaScopeTerminating, "
                                                            "ResourceQuotaScopeNotTerminating, "
                                                            "ResourceQuotaScopeBestEffort and "
                                                            "ResourceQuotaScopeNotBestEffort")))
        else:
            if op == "DoesNotExist" and scope != "PriorityClass":  # the opposite scope, as upstream
                scope = {"Terminating": "NotTerminating", "NotTerminating": "Terminating",
                         "BestEffort": "NotBestEffort", "NotBestEffort": "BestEffort"}.get(scope, scope)
                op = "Exists"
            out.append(ScopeRequirement(str(scope), str(op), tuple(values)))
    names = {r.scope for r in out}
    for a, b in CONFLICTING_SCOPES:
        if a in names and b in names:
            errs.append(FieldError("spec.scopes", invalid(sorted(names), "conflicting scopes")))
    for r in out:
        allowed = POD_OBJECT_COUNT if r.scope == "BestEffort" else POD_OBJECT_COUNT | POD_COMPUTE
        for res in hard:
            if res not in allowed:
                errs.append(FieldError(f"spec.hard[{res}]", invalid(res, "unsupported scope applied to resource")))
    return tuple(dict.fromkeys(out))


class QuotaExceeded(Exception):
    """A request the quota refuses; str() is the API server's message."""

    def __init__(self, quota: str, requested: Mapping[str, Quantity],
                 used: Mapping[str, Quantity], limited: Mapping[str, Quantity],
                 message: str | None = None) -> None:
        self.quota, self.requested, self.used, self.limited = quota, requested, used, limited
        self.message = message or (f"exceeded quota: {quota}, requested: {_pretty(requested)}, "
                                   f"used: {_pretty(used)}, limited: {_pretty(limited)}")
        super().__init__(self.message)


class QuotaMissingRequests(QuotaExceeded):
    """The quota tracks cpu/memory but a container does not state its request or limit."""


def _pretty(items: Mapping[str, Quantity]) -> str:
    return ",".join(f"{k}={items[k]}" for k in sorted(items))


def parse_resource_quota(manifest: Mapping[str, Any]) -> ResourceQuota:
    """A validated ResourceQuota (v1) from its manifest; ValidationErrors names every bad field."""
    errs: list[FieldError] = []
    if manifest.get("apiVersion") != "v1":
        errs.append(FieldError("apiVersion", f"Unsupported value: {manifest.get('apiVersion')!r}: "
                                             "supported values: 'v1'"))
    if manifest.get("kind") != "ResourceQuota":
        errs.append(FieldError("kind", f"Unsupported value: {manifest.get('kind')!r}: "
                                       "supported values: 'ResourceQuota'"))
    meta = manifest.get("metadata") or {}
    name, namespace = meta.get("name", ""), meta.get("namespace", "default")
    if not name:
        errs.append(FieldError("metadata.name", "Required value: name or generateName is required"))
    else:
        errs += [FieldError("metadata.name", invalid(name, e)) for e in dns1123_subdomain_errors(name)]
    errs += [FieldError("metadata.namespace", invalid(namespace, e))
             for e in dns1123_label_errors(namespace)]
    spec = manifest.get("spec") or {}
    unknown = set(spec) - {"hard", "scopes", "scopeSelector"}
    errs += [FieldError(f"spec.{k}", "unknown field") for k in sorted(unknown)]
    hard: dict[str, Quantity] = {}
    for key, raw in (spec.get("hard") or {}).items():
        path = f"spec.hard[{key}]"
        if problem := quota_resource_name_error(str(key)):
            errs.append(FieldError(path, invalid(key, problem)))
            continue
        try:
            q = coerce_quantity(raw)
        except ValueError as exc:
            errs.append(FieldError(path, invalid(raw, str(exc))))
            continue
        if q.sign() < 0:
            errs.append(FieldError(path, invalid(str(q), "must be greater than or equal to 0")))
        hard[key] = q
    scopes = _parse_scopes(spec, hard, errs)
    if errs:
        raise ValidationErrors(errs)
    return ResourceQuota(name, namespace, hard, scopes)


def quota_resource_name_error(name: str) -> str | None:
    """ValidateResourceQuotaResourceName: qualified name; without a "/" it must be standard."""
    if errs := qualified_name_errors(name):
        return "; ".join(errs)
    if "/" not in name and not (name in STANDARD_QUOTA_RESOURCES or is_hugepage_resource_name(name)
                                or name.startswith("requests.hugepages-")):
        return "must be a standard resource for quota"
    return None


def _compute_usage(requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]
                   ) -> dict[str, Quantity]:
    """podComputeUsageHelper: the compute resources a pod (or one container) uses."""
    out: dict[str, Quantity] = {"pods": _ONE}
    for res in ("cpu", "memory", "ephemeral-storage"):
        if res in requests:
            out[res] = out[f"requests.{res}"] = requests[res]
        if res in limits:
            out[f"limits.{res}"] = limits[res]
    for res, q in requests.items():
        if is_hugepage_resource_name(res):
            out[res] = out[f"requests.{res}"] = q
        elif is_extended_resource_name(res):
            out[f"requests.{res}"] = q
    return out


def pod_usage(pod: Pod) -> dict[str, Quantity]:
    """What a live pod counts against a quota."""
    return {"count/pods": _ONE, **_compute_usage(pod_requests(pod), pod_limits(pod))}


def object_usage(resource: str) -> dict[str, Quantity]:
    """What one object of another kind counts ("services", "configmaps", "jobs.batch"...)."""
    out = {f"count/{resource}": _ONE}
    if resource in LEGACY_OBJECT_COUNTS:
        out[resource] = _ONE
    return out


def _add(total: dict[str, Quantity], usage: Mapping[str, Quantity], names: Iterable[str]) -> None:
    for name in names:
        if name in usage:
            total[name] = total[name] + usage[name]


def compute_used(quota: ResourceQuota, pods: Iterable[Pod],
                 objects: Mapping[str, int] | None = None) -> dict[str, Quantity]:
    """status.used from scratch: every hard resource, summed over the namespace's live pods and
    its other objects (`objects`: resource -> count, e.g. {"services": 2})."""
    used = dict.fromkeys(quota.hard, _ZERO)
    for pod in pods:
        if pod.metadata.namespace == quota.namespace:
            _add(used, pod_usage(pod), quota.hard)
    for resource, count in (objects or {}).items():
        for name, q in object_usage(resource).items():
            if name in used:
                used[name] = used[name] + Quantity.from_value(count * q.value())
    return used


def constraints(quota: ResourceQuota, pod: Pod) -> QuotaMissingRequests | None:
    """The pod evaluator's Constraints: a quota on cpu or memory needs every container to state it."""
    return _missing(quota, pod)


def resize_delta(new: Mapping[str, Quantity], old: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """What a pods/resize charges: quota.SubtractWithNonNegativeResult(usage(new), usage(old)) without
    the zeros (RemoveZeros), so a resize that grows nothing is never refused."""
    out: dict[str, Quantity] = {}
    for name, q in new.items():
        grown = q - old[name] if name in old else q
        if grown.sign() > 0:
            out[name] = grown
    return out


def _missing(quota: ResourceQuota, pod: Pod) -> QuotaMissingRequests | None:
    required = VALIDATION_SET.intersection(quota.hard)
    missing: dict[str, set[str]] = {}
    for c in pod.spec.containers:
        have = _compute_usage(c.resources.requests, c.resources.limits)
        for res in required.difference(have):
            missing.setdefault(res, set()).add(c.name)
    if not missing:
        return None
    detail = "; ".join(f"{res} for: {','.join(sorted(missing[res]))}" for res in sorted(missing))
    return QuotaMissingRequests(quota.name, {}, {}, {},
                                message=f"failed quota: {quota.name}: must specify {detail}")


def check_usage(quota: ResourceQuota, used: Mapping[str, Quantity],
                usage: Mapping[str, Quantity]) -> QuotaExceeded | None:
    """Would adding `usage` to `used` break `quota`? (quota.Mask / LessThanOrEqual)."""
    requested = {k: v for k, v in usage.items() if k in quota.hard}
    exceeded = sorted(k for k, v in requested.items()
                      if used.get(k, _ZERO) + v > quota.hard[k])
    if not exceeded:
        return None
    return QuotaExceeded(quota.name, {k: requested[k] for k in exceeded},
                         {k: used.get(k, _ZERO) for k in exceeded},
                         {k: quota.hard[k] for k in exceeded})


def check(quota: ResourceQuota, used: Mapping[str, Quantity], pod: Pod) -> QuotaExceeded | None:
    """None when `pod` may be created next to `used`; else why not (the error to show)."""
    if pod.metadata.namespace != quota.namespace:
        return None
    return _missing(quota, pod) or check_usage(quota, used, pod_usage(pod))


def check_object(quota: ResourceQuota, used: Mapping[str, Quantity],
                 resource: str, namespace: str) -> QuotaExceeded | None:
    """The same for one new object of another kind (e.g. a Service)."""
    if namespace != quota.namespace:
        return None
    return check_usage(quota, used, object_usage(resource))


def charge(quota: ResourceQuota, used: Mapping[str, Quantity],
           usage: Mapping[str, Quantity], sign: int = 1) -> dict[str, Quantity]:
    """`used` after admitting (sign=1) or deleting (sign=-1) something using `usage`; only the
    quota's resources are tracked, and usage never drops below zero."""
    out = dict(used)
    for name in quota.hard:
        if name in usage:
            value = out.get(name, _ZERO) + usage[name] * sign
            out[name] = value if value.sign() >= 0 else _ZERO
    return out
