"""One HPA sync as a pure step: upstream's reconcileAutoscaler and computeReplicasForMetrics.

The loop that calls `reconcile` every sync period (15 s upstream) brings: the HPA object (v2
JSON, as stored), the target's scale (or the error getting it), the pods its selector picks (from
the informer cache), a MetricsReader bound to the HPA's namespace and selector (an adapter over the
sample window or a metrics API; it raises MetricError), the History kept from the last step and
`now` from its clock. It gets back the replicas to set (if any), the new status (conditions with
upstream's reasons and messages), the events to record and the History to keep. Writing the scale
is the loop's; if that fails, `rescale_failed` gives the status and event upstream writes then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from nodeagent.cluster.autoscaling.hpa.conditions import ABLE_TO_SCALE, SCALING_ACTIVE, SCALING_LIMITED, set_condition
from nodeagent.cluster.autoscaling.hpa.fast import DEFAULT_BEHAVIOR, FastConfig, normalize_fast
from nodeagent.cluster.autoscaling.hpa.normalize import (
    DEFAULT_DOWNSCALE_STABILIZATION,
    History,
    normalize_with_behavior,
    normalize_without_behavior,
    record_initial,
    store_scale_event,
)
from nodeagent.cluster.autoscaling.hpa.pods import MetricError, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.hpa.replicas import (
    DEFAULT_TOLERANCE,
    CalculatorConfig,
    Tolerances,
    external_per_pod_replicas,
    external_replicas,
    object_per_pod_replicas,
    object_replicas,
    plain_metric_replicas,
    raw_resource_replicas,
    resource_replicas,
)
from nodeagent.cluster.autoscaling.hpa.spec import HPASpec, MetricSpec, parse_hpa_spec
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.quantity import Quantity
from nodeagent.core.timefmt import rfc3339


class MetricsReader(Protocol):
    """Metrics for one HPA (its namespace and pod selector are the adapter's); raises MetricError."""

    def resource_metric(self, resource: str, container: str) -> Mapping[str, PodMetric]: ...

    def pods_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> Mapping[str, PodMetric]: ...

    def object_metric(
        self, name: str, described_object: Mapping[str, Any], metric_selector: Mapping[str, Any] | None
    ) -> tuple[int, float]: ...

    def external_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> tuple[list[int], float]: ...


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """kube-controller-manager's --horizontal-pod-autoscaler-* flags."""

    tolerance: float = DEFAULT_TOLERANCE
    downscale_stabilization: float = DEFAULT_DOWNSCALE_STABILIZATION
    calculator: CalculatorConfig = field(default_factory=CalculatorConfig)


@dataclass(frozen=True, slots=True)
class FastMode:
    """The fast first reaction (hpa.fast): `reader` is then the steady (30 s) window, this the quick one."""

    quick_reader: MetricsReader
    config: FastConfig = field(default_factory=FastConfig)


@dataclass(frozen=True, slots=True)
class Scale:
    """The target's scale subresource (autoscaling/v1 Scale)."""

    spec_replicas: int
    status_replicas: int
    selector: str


@dataclass(frozen=True, slots=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Outcome:
    desired_replicas: int
    rescale: bool  # write desired_replicas to the scale
    status: dict[str, Any]
    events: tuple[Event, ...]
    history: History
    error: str | None = None  # what upstream's reconcileAutoscaler returns (logged, retried next sync)
    rescale_reason: str = ""
    history_if_failed: History | None = None  # without this rescale's event, for rescale_failed


@dataclass(slots=True)
class _Sync:
    conditions: list[dict[str, Any]]
    now: float
    events: list[Event] = field(default_factory=list)

    def set(self, kind: str, status: str, reason: str, message: str) -> None:
        self.conditions = set_condition(self.conditions, kind, status, reason, message, self.now)

    def warn(self, reason: str, message: str) -> None:
        self.events.append(Event("Warning", reason, message))


def _milli(value: Quantity | None) -> int:
    assert value is not None
    return value.milli_value()


def _milli_quantity(milli: int) -> str:
    return str(Quantity.from_milli(milli))


def _go_selector(selector: Mapping[str, Any] | None) -> str:
    """Go's %+v of a *metav1.LabelSelector, as upstream puts it in metric names."""
    if selector is None:
        return "<nil>"
    labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    ml = ",".join(f"{k}: {v}" for k, v in sorted(labels.items()))
    me = ",".join(
        f"LabelSelectorRequirement{{Key:{e.get('key', '')},Operator:{e.get('operator', '')},"
        f"Values:[{' '.join(e.get('values') or [])}],}}"
        for e in exprs
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{ml + ',' if ml else ''}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{me + ',' if me else ''}}},}}"
    )


