"""apps/v1: Deployment, ReplicaSet, DaemonSet, StatefulSet, ControllerRevision (stored objects only).

The strategies follow pkg/apis/apps/v1/defaults.go (RollingUpdate 25%/25%, revisionHistoryLimit 10,
progressDeadlineSeconds 600, replicas 1, ...) and the essentials of apps validation: a selector
that is required, non-empty, immutable and matches the template's labels; counts >= 0; the update
strategy's shape. metadata.generation moves with the spec only, status is written through
`/status`, and `replicas` also through `/scale` (an autoscaling/v1 Scale; apiserver/scale.py).
The controllers that act on these objects are pure cores in cluster/controllers/, wired later.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.kinds.workloads import (
    containers_images,
    count_errors,
    default_template,
    format_selector,
    immutable,
    int_or_percent_errors,
    is_int,
    is_zero,
    percent_over_100,
    quoted,
    selector_template_errors,
    spec_dict,
    status_count_errors,
    template_errors,
)
from nodeagent.cluster.registry.strategy import Obj, Strategy, get_path
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError
from nodeagent.core.names import invalid

GROUP = "apps"
SCALE = Subresource("scale", "Scale", ("get", "patch", "update"), group="autoscaling", version="v1")
ALWAYS = ("Always",)
CONTAINERS = Column("Containers", priority=1, description="Names of each container in the template.")
IMAGES = Column("Images", priority=1, description="Images referenced by each container in the template.")
SELECTOR = Column("Selector", priority=1, description="Label selector for pods. Existing ReplicaSets whose pods "
                                                      "are selected by this will be the ones affected by this "
                                                      "deployment.")


def _status(kind: str) -> Subresource:
    return Subresource("status", kind, ("get", "patch", "update"))


def _ready(obj: Mapping[str, Any]) -> str:
    """READY: ready replicas out of the desired ones."""
    return f"{_num(obj, 'status', 'readyReplicas')}/{_num(obj, 'spec', 'replicas')}"


def _num(obj: Mapping[str, Any], *path: str) -> int:
    value = get_path(obj, *path)
    return value if is_int(value) else 0


class WorkloadStrategy(Strategy):
    """A controller of pods: status apart, generation on spec changes, an immutable selector."""

    has_status = True
    generation = True
    spec_subresources = ("scale",)
    restart_policies: ClassVar[tuple[str, ...]] = ALWAYS
    status_counts: ClassVar[tuple[str, ...]] = ()
    selector_kind: ClassVar[str] = "deployment"

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            self.default_spec(spec)
            default_template(spec.get("template"))

    def default_spec(self, spec: dict[str, Any]) -> None:
        """The kind's SetDefaults_<Kind>, on a spec that is an object."""

    def validate(self, obj: Obj) -> list[FieldError]:
        spec, errs = spec_dict(obj)
        if spec is None:
            return errs
        errs += count_errors(spec, "spec", "replicas")
        errs += count_errors(spec, "spec", "minReadySeconds")
        errs += count_errors(spec, "spec", "revisionHistoryLimit")
        errs += selector_template_errors(spec, "spec", self.selector_kind)
        errs += template_errors(spec.get("template"), "spec.template", self.restart_policies)
        return errs + self.validate_spec(spec)

    def validate_spec(self, spec: dict[str, Any]) -> list[FieldError]:
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs = self.validate(new)
        if not errs:
            errs += immutable(get_path(new, "spec", "selector"), get_path(old, "spec", "selector"), "spec.selector")
        return errs

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return status_count_errors(new.get("status"), ("observedGeneration", *self.status_counts))

    def prepare_for_subresource_update(self, subresource: str, new: Obj, old: Obj) -> Obj:
        """`/scale` (apiserver/scale.py) builds the new object from the stored one: only spec.replicas moves."""
        if subresource != "scale":
            raise NotImplementedError(subresource)
        out = copy.deepcopy(old)
        out["spec"]["replicas"] = new["spec"]["replicas"]
        return out


