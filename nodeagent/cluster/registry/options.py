"""What a request asks of the registry beyond the object: list options, delete options, context.

Parsed from query parameters (and the DeleteOptions body) by the HTTP layer, validated here with
kube-apiserver's rules and wording (ValidateListOptions: 422 Invalid on kind ListOptions).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Literal

from nodeagent.cluster.registry import errors
from nodeagent.core.errors import FieldError
from nodeagent.core.selectors import FieldSelector, LabelSelector

FieldValidation = Literal["Strict", "Warn", "Ignore"]
Propagation = Literal["Orphan", "Background", "Foreground"]
FIELD_VALIDATIONS = ("Strict", "Warn", "Ignore")
PROPAGATIONS = ("Orphan", "Background", "Foreground")


@dataclass
class Context:
    """One request: who asks (filled by authentication later), dry run, field manager, warnings."""

    dry_run: bool = False
    field_manager: str = ""
    field_validation: FieldValidation = "Warn"
    force: bool = False
    applying: bool = False  # a server-side apply: the patcher writes managedFields itself
    # a body the server built itself (the event recorder's): well-formed by construction, so no
    # field validation pass (it would return the same object); never set for a client's request
    internal: bool = False
    user: str = ""
    groups: tuple[str, ...] = ()
    principal: Any = None  # the authenticated (or impersonated) user, as the authentication room gives it
    warnings: list[str] = dc_field(default_factory=list)


@dataclass(frozen=True)
class ListOptions:
    label: LabelSelector = dc_field(default_factory=LabelSelector)
    field: FieldSelector = dc_field(default_factory=FieldSelector)
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""  # "", "Exact", "NotOlderThan"
    # watch only
    watch: bool = False
    allow_bookmarks: bool = False
    send_initial_events: bool | None = None
    timeout_seconds: int | None = None

    @property
    def filtered(self) -> bool:
        return not (self.label.empty and self.field.empty)


def validate_list_options(opts: ListOptions) -> None:
    """ValidateListOptions (apimachinery internalversion/validation)."""
    errs: list[FieldError] = []
    rv, match = opts.resource_version, opts.resource_version_match
    if match:
        if opts.watch and (match != "NotOlderThan" or opts.send_initial_events is None):
            errs.append(FieldError("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden for "
                                   "watch unless sendInitialEvents is provided"))
        if match not in ("Exact", "NotOlderThan"):
            errs.append(FieldError("resourceVersionMatch", f'Unsupported value: "{match}": supported values: '
                                   '"Exact", "NotOlderThan", ""'))
        elif not rv and not opts.watch:  # WatchList sends NotOlderThan without a resourceVersion
            errs.append(FieldError("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden unless "
                                   "resourceVersion is provided"))
        elif match == "Exact" and rv == "0":
            errs.append(FieldError("resourceVersionMatch", "Forbidden: resourceVersionMatch \"exact\" is forbidden "
                                   "for resourceVersion \"0\""))
        if opts.continue_token:
            errs.append(FieldError("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden when "
                                   "continue is provided"))
    if opts.send_initial_events is not None:
        if not opts.watch:
            errs.append(FieldError("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for list"))
        elif match != "NotOlderThan":
            errs.append(FieldError("resourceVersionMatch", "Forbidden: sendInitialEvents requires setting "
                                   "resourceVersionMatch to NotOlderThan"))
        if opts.send_initial_events and not opts.allow_bookmarks:
            errs.append(FieldError("allowWatchBookmarks", "Forbidden: sendInitialEvents requires setting "
                                   "allowWatchBookmarks to true"))
    if opts.continue_token and rv and rv != "0":
        errs.append(FieldError("resourceVersion", "Forbidden: specifying resource version is not allowed when "
                               "using continue"))
    if errs:
        raise errors.invalid("ListOptions", "meta.k8s.io", "", errs)


def parse_resource_version(rv: str) -> int:
    """A resourceVersion query value; 400 as kube-apiserver words it."""
    if not rv.isascii() or not rv.isdigit() or len(rv) > 19:
        raise errors.bad_request(f'invalid resource version "{rv}"'[:200])
    return int(rv)


@dataclass(frozen=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    propagation_policy: Propagation | None = None
    orphan_dependents: bool | None = None
    dry_run: bool = False


def parse_delete_options(body: Any, query: dict[str, str]) -> DeleteOptions:
    """DeleteOptions from the body (kubectl) and/or the query (the Python client); 400/422 when bad."""
    data: dict[str, Any] = {}
    if body is not None:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of a delete request must be a DeleteOptions object")
        data.update(body)
    for key in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents"):
        if key in query:
            data[key] = query[key]
    if "dryRun" in query:
        data["dryRun"] = [query["dryRun"]]
    errs: list[FieldError] = []
    grace = data.get("gracePeriodSeconds")
    if isinstance(grace, str):
        raw = grace
        try:
            grace = int(raw)
        except ValueError:
            raise errors.bad_request(f'invalid value for gracePeriodSeconds: "{raw[:50]}"') from None
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)):
        raise errors.bad_request("gracePeriodSeconds must be an integer")
    if isinstance(grace, int) and grace < 0:
        grace = 1  # kube-apiserver turns a negative grace period into 1 second
    policy = data.get("propagationPolicy")
    if policy is not None and policy not in PROPAGATIONS:
        errs.append(FieldError("propagationPolicy", f"Unsupported value: {policy!r}: supported values: "
                               '"Orphan", "Background", "Foreground"'))
    orphan = data.get("orphanDependents")
    if isinstance(orphan, str):
        orphan = orphan == "true"
    if orphan is not None and not isinstance(orphan, bool):
        errs.append(FieldError("orphanDependents", "must be a boolean"))
    if orphan is not None and policy is not None:
        errs.append(FieldError("propagationPolicy", "Invalid value: both OrphanDependents and "
                               "PropagationPolicy may not be set"))
    pre = data.get("preconditions") or {}
    if not isinstance(pre, dict):
        raise errors.bad_request("preconditions must be an object")
    uid, rv = pre.get("uid"), pre.get("resourceVersion")
    if (uid is not None and not isinstance(uid, str)) or (rv is not None and not isinstance(rv, str)):
        raise errors.bad_request("preconditions.uid and preconditions.resourceVersion must be strings")
    dry = data.get("dryRun") or []
    if not isinstance(dry, list) or any(d != "All" for d in dry):
        errs.append(FieldError("dryRun", f"Unsupported value: {dry!r}: supported values: \"All\""))
    if errs:
        raise errors.invalid("DeleteOptions", "meta.k8s.io", "", errs)
    return DeleteOptions(grace, uid, rv, policy, orphan, bool(dry))
