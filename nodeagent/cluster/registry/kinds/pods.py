"""Pods (core/v1): defaulting, validation through nodeagent.core.model, graceful deletion, columns.

Validation reuses the agent's Pod model (what the agents can run), so the API refuses what no
node could start, with the same field errors. Fields the model does not know are left to the
schema's field validation (Strict/Warn/Ignore), not refused here. Graceful deletion follows
pkg/registry/core/pod/strategy.go: the grace period is the request's, else the pod's
terminationGracePeriodSeconds; 0 when the pod is not bound or already terminal; otherwise the pod
stays with deletionTimestamp and deletionGracePeriodSeconds until its node's agent deletes it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.podresize import resize_errors, resize_view
from nodeagent.cluster.registry.strategy import Obj, Strategy, get_path
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import Pod, PodSpec, checked_pod, defaulted_spec, metadata_errors, parse_pod, spec_errors
from nodeagent.core.names import invalid
from nodeagent.core.qos import qos_class

TERMINAL = ("Succeeded", "Failed")
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
DEFAULT_GRACE = 30
# what a pod update may change in spec (ValidatePodUpdate); everything else is immutable
_MUTABLE_CONTAINER = ("image", "imagePullPolicy")  # the pull policy follows a new image's default
M = TypeVar("M", bound=BaseModel)


def _stripped(model: type[M], manifest: Obj) -> tuple[Obj, M | None]:
    """The manifest without the fields `model` does not know (their fate is field validation's),
    and the model built from it when it validated. The manifest is copied only when there is
    something to strip, so the common case costs one model_validate and no copy."""
    data = manifest
    for _ in range(4):
        try:
            return data, model.model_validate(data, by_alias=True, by_name=False)
        except ValidationError as exc:
            extra = [e["loc"] for e in exc.errors(include_url=False) if e["type"] == "extra_forbidden"]
            if not extra:
                return data, None
            if data is manifest:
                data = copy.deepcopy(manifest)
            for loc in extra:
                cur: Any = data
                try:
                    for part in loc[:-1]:
                        cur = cur[part]
                    cur.pop(loc[-1], None)
                except (KeyError, IndexError, TypeError, AttributeError):
                    return data, None
    return data, None


class _Spec:
    """One distinct spec: its model, and its checks and defaults once asked for."""

    __slots__ = ("defaulted", "errors", "model")

    def __init__(self, model: PodSpec) -> None:
        self.model = model
        self.errors: list[FieldError] | None = None
        self.defaulted: PodSpec | None = None

    def checked(self, pod: Pod) -> Pod:
        """checked_pod for a pod whose spec is this model: the spec's part is computed once."""
        if self.errors is None:
            self.errors = spec_errors(self.model)
            self.defaulted = None if self.errors else defaulted_spec(self.model)
        errs = metadata_errors(pod) + self.errors
        if errs or self.defaulted is None:
            raise ValidationErrors(errs)
        return pod.model_copy(update={"spec": self.defaulted})


class _SpecMemo:
    """PodSpec models by the spec's canonical JSON: a ReplicaSet's pods share one spec, and a pod
    is parsed twice (its create, then the scheduler's cache), so the model (frozen, so shareable),
    its checks and its defaults are computed once per distinct spec, not per pod and per reader.
    A spec the model refuses is not remembered: the caller parses the whole pod, whose errors
    name the full field paths."""

    SIZE = 512

    def __init__(self) -> None:
        self._specs: dict[bytes, _Spec] = {}

    def get(self, spec: Any) -> _Spec | None:
        if not isinstance(spec, dict):
            return None
        try:
            key = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # what orjson cannot encode (an integer beyond 64 bits): parsed the long way
            return None
        hit = self._specs.get(key)
        if hit is None:
            _, model = _stripped(PodSpec, spec)
            if model is None:
                return None
            if len(self._specs) >= self.SIZE:
                del self._specs[next(iter(self._specs))]  # the oldest spec goes
            hit = self._specs[key] = _Spec(model)
        return hit


_SPECS = _SpecMemo()


def _parsed(manifest: Obj) -> Pod:
    """parse_pod of the manifest without the fields the model does not know; the spec's part
    comes from the memo when a pod with the same spec was parsed. Raises ValidationErrors."""
    spec = _SPECS.get(manifest.get("spec"))
    if spec is not None:
        _, pod = _stripped(Pod, {**manifest, "spec": spec.model})
        if pod is not None:
            return spec.checked(pod)
    view, pod = _stripped(Pod, manifest)
    return parse_pod(view) if pod is None else checked_pod(pod)


class PodStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        "", "v1", "Pod", "pods", "pod", True, short_names=("po",), categories=("all",),
        subresources=(Subresource("status", "Pod", ("get", "patch", "update")),
                      Subresource("resize", "Pod", ("get", "patch", "update"))))
    has_status = True
    generation = True
    spec_subresources = ("resize",)  # a resize bumps metadata.generation (updatePodGeneration)
    unmanaged_subresources = ("binding",)  # BindingREST writes the pod through the storage, no field manager
    return_deleted_object = True
    field_labels = frozenset({"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                              "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
                              "status.nominatedNodeName"})
    columns = (NAME, Column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
               Column("Status", description="The aggregate status of the containers in this pod."),
               Column("Restarts", description="The number of times the containers in this pod have been restarted "
                                              "and when the last container in this pod has restarted."),
               AGE,
               Column("IP", priority=1, description="IP address allocated to the pod."),
               Column("Node", priority=1, description="Name of the Node the Pod is assigned to."),
               Column("Nominated Node", priority=1, description="Name of the node nominated by the scheduler."),
               Column("Readiness Gates", priority=1, description="The readiness gates of the pod."))

    def __init__(self) -> None:
        self._last: tuple[tuple[int, int], Any, Pod | list[FieldError]] | None = None

    def initial_status(self, obj: Obj) -> Obj:
        return {"phase": "Pending"}

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        default_pod_spec(spec)
        status = obj.get("status")
        parsed = self._parse(obj)
        if isinstance(status, dict) and "qosClass" not in status and isinstance(parsed, Pod):
            status["qosClass"] = qos_class(parsed)

    def _parse(self, obj: Obj) -> Pod | list[FieldError]:
        """The model's view of the pod, parsed once per object (default() then validate() ask)."""
        key = (id(obj), id(obj.get("spec")))
        if self._last is not None and self._last[0] == key and self._last[1] is obj.get("spec"):
            return self._last[2]
        result: Pod | list[FieldError]
        try:
            result = _parsed(self._model_view(obj))
        except ValidationErrors as e:
            result = [x for x in e.errors if not x.path.startswith("metadata.")]
        self._last = (key, obj.get("spec"), result)
        return result

    @staticmethod
    def _model_view(obj: Obj) -> Obj:
        meta = {k: v for k, v in (obj.get("metadata") or {}).items()
                if k in ("name", "namespace", "uid", "labels", "annotations")}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": obj.get("spec")}

    def validate(self, obj: Obj) -> list[FieldError]:
        if not isinstance(obj.get("spec"), dict):
            return [FieldError("spec", "Required value")]
        parsed = self._parse(obj)
        self._last = None  # used once: default() then validate() of the same object, with no await between
        return parsed if isinstance(parsed, list) else []

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs = self.validate(new)
        if errs:
            return errs
        if _masked(new.get("spec")) != _masked(old.get("spec")):
            return [FieldError("spec", "Forbidden: pod updates may not change fields other than "
                                       "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                                       "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
                                       "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 "
                                       "if it was previously negative)")]
        old_tol = old["spec"].get("tolerations") or []
        new_tol = new["spec"].get("tolerations") or []
        if any(t not in new_tol for t in old_tol):
            return [FieldError("spec.tolerations", "Forbidden: existing toleration can not be modified except its "
                                                   "tolerationSeconds")]
        return []

    def prepare_for_subresource_update(self, subresource: str, new: Obj, old: Obj) -> Obj:
        """pods/binding (registry/binding.py) builds the whole new pod from the stored one;
        pods/resize keeps only the containers' resources and resizePolicy of the request
        (registry/podresize.py) and refuses, 422, what ValidatePodResize refuses."""
        if subresource == "binding":
            return new
        if subresource != "resize":
            raise NotImplementedError(subresource)
        view = resize_view(new, old)
        defaulted = copy.deepcopy(view)  # the checks compare what was sent with what is stored
        if isinstance(defaulted.get("spec"), dict):
            default_pod_spec(defaulted["spec"])  # requests default from limits, as on any decode
        parsed = self._parse(defaulted)
        self._last = None
        errs = parsed if isinstance(parsed, list) else []
        old_qos = str((old.get("status") or {}).get("qosClass") or "")
        if not old_qos:
            try:
                old_qos = qos_class(pod_model(old))
            except ValidationErrors:
                old_qos = ""
        new_qos = qos_class(parsed) if isinstance(parsed, Pod) else None
        errs += resize_errors(view, old, old_qos, new_qos)
        if errs:
            raise errors.invalid("Pod", "", str(old["metadata"].get("name") or ""), errs)
        return defaulted

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        status = new.get("status")
        if status is None:
            return []
        if not isinstance(status, dict):
            return [FieldError("status", invalid(str(status)[:60], "must be an object"))]
        phase = status.get("phase")
        if phase is not None and phase not in PHASES:
            return [FieldError("status.phase", f"Unsupported value: {phase!r}: supported values: "
                                               + ", ".join(f'"{p}"' for p in PHASES))]
        old_phase = (old.get("status") or {}).get("phase")
        if old_phase in TERMINAL and phase not in (None, old_phase):
            return [FieldError("status.phase", f"Forbidden: cannot transition from terminal phase {old_phase}")]
        return []

    def fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        out = super().fields(obj)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        out["spec.nodeName"] = str(spec.get("nodeName") or "")
        out["spec.restartPolicy"] = str(spec.get("restartPolicy") or "")
        out["spec.schedulerName"] = str(spec.get("schedulerName") or "")
        out["spec.serviceAccountName"] = str(spec.get("serviceAccountName") or "")
        out["spec.hostNetwork"] = "true" if spec.get("hostNetwork") else "false"
        out["status.phase"] = str(status.get("phase") or "")
        out["status.podIP"] = str(status.get("podIP") or "")
        ips = status.get("podIPs") or []
        out["status.podIPs"] = ",".join(str(i.get("ip", "")) for i in ips if isinstance(i, dict))
        out["status.nominatedNodeName"] = str(status.get("nominatedNodeName") or "")
        return out

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        containers = spec.get("containers") or []
        statuses = [s for s in status.get("containerStatuses") or [] if isinstance(s, dict)]
        ready = sum(1 for s in statuses if s.get("ready"))
        restarts = sum(int(s.get("restartCount") or 0) for s in statuses if isinstance(s.get("restartCount"), int))
        gates = spec.get("readinessGates") or []
        return [meta.get("name", ""), f"{ready}/{len(containers)}", pod_status_reason(obj), restarts,
                age(obj, now_wall), status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
                status.get("nominatedNodeName") or "<none>", f"0/{len(gates)}" if gates else "<none>"]

    def delete_grace(self, obj: Mapping[str, Any], requested: int | None) -> int:
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") or get_path(obj, "status", "phase") in TERMINAL:
            return 0
        if requested is not None:
            return requested
        grace = spec.get("terminationGracePeriodSeconds")
        return grace if isinstance(grace, int) and grace >= 0 else DEFAULT_GRACE