def _identifier(spec: MetricSpec) -> dict[str, Any]:
    ident: dict[str, Any] = {"name": spec.name}
    if spec.selector is not None:
        ident["selector"] = dict(spec.selector)
    return ident


def _tolerances(spec: HPASpec, config: ControllerConfig) -> Tolerances:
    down = up = config.tolerance
    if spec.behavior is not None:
        if spec.behavior.scale_down.tolerance is not None:
            down = spec.behavior.scale_down.tolerance
        if spec.behavior.scale_up.tolerance is not None:
            up = spec.behavior.scale_up.tolerance
    return Tolerances(down, up)


def _unable(sync: _Sync, reason: str, err: str) -> tuple[str, str, str]:
    sync.warn(reason, err)
    return (reason, err, f"the HPA was unable to compute the replica count: {err}")


def _compute_metric(
    sync: _Sync,
    metric: MetricSpec,
    spec_replicas: int,
    status_replicas: int,
    pods: Sequence[PodInfo],
    reader: MetricsReader,
    tolerances: Tolerances,
    config: ControllerConfig,
) -> tuple[int, str, dict[str, Any]]:
    """computeReplicasForMetric: (replicas, metric name, MetricStatus); raises _Invalid."""
    calc = config.calculator
    target = metric.target
    if metric.type in ("Resource", "ContainerResource"):
        container = metric.container or ""
        key = "resource" if metric.type == "Resource" else "containerResource"
        reason = "FailedGetResourceMetric" if metric.type == "Resource" else "FailedGetContainerResourceMetric"
        outer = (
            f"failed to get {metric.name} resource metric value: "
            if metric.type == "Resource"
            else f"failed to get {container} container metric value: "
        )
        try:
            values = reader.resource_metric(metric.name, container)
        except MetricError as e:
            values = {}
            fetch_error: str | None = f"unable to get metrics for resource {metric.name}: {e}"
        else:
            fetch_error = None
        try:
            if target.average_value is not None:
                if fetch_error:
                    raise MetricError(fetch_error)
                vp = raw_resource_replicas(
                    spec_replicas, _milli(target.average_value), metric.name, tolerances, pods, values, sync.now, calc
                )
                name = f"{metric.name} resource"
                current: dict[str, Any] = {"averageValue": _milli_quantity(vp.usage)}
                replicas = vp.replicas
            else:
                if target.average_utilization is None:
                    raise MetricError(
                        "invalid resource metric source: neither an average utilization target "
                        "nor an average value (usage) target was set"
                    )
                if fetch_error:
                    raise MetricError(fetch_error)
                rp = resource_replicas(
                    spec_replicas,
                    target.average_utilization,
                    metric.name,
                    tolerances,
                    pods,
                    values,
                    sync.now,
                    calc,
                    container,
                )
                name = (
                    f"{metric.name} resource utilization (percentage of request)"
                    if metric.type == "Resource"
                    else f"{metric.name} container resource utilization (percentage of request)"
                )
                current = {"averageUtilization": rp.utilization, "averageValue": _milli_quantity(rp.raw_value)}
                replicas = rp.replicas
        except MetricError as e:
            kind = "usage" if target.average_value is not None else "utilization"
            inner = (
                str(e)
                if str(e).startswith("invalid resource metric source")
                else f"failed to get {metric.name} {kind}: {e}"
            )
            raise _Invalid(outer + inner, *_unable(sync, reason, inner)) from e
        source: dict[str, Any] = {"name": metric.name, "current": current}
        if metric.type == "ContainerResource":
            source = {"name": metric.name, "container": container, "current": current}
        return replicas, name, {"type": metric.type, key: source}

    if metric.type == "Pods":
        try:
            try:
                values = reader.pods_metric(metric.name, metric.selector)
            except MetricError as e:
                raise MetricError(f"unable to get metric {metric.name}: {e}") from e
            vp = plain_metric_replicas(
                spec_replicas, _milli(target.average_value), tolerances, pods, values, sync.now, calc
            )
        except MetricError as e:
            raise _Invalid(
                f"failed to get pods metric value: {e}", *_unable(sync, "FailedGetPodsMetric", str(e))
            ) from e
        return (
            vp.replicas,
            f"pods metric {metric.name}",
            {
                "type": "Pods",
                "pods": {"metric": _identifier(metric), "current": {"averageValue": _milli_quantity(vp.usage)}},
            },
        )

    if metric.type == "Object":
        described = dict(metric.described_object or {})
        ref = f"{described.get('kind', '')} {{ns}}/{described.get('name', '')}"
        try:
            try:
                usage, ts = reader.object_metric(metric.name, described, metric.selector)
            except MetricError as e:
                raise MetricError(f"unable to get metric {metric.name}: {e} on {ref}") from e
            if target.type == "Value" and target.value is not None:
                vp = object_replicas(spec_replicas, _milli(target.value), usage, tolerances, pods, ts)
                current = {"value": _milli_quantity(vp.usage)}
                status_obj: dict[str, Any] = {
                    "describedObject": described,
                    "metric": _identifier(metric),
                    "current": current,
                }
                name = f"{described.get('kind', '')} metric {metric.name}"
            elif target.type == "AverageValue" and target.average_value is not None:
                vp = object_per_pod_replicas(status_replicas, _milli(target.average_value), usage, tolerances, ts)
                current = {"averageValue": _milli_quantity(vp.usage)}
                status_obj = {
                    "describedObject": {"kind": "", "name": ""},
                    "metric": _identifier(metric),
                    "current": current,
                }
                name = f"external metric {metric.name}({_go_selector(metric.selector)})"  # upstream's wording
            else:
                raise MetricError(
                    "invalid object metric source: neither a value target nor an average value target was set"
                )
        except MetricError as e:
            msg = str(e)
            if target.type == "AverageValue" and not msg.startswith("invalid"):
                outer = f"failed to get object metric value: failed to get {metric.name} object metric: {msg}"
            else:
                outer = f"failed to get object metric value: {msg}"
            raise _Invalid(outer, *_unable(sync, "FailedGetObjectMetric", msg)) from e
        return vp.replicas, name, {"type": "Object", "object": status_obj}

    # External
    sel = _go_selector(metric.selector)
    try:
        try:
            values_list, ts = reader.external_metric(metric.name, metric.selector)
        except MetricError as e:
            raise MetricError(f"unable to get external metric {{ns}}/{metric.name}/{sel}: {e}") from e
        if target.average_value is not None:
            vp = external_per_pod_replicas(status_replicas, _milli(target.average_value), values_list, tolerances, ts)
            current = {"averageValue": _milli_quantity(vp.usage)}
        elif target.value is not None:
            vp = external_replicas(spec_replicas, _milli(target.value), values_list, tolerances, pods, ts)
            current = {"value": _milli_quantity(vp.usage)}
        else:
            raise MetricError(
                "invalid external metric source: neither a value target nor an average value target was set"
            )
    except MetricError as e:
        msg = str(e)
        if msg.startswith("invalid"):
            outer = f"failed to get {metric.name} external metric value: {msg}"
        elif target.average_value is not None:
            outer = (
                f"failed to get {metric.name} external metric value: failed to get {metric.name} external metric: {msg}"
            )
        else:
            outer = (
                f"failed to get {metric.name} external metric value: failed to get external metric {metric.name}: {msg}"
            )
        raise _Invalid(outer, *_unable(sync, "FailedGetExternalMetric", msg)) from e
    return (
        vp.replicas,
        f"external metric {metric.name}({sel})",
        {"type": "External", "external": {"metric": _identifier(metric), "current": current}},
    )