class DeploymentStrategy(WorkloadStrategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, "v1", "Deployment", "deployments", "deployment", True, short_names=("deploy",),
        categories=("all",), subresources=(_status("Deployment"), SCALE))
    status_counts = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas",
                     "terminatingReplicas", "collisionCount")
    columns = (NAME, Column("Ready", description="Number of the pod with ready state"),
               Column("Up-to-date", type="integer", description="Total number of non-terminated pods targeted by "
                                                                "this deployment that have the desired template "
                                                                "spec."),
               Column("Available", type="integer", description="Total number of available pods (ready for at least "
                                                               "minReadySeconds) targeted by this deployment."),
               AGE, CONTAINERS, IMAGES, SELECTOR)

    def default_spec(self, spec: dict[str, Any]) -> None:
        spec.setdefault("replicas", 1)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", "25%")
                    rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)

    def validate_spec(self, spec: dict[str, Any]) -> list[FieldError]:
        errs = count_errors(spec, "spec", "progressDeadlineSeconds", 1)
        pds, mrs = spec.get("progressDeadlineSeconds"), spec.get("minReadySeconds") or 0
        if not errs and is_int(pds) and is_int(mrs) and pds <= mrs:
            errs.append(FieldError("spec.progressDeadlineSeconds",
                                   invalid(pds, "must be greater than minReadySeconds")))
        if "paused" in spec and not isinstance(spec["paused"], bool):
            errs.append(FieldError("spec.paused", invalid(str(spec["paused"])[:60], "must be a boolean")))
        strategy = spec.get("strategy")
        if not isinstance(strategy, dict):
            return [*errs, FieldError("spec.strategy", invalid(str(strategy)[:60], "must be an object"))]
        kind, rolling = strategy.get("type"), strategy.get("rollingUpdate")
        if kind not in ("Recreate", "RollingUpdate"):
            errs.append(FieldError("spec.strategy.type", f"Unsupported value: {quoted(kind)}: supported values: "
                                                         '"Recreate", "RollingUpdate"'))
        elif kind == "Recreate" and rolling is not None:
            errs.append(FieldError("spec.strategy.rollingUpdate", "Forbidden: may not be specified when strategy "
                                                                  "`type` is 'Recreate'"))
        elif kind == "RollingUpdate":
            errs += rolling_update_errors(rolling, "spec.strategy.rollingUpdate")
        return errs

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        spec = obj.get("spec") or {}
        containers, images = containers_images(spec.get("template"))
        return [obj["metadata"].get("name", ""), _ready(obj),
                _num(obj, "status", "updatedReplicas"), _num(obj, "status", "availableReplicas"), age(obj, now_wall),
                containers, images, format_selector(spec.get("selector"))]


def rolling_update_errors(rolling: object, path: str, *, surge_default: object = "25%") -> list[FieldError]:
    """maxUnavailable and maxSurge: ints or percents, not both zero, maxUnavailable at most 100%."""
    if rolling is None:
        return []
    if not isinstance(rolling, dict):
        return [FieldError(path, invalid(str(rolling)[:60], "must be an object"))]
    unavailable, surge = rolling.get("maxUnavailable"), rolling.get("maxSurge")
    errs = int_or_percent_errors(unavailable, f"{path}.maxUnavailable")
    errs += int_or_percent_errors(surge, f"{path}.maxSurge")
    if not errs:
        errs += percent_over_100(unavailable, f"{path}.maxUnavailable")
        if is_zero(unavailable) and is_zero(surge):
            errs.append(FieldError(f"{path}.maxUnavailable", invalid(unavailable, "may not be 0 when `maxSurge` is 0")))
    return errs


