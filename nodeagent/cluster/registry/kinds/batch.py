"""batch/v1: Job and CronJob (their controllers: controllers/manager/job.py and cronjob.py).

Defaults follow pkg/apis/batch/v1/defaults.go: a Job gets completions and parallelism 1 when
neither is set, backoffLimit 6, completionMode NonIndexed, suspend false and a
podReplacementPolicy; a CronJob gets concurrencyPolicy Allow, suspend false and history limits
3/1. A Job's selector is generated from its uid (batch.kubernetes.io/controller-uid) unless
spec.manualSelector is true, as the job strategy's PrepareForCreate does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.kinds.apps import CONTAINERS, IMAGES, WorkloadStrategy
from nodeagent.cluster.registry.kinds.workloads import (
    containers_images,
    count_errors,
    default_template,
    format_selector,
    immutable,
    is_int,
    quoted,
    selector_template_errors,
    spec_dict,
    template_errors,
)
from nodeagent.cluster.registry.strategy import Obj, Strategy, get_path
from nodeagent.cluster.registry.table import AGE, NAME, Column, age, human_duration, since
from nodeagent.core.errors import FieldError
from nodeagent.core.names import invalid
from nodeagent.core.timefmt import parse_rfc3339

GROUP = "batch"
NEVER_ON_FAILURE = ("OnFailure", "Never")
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID, LEGACY_JOB_NAME = "controller-uid", "job-name"
CRONJOB_NAME_MAX = 52  # a Job's name is the CronJob's plus 11 characters, and must fit a label value
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_FIELD = re.compile(r"^[0-9A-Za-z*/,?\-]+$")
SELECTOR = Column("Selector", priority=1, description="A label query over pods that should match the pod count.")


def _status(kind: str) -> Subresource:
    return Subresource("status", kind, ("get", "patch", "update"))


def job_spec_defaults(spec: dict[str, Any]) -> None:
    """SetDefaults_Job on a spec that is an object."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2**31 - 1 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    spec.setdefault("manualSelector", False)
    rules = get_path(spec, "podFailurePolicy", "rules")
    for rule in rules if isinstance(rules, list) else ():
        patterns = rule.get("onPodConditions") if isinstance(rule, dict) else None
        for pattern in patterns if isinstance(patterns, list) else ():
            if isinstance(pattern, dict) and not pattern.get("status"):
                pattern["status"] = "True"
    default_template(spec.get("template"))


def job_spec_errors(spec: dict[str, Any], path: str) -> list[FieldError]:
    """ValidateJobSpec's essentials (without the selector, which a CronJob's template need not carry)."""
    errs: list[FieldError] = []
    for name in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished", "backoffLimitPerIndex",
                 "maxFailedIndexes"):
        errs += count_errors(spec, path, name)
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and (not is_int(ads) or ads <= 0):
        errs.append(FieldError(f"{path}.activeDeadlineSeconds", invalid(str(ads)[:60], "must be greater than 0")))
    for name in ("suspend", "manualSelector"):
        if spec.get(name) is not None and not isinstance(spec[name], bool):
            errs.append(FieldError(f"{path}.{name}", invalid(str(spec[name])[:60], "must be a boolean")))
    mode = spec.get("completionMode")
    if mode not in (None, "NonIndexed", "Indexed"):
        errs.append(FieldError(f"{path}.completionMode", f"Unsupported value: {quoted(mode)}: supported values: "
                                                         '"NonIndexed", "Indexed"'))
    elif mode == "Indexed" and spec.get("completions") is None:
        errs.append(FieldError(f"{path}.completions", "Required value: when completion mode is Indexed"))
    policy = spec.get("podReplacementPolicy")
    if policy not in (None, "TerminatingOrFailed", "Failed"):
        errs.append(FieldError(f"{path}.podReplacementPolicy", f"Unsupported value: {quoted(policy)}: supported "
                                                               'values: "Failed", "TerminatingOrFailed"'))
    errs += template_errors(spec.get("template"), f"{path}.template", NEVER_ON_FAILURE)
    return errs