class _Invalid(Exception):
    def __init__(self, error: str, reason: str, inner: str, condition_message: str) -> None:
        super().__init__(error)
        self.error = error
        self.reason = reason
        self.inner = inner
        self.condition_message = condition_message


def _with_namespace(text: str, namespace: str) -> str:
    return text.replace("{ns}", namespace)


def compute_replicas_for_metrics(
    sync: _Sync,
    spec: HPASpec,
    namespace: str,
    scale: Scale,
    pods: Sequence[PodInfo],
    reader: MetricsReader,
    config: ControllerConfig,
) -> tuple[int, str, list[dict[str, Any]], str | None]:
    """The highest proposal over spec.metrics; -1 when no metric (or, scaling down, not all) worked."""
    tolerances = _tolerances(spec, config)
    statuses: list[dict[str, Any]] = []
    replicas = 0
    metric_name = ""
    invalid = 0
    first: _Invalid | None = None
    for metric in spec.metrics:
        try:
            proposal, name, status = _compute_metric(
                sync, metric, scale.spec_replicas, scale.status_replicas, pods, reader, tolerances, config
            )
        except _Invalid as e:
            statuses.append({"type": ""})
            if first is None:
                first = e
            invalid += 1
            continue
        statuses.append(status)
        if replicas == 0 or proposal > replicas:
            replicas, metric_name = proposal, name
    error = None
    if first is not None:
        error = _with_namespace(
            f"invalid metrics ({invalid} invalid out of {len(spec.metrics)}), first error is: {first.error}", namespace
        )
    if first is not None and (invalid >= len(spec.metrics) or replicas < scale.spec_replicas):
        sync.set(SCALING_ACTIVE, "False", first.reason, _with_namespace(first.condition_message, namespace))
        return -1, "", statuses, error
    sync.set(
        SCALING_ACTIVE,
        "True",
        "ValidMetricFound",
        f"the HPA was able to successfully calculate a replica count from {_with_namespace(metric_name, namespace)}",
    )
    return replicas, _with_namespace(metric_name, namespace), statuses, error