class ReplicaSetStrategy(WorkloadStrategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, "v1", "ReplicaSet", "replicasets", "replicaset", True, short_names=("rs",),
        categories=("all",), subresources=(_status("ReplicaSet"), SCALE))
    status_counts = ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "terminatingReplicas")
    columns = (NAME, Column("Desired", type="integer", description="Replicas is the number of desired replicas."),
               Column("Current", type="integer", description="Replicas is the most recently observed number of "
                                                             "replicas."),
               Column("Ready", type="integer", description="The number of ready replicas for this replica set."),
               AGE, CONTAINERS, IMAGES,
               Column("Selector", priority=1, description="Selector is a label query over pods that should match "
                                                          "the replica count."))

    def default_spec(self, spec: dict[str, Any]) -> None:
        spec.setdefault("replicas", 1)

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        spec = obj.get("spec") or {}
        containers, images = containers_images(spec.get("template"))
        return [obj["metadata"].get("name", ""), _num(obj, "spec", "replicas"), _num(obj, "status", "replicas"),
                _num(obj, "status", "readyReplicas"), age(obj, now_wall), containers, images,
                format_selector(spec.get("selector"))]


class DaemonSetStrategy(WorkloadStrategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, "v1", "DaemonSet", "daemonsets", "daemonset", True, short_names=("ds",),
        categories=("all",), subresources=(_status("DaemonSet"),))
    selector_kind = "daemonset"
    status_counts = ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady",
                     "updatedNumberScheduled", "numberAvailable", "numberUnavailable", "collisionCount")
    columns = (NAME, Column("Desired", type="integer", description="The total number of nodes that should be "
                                                                   "running the daemon pod."),
               Column("Current", type="integer", description="The number of nodes that are running at least 1 daemon "
                                                             "pod and are supposed to run the daemon pod."),
               Column("Ready", type="integer", description="The number of nodes that should be running the daemon "
                                                           "pod and have one or more of the daemon pod running and "
                                                           "ready."),
               Column("Up-to-date", type="integer", description="The total number of nodes that are running updated "
                                                                "daemon pod"),
               Column("Available", type="integer", description="The number of nodes that should be running the "
                                                               "daemon pod and have one or more of the daemon pod "
                                                               "running and available."),
               Column("Node Selector", description="NodeSelector is a selector which must be true for the pod to "
                                                   "fit on a node."),
               AGE, CONTAINERS, IMAGES,
               Column("Selector", priority=1, description="A label query over pods that are managed by the daemon "
                                                          "set."))

    def default_spec(self, spec: dict[str, Any]) -> None:
        strategy = spec.setdefault("updateStrategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", 1)
                    rolling.setdefault("maxSurge", 0)
        spec.setdefault("revisionHistoryLimit", 10)

    def validate_spec(self, spec: dict[str, Any]) -> list[FieldError]:
        strategy = spec.get("updateStrategy")
        if not isinstance(strategy, dict):
            return [FieldError("spec.updateStrategy", invalid(str(strategy)[:60], "must be an object"))]
        kind, rolling = strategy.get("type"), strategy.get("rollingUpdate")
        if kind not in ("OnDelete", "RollingUpdate"):
            return [FieldError("spec.updateStrategy.type", f"Unsupported value: {quoted(kind)}: supported "
                                                           'values: "OnDelete", "RollingUpdate"')]
        if kind == "RollingUpdate":
            return rolling_update_errors(rolling, "spec.updateStrategy.rollingUpdate")
        return []

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        spec = obj.get("spec") or {}
        containers, images = containers_images(spec.get("template"))
        node_selector = get_path(spec, "template", "spec", "nodeSelector")
        shown = ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) \
            if isinstance(node_selector, Mapping) and node_selector else "<none>"
        return [obj["metadata"].get("name", ""), _num(obj, "status", "desiredNumberScheduled"),
                _num(obj, "status", "currentNumberScheduled"), _num(obj, "status", "numberReady"),
                _num(obj, "status", "updatedNumberScheduled"), _num(obj, "status", "numberAvailable"), shown,
                age(obj, now_wall), containers, images, format_selector(spec.get("selector"))]