class JobStrategy(WorkloadStrategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, "v1", "Job", "jobs", "job", True, categories=("all",), subresources=(_status("Job"),))
    restart_policies = NEVER_ON_FAILURE
    selector_kind = "job"
    status_counts = ("active", "succeeded", "failed", "terminating", "ready")
    field_labels = frozenset({"status.successful"})
    columns = (NAME, Column("Status", description="Status of the job."),
               Column("Completions", description="The desired number of successfully finished pods the job should be "
                                                 "run with."),
               Column("Duration", description="Time required to complete the job."), AGE, CONTAINERS, IMAGES, SELECTOR)

    def prepare_for_create(self, obj: Obj) -> None:
        super().prepare_for_create(obj)
        obj["status"] = {}
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("manualSelector") is not True:
            self._generate_selector(obj, spec)

    @staticmethod
    def _generate_selector(obj: Obj, spec: dict[str, Any]) -> None:
        """generateSelector: the uid as the selector, the uid and the job's name as template labels."""
        meta = obj["metadata"]
        uid, name = str(meta.get("uid", "")), meta.get("name")
        template = spec.get("template")
        if isinstance(template, dict):
            tmeta = template.setdefault("metadata", {})
            if isinstance(tmeta, dict):
                labels = tmeta.get("labels")
                if labels is None:
                    labels = tmeta["labels"] = {}
                if isinstance(labels, dict):
                    labels.setdefault(CONTROLLER_UID, uid)
                    labels.setdefault(LEGACY_CONTROLLER_UID, uid)
                    if isinstance(name, str):
                        labels.setdefault(JOB_NAME, name)
                        labels.setdefault(LEGACY_JOB_NAME, name)
        if spec.get("selector") is None:
            spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}

    def default(self, obj: Obj) -> None:
        """SetDefaults_Job, which also gives a Job without labels its template's labels (upstream
        runs it again on every read, so the generated ones show on the Job too)."""
        super().default(obj)
        labels = get_path(obj, "spec", "template", "metadata", "labels")
        if isinstance(labels, dict) and labels and not obj["metadata"].get("labels"):
            obj["metadata"]["labels"] = dict(labels)

    def default_spec(self, spec: dict[str, Any]) -> None:
        job_spec_defaults(spec)

    def validate(self, obj: Obj) -> list[FieldError]:
        spec, errs = spec_dict(obj)
        if spec is None:
            return errs
        errs = job_spec_errors(spec, "spec")
        errs += selector_template_errors(spec, "spec", "job")
        if not errs and spec.get("manualSelector") is not True:
            uid = obj["metadata"].get("uid")
            if get_path(spec, "selector", "matchLabels", CONTROLLER_UID) != uid:
                errs.append(FieldError("spec.selector", invalid(str(spec.get("selector"))[:120],
                                                                "`selector` not auto-generated")))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs = self.validate(new)
        if errs:
            return errs
        for f in ("selector", "completionMode", "podFailurePolicy", "backoffLimitPerIndex"):
            errs += immutable(get_path(new, "spec", f), get_path(old, "spec", f), f"spec.{f}")
        if get_path(new, "spec", "completionMode") != "Indexed":
            errs += immutable(get_path(new, "spec", "completions"), get_path(old, "spec", "completions"),
                              "spec.completions")
        if not get_path(old, "spec", "suspend"):  # a suspended job's template may change (scheduling directives)
            errs += immutable(get_path(new, "spec", "template"), get_path(old, "spec", "template"), "spec.template")
        return errs

    def fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        out = super().fields(obj)
        succeeded = get_path(obj, "status", "succeeded")
        out["status.successful"] = str(succeeded if is_int(succeeded) else 0)
        return out

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        succeeded = status.get("succeeded") if is_int(status.get("succeeded")) else 0
        completions, parallelism = spec.get("completions"), spec.get("parallelism")
        if is_int(completions):
            shown = f"{succeeded}/{completions}"
        elif is_int(parallelism) and parallelism > 1:
            shown = f"{succeeded}/1 of {parallelism}"
        else:
            shown = f"{succeeded}/1"
        containers, images = containers_images(spec.get("template"))
        return [obj["metadata"].get("name", ""), job_status(obj), shown, _duration(status, now_wall),
                age(obj, now_wall), containers, images, format_selector(spec.get("selector"))]


def job_status(job: Mapping[str, Any]) -> str:
    """kubectl's STATUS column for a Job (printJob): its finished or suspended condition, else Running."""
    conditions = [c for c in get_path(job, "status", "conditions") or [] if isinstance(c, dict)]

    def true(kind: str) -> bool:
        return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)

    if true("Complete"):
        return "Complete"
    if true("Failed"):
        return "Failed"
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    for kind in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if true(kind):
            return kind
    return "Running"


def _duration(status: Mapping[str, Any], now_wall: float) -> str:
    start = parse_rfc3339(status.get("startTime"))
    if start is None:
        return ""
    end = parse_rfc3339(status.get("completionTime"))
    return human_duration((end if end is not None else now_wall) - start)