def _status(
    previous: Mapping[str, Any],
    current: int,
    desired: int,
    metrics: list[dict[str, Any]],
    conditions: list[dict[str, Any]],
    rescale: bool,
    now: float,
    generation: int | None,
) -> dict[str, Any]:
    """setStatus: the status rebuilt at each sync, with the generation of the spec it was computed from
    (status.observedGeneration, kubernetes#138228; kept as it was on the paths that do not call it)."""
    status: dict[str, Any] = {"currentReplicas": current, "desiredReplicas": desired}
    if generation is not None:
        status["observedGeneration"] = generation
    last = rfc3339(now) if rescale else previous.get("lastScaleTime")
    if last is not None:
        status["lastScaleTime"] = last
    if metrics:
        status["currentMetrics"] = metrics
    if conditions:
        status["conditions"] = conditions
    return status


def _generation(meta: Mapping[str, Any]) -> int | None:
    value = meta.get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fix_event_namespace(events: list[Event], namespace: str) -> tuple[Event, ...]:
    return tuple(Event(e.type, e.reason, _with_namespace(e.message, namespace)) for e in events)


def reconcile(
    hpa: Mapping[str, Any],
    scale: Scale | None,
    pods: Sequence[PodInfo],
    reader: MetricsReader,
    history: History,
    now: float,
    config: ControllerConfig = ControllerConfig(),
    *,
    scale_error: str | None = None,
    competing_hpas: Sequence[str] = (),
    fast: FastMode | None = None,
) -> Outcome:
    """One sync of one HPA (see the module docstring). `scale` is None when getting it failed.

    With `fast`, `reader` serves the steady window (30 s: status, steady scale-up and scale-down) and
    `fast.quick_reader` the last second (quick scale-up), normalized by hpa.fast.
    """
    meta = hpa.get("metadata") if isinstance(hpa.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    namespace = str(meta.get("namespace", ""))
    previous = hpa.get("status") if isinstance(hpa.get("status"), Mapping) else {}
    assert isinstance(previous, Mapping)
    sync = _Sync([dict(c) for c in previous.get("conditions") or [] if isinstance(c, Mapping)], now)
    try:
        spec = parse_hpa_spec(hpa.get("spec"))
    except ValidationErrors as e:
        # the API validates HPAs; a stored one that does not parse is left alone, loudly
        return Outcome(
            int(previous.get("desiredReplicas", 0) or 0),
            False,
            dict(previous),
            (),
            history,
            error=f"invalid HPA spec: {e}",
        )
    ref = spec.scale_target_ref
    reference = f"{ref.get('kind', '')}/{namespace}/{ref.get('name', '')}"

    if scale is None:
        err = scale_error or "unrecognized resource"
        sync.warn("FailedGetScale", err)
        sync.set(
            ABLE_TO_SCALE,
            "False",
            "FailedGetScale",
            f"the HPA controller was unable to get the target's current scale: {err}",
        )
        status = dict(previous)
        if sync.conditions:
            status["conditions"] = sync.conditions
        return Outcome(
            int(previous.get("desiredReplicas", 0) or 0),
            False,
            status,
            tuple(sync.events),
            history,
            error=f"failed to query scale subresource for {reference}: {err}",
        )

    sync.set(
        ABLE_TO_SCALE, "True", "SucceededGetScale", "the HPA controller was able to get the target's current scale"
    )
    current = scale.spec_replicas
    history = record_initial(history, current, now)
    statuses: list[dict[str, Any]] = []
    rescale_reason = ""
    error: str | None = None
    rescale = True

    if current == 0 and spec.min_replicas != 0:
        desired = 0
        rescale = False
        sync.set(
            SCALING_ACTIVE,
            "False",
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero",
        )
    elif current > spec.max_replicas:
        rescale_reason = "Current number of replicas above Spec.MaxReplicas"
        desired = spec.max_replicas
    elif current < spec.min_replicas:
        rescale_reason = "Current number of replicas below Spec.MinReplicas"
        desired = spec.min_replicas
    else:
        selector_problem = _selector_problem(scale.selector, competing_hpas, namespace, str(meta.get("name", "")))
        if selector_problem is not None:
            reason, message, cond_message = selector_problem
            sync.warn(reason, message)
            sync.set(
                SCALING_ACTIVE, "False", "InvalidSelector" if reason == "SelectorRequired" else reason, cond_message
            )
            metric_desired, error = -1, message
        else:
            metric_desired, metric_name, statuses, error = compute_replicas_for_metrics(
                sync, spec, namespace, scale, pods, reader, config
            )
        if metric_desired == -1:
            status = _status(
                previous,
                current,
                int(previous.get("desiredReplicas", 0) or 0),
                statuses,
                sync.conditions,
                False,
                now,
                _generation(meta),
            )
            message = f"failed to compute desired number of replicas based on listed metrics for {reference}: {error}"
            sync.warn("FailedComputeMetricsReplicas", error or "")
            return Outcome(
                status["desiredReplicas"],
                False,
                status,
                _fix_event_namespace(sync.events, namespace),
                history,
                error=message,
            )
        desired = 0
        rescale_metric = ""
        if metric_desired > desired:
            desired, rescale_metric = metric_desired, metric_name
        if desired > current:
            rescale_reason = f"{rescale_metric} above target"
        if desired < current:
            rescale_reason = "All metrics below target"
        if fast is not None:
            quick_sync = _Sync(list(sync.conditions), now)
            quick_config = replace(config, tolerance=max(config.tolerance, fast.config.quick_tolerance))
            quick_desired, quick_name, _, _ = compute_replicas_for_metrics(
                quick_sync, spec, namespace, scale, pods, fast.quick_reader, quick_config
            )
            if quick_desired == -1:
                quick_desired = current  # no quick evidence (e.g. new pods without two samples yet)
            elif quick_desired > max(desired, current):
                rescale_reason = f"{quick_name} above target"
            norm = normalize_fast(
                history,
                current,
                quick_desired,
                desired,
                spec.min_replicas,
                spec.max_replicas,
                spec.behavior,
                now,
                fast.config,
            )
        elif spec.behavior is None:
            norm = normalize_without_behavior(
                history, current, desired, spec.min_replicas, spec.max_replicas, now, config.downscale_stabilization
            )
        else:
            norm = normalize_with_behavior(
                history,
                current,
                desired,
                spec.min_replicas,
                spec.max_replicas,
                spec.behavior,
                now,
                config.downscale_stabilization,
            )
        history = norm.history
        sync.set(ABLE_TO_SCALE, "True", norm.able_reason, norm.able_message)
        sync.set(SCALING_LIMITED, "True" if norm.limited else "False", norm.limited_reason, norm.limited_message)
        desired = norm.replicas
        rescale = desired != current

    before_event = history
    if rescale:
        sync.set(
            ABLE_TO_SCALE,
            "True",
            "SucceededRescale",
            f"the HPA controller was able to update the target scale to {desired}",
        )
        sync.events.append(Event("Normal", "SuccessfulRescale", f"New size: {desired}; reason: {rescale_reason}"))
        rules = spec.behavior if spec.behavior is not None or fast is None else DEFAULT_BEHAVIOR
        history = store_scale_event(history, rules, current, desired, now)
    else:
        desired = current
    status = _status(previous, current, desired, statuses, sync.conditions, rescale, now, _generation(meta))
    return Outcome(
        desired,
        rescale,
        status,
        _fix_event_namespace(sync.events, namespace),
        history,
        error,
        rescale_reason,
        before_event,
    )


def _selector_problem(
    selector: str, competing: Sequence[str], namespace: str, name: str
) -> tuple[str, str, str] | None:
    if not selector:
        return "SelectorRequired", "selector is required", "the HPA target's scale is missing a selector"
    others = sorted({*competing, f"{namespace}/{name}"})
    if len(others) > 1:
        message = f"pods by selector {selector} are controlled by multiple HPAs: [{' '.join(others)}]"
        return "AmbiguousSelector", message, message
    return None


def rescale_failed(outcome: Outcome, previous: Mapping[str, Any], current: int, error: str, now: float) -> Outcome:
    """The status and event upstream writes when updating the scale fails (FailedUpdateScale)."""
    conditions = set_condition(
        outcome.status.get("conditions", []),
        ABLE_TO_SCALE,
        "False",
        "FailedUpdateScale",
        f"the HPA controller was unable to update the target scale: {error}",
        now,
    )
    events = tuple(e for e in outcome.events if e.reason != "SuccessfulRescale")
    events += (
        Event(
            "Warning",
            "FailedRescale",
            f"New size: {outcome.desired_replicas}; reason: {outcome.rescale_reason}; error: {error}",
        ),
    )
    status = _status(
        previous,
        current,
        int(previous.get("desiredReplicas", 0) or 0),
        list(outcome.status.get("currentMetrics", [])),
        conditions,
        False,
        now,
        outcome.status.get("observedGeneration"),
    )
    history = outcome.history_if_failed if outcome.history_if_failed is not None else outcome.history
    return Outcome(
        status["desiredReplicas"],
        False,
        status,
        events,
        history,
        error=f"failed to rescale: {error}",
        rescale_reason=outcome.rescale_reason,
    )