class StatefulSetStrategy(WorkloadStrategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, "v1", "StatefulSet", "statefulsets", "statefulset", True, short_names=("sts",),
        categories=("all",), subresources=(_status("StatefulSet"), SCALE))
    selector_kind = "statefulset"
    status_counts = ("replicas", "readyReplicas", "currentReplicas", "updatedReplicas", "availableReplicas",
                     "collisionCount")
    columns = (NAME, Column("Ready", description="Number of the pod with ready state"), AGE, CONTAINERS, IMAGES)

    def default_spec(self, spec: dict[str, Any]) -> None:
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {})
        if isinstance(strategy, dict):
            if not strategy.get("type"):  # rollingUpdate is created only along with a defaulted type
                strategy["type"] = "RollingUpdate"
                strategy.setdefault("rollingUpdate", {})
            rolling = strategy.get("rollingUpdate")
            if strategy["type"] == "RollingUpdate" and isinstance(rolling, dict):
                rolling.setdefault("partition", 0)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})

    def validate_spec(self, spec: dict[str, Any]) -> list[FieldError]:
        errs: list[FieldError] = []
        if spec.get("podManagementPolicy") not in ("OrderedReady", "Parallel"):
            errs.append(FieldError("spec.podManagementPolicy", f"Unsupported value: "
                                   f"{quoted(str(spec.get('podManagementPolicy'))[:60])}: supported values: "
                                   '"OrderedReady", "Parallel"'))
        strategy = spec.get("updateStrategy")
        if not isinstance(strategy, dict) or strategy.get("type") not in ("OnDelete", "RollingUpdate"):
            kind = strategy.get("type") if isinstance(strategy, dict) else strategy
            errs.append(FieldError("spec.updateStrategy.type", f"Unsupported value: {quoted(kind)}: supported "
                                                               'values: "OnDelete", "RollingUpdate"'))
        elif isinstance(rolling := strategy.get("rollingUpdate"), dict):
            errs += count_errors(rolling, "spec.updateStrategy.rollingUpdate", "partition")
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs = super().validate_update(new, old)
        if not errs:
            for f in ("serviceName", "volumeClaimTemplates", "podManagementPolicy"):
                errs += immutable(get_path(new, "spec", f), get_path(old, "spec", f), f"spec.{f}")
        return errs

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        containers, images = containers_images((obj.get("spec") or {}).get("template"))
        return [obj["metadata"].get("name", ""), _ready(obj),
                age(obj, now_wall), containers, images]


class ControllerRevisionStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(GROUP, "v1", "ControllerRevision", "controllerrevisions",
                                                "controllerrevision", True)
    columns = (NAME, Column("Controller", description="Controller of the object."),
               Column("Revision", type="integer", description="Revision indicates the revision of the state "
                                                              "represented by Data."), AGE)

    def validate(self, obj: Obj) -> list[FieldError]:
        revision = obj.get("revision")
        if revision is None:
            return [FieldError("revision", "Required value")]
        if not is_int(revision):
            return [FieldError("revision", invalid(str(revision)[:60], "must be an integer"))]
        if revision < 0:
            return [FieldError("revision", invalid(revision, "must be greater than or equal to 0"))]
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return self.validate(new) or immutable(new.get("data"), old.get("data"), "data")

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        owner = "<none>"
        for ref in obj["metadata"].get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("controller") is True:
                group = str(ref.get("apiVersion", "")).rpartition("/")[0]
                kind = str(ref.get("kind", "")).lower()
                owner = f"{kind}.{group}/{ref.get('name', '')}" if group else f"{kind}/{ref.get('name', '')}"
        revision = obj.get("revision")
        return [obj["metadata"].get("name", ""), owner, revision if is_int(revision) else 0, age(obj, now_wall)]