def default_pod_spec(spec: Obj, restart_policy: str = "Always") -> None:
    """SetDefaults_PodSpec and its containers' defaults, in place (pods and workload templates)."""
    spec.setdefault("restartPolicy", restart_policy)
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or ():
            if not isinstance(c, dict):
                continue
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            for port in c.get("ports") or ():
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
            image = c.get("image")
            if isinstance(image, str) and image:
                tag = image.rsplit("/", 1)[-1]
                latest = ":" not in tag or tag.endswith(":latest")
                c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            res = c.get("resources")
            if isinstance(res, dict) and isinstance(res.get("limits"), dict):
                requests = res.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, q in res["limits"].items():
                        requests.setdefault(name, q)


def _masked(spec: Any) -> Any:
    """The spec without what an update may change."""
    if not isinstance(spec, dict):
        return spec
    out = {k: v for k, v in spec.items()
           if k not in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")}
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in c.items() if k not in _MUTABLE_CONTAINER} if isinstance(c, dict) else c
                        for c in out[key]]
    return out


def pod_status_reason(pod: Mapping[str, Any]) -> str:
    """kubectl's STATUS column (printPod): the phase, or what a container is doing or did."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    for cs in status.get("containerStatuses") or []:
        if not isinstance(cs, dict):
            continue
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if isinstance(waiting, dict) and waiting.get("reason"):
            reason = waiting["reason"]
        elif isinstance(terminated, dict):
            if terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Signal:{terminated['signal']}"
            else:
                reason = f"ExitCode:{terminated.get('exitCode', 0)}"
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def pod_model(obj: Mapping[str, Any]) -> Pod:
    """The core model of a stored pod (what the scheduler and admission compute with); fields the
    model does not know are left out. ValidationErrors for a pod no node could run."""
    return _parsed(PodStrategy._model_view(dict(obj)))