def schedule_errors(schedule: object) -> list[FieldError]:
    """The cron schedule's shape (five fields or a descriptor); TZ/CRON_TZ belong in spec.timeZone."""
    if not isinstance(schedule, str) or not schedule.strip():
        return [FieldError("spec.schedule", "Required value")]
    if "TZ" in schedule:
        return [FieldError("spec.schedule", invalid(schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone "
                                                              "field instead"))]
    fields = schedule.split()
    if fields[0].startswith("@"):
        if (fields[0] == "@every" and len(fields) == 2) or (len(fields) == 1 and fields[0] in MACROS):
            return []
        return [FieldError("spec.schedule", invalid(schedule, f"unrecognized descriptor: {fields[0]}"))]
    if len(fields) != 5:
        return [FieldError("spec.schedule", invalid(schedule, f"expected exactly 5 fields, found {len(fields)}: "
                                                              f"[{' '.join(fields)}]"))]
    bad = next((f for f in fields if not _FIELD.match(f)), None)
    if bad is not None:
        return [FieldError("spec.schedule", invalid(schedule, f"failed to parse field: {bad}"))]
    return []


class CronJobStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, "v1", "CronJob", "cronjobs", "cronjob", True, short_names=("cj",), categories=("all",),
        subresources=(_status("CronJob"),))
    has_status = True
    generation = True
    columns = (NAME, Column("Schedule", description="The schedule in Cron format, see "
                                                    "https://en.wikipedia.org/wiki/Cron."),
               Column("Timezone", description="The time zone name for the given schedule, see "
                                              "https://en.wikipedia.org/wiki/List_of_tz_database_time_zones."),
               Column("Suspend", type="boolean", description="This flag tells the controller to suspend subsequent "
                                                             "executions, it does not apply to already started "
                                                             "executions."),
               Column("Active", type="integer", description="A list of pointers to currently running jobs."),
               Column("Last Schedule", description="Information when was the last time the job was successfully "
                                                   "scheduled."),
               AGE, CONTAINERS, IMAGES, SELECTOR)

    def initial_status(self, obj: Obj) -> Obj:
        return {}

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
        job_spec = get_path(spec, "jobTemplate", "spec")
        if isinstance(job_spec, dict):
            default_template(job_spec.get("template"))

    def validate(self, obj: Obj) -> list[FieldError]:
        spec, errs = spec_dict(obj)
        name = obj["metadata"].get("name")
        if isinstance(name, str) and len(name) > CRONJOB_NAME_MAX:
            errs.append(FieldError("metadata.name", invalid(name, f"must be no more than {CRONJOB_NAME_MAX} "
                                                                  "characters")))
        if spec is None:
            return errs
        errs += schedule_errors(spec.get("schedule"))
        tz = spec.get("timeZone")
        if tz is not None and (not isinstance(tz, str) or not tz or " " in tz):
            errs.append(FieldError("spec.timeZone", invalid(str(tz)[:60], "unknown time zone")))
        policy = spec.get("concurrencyPolicy")
        if policy not in ("Allow", "Forbid", "Replace"):
            errs.append(FieldError("spec.concurrencyPolicy", f"Unsupported value: {quoted(policy)}: supported "
                                                             'values: "Allow", "Forbid", "Replace"'))
        for f in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
            errs += count_errors(spec, "spec", f)
        if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
            errs.append(FieldError("spec.suspend", invalid(str(spec["suspend"])[:60], "must be a boolean")))
        template = spec.get("jobTemplate")
        if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
            return [*errs, FieldError("spec.jobTemplate.spec", "Required value")]
        return errs + job_spec_errors(template["spec"], "spec.jobTemplate.spec")

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        status = new.get("status")
        if status is not None and not isinstance(status, dict):
            return [FieldError("status", invalid(str(status)[:60], "must be an object"))]
        return []

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        job_spec = get_path(spec, "jobTemplate", "spec") or {}
        containers, images = containers_images(job_spec.get("template") if isinstance(job_spec, Mapping) else None)
        active = status.get("active")
        last = status.get("lastScheduleTime")
        return [obj["metadata"].get("name", ""), str(spec.get("schedule", "")), spec.get("timeZone") or "<none>",
                "True" if spec.get("suspend") is True else "False", len(active) if isinstance(active, list) else 0,
                since(last, now_wall) if last else "<none>", age(obj, now_wall), containers, images,
                format_selector(job_spec.get("selector") if isinstance(job_spec, Mapping) else None)]
