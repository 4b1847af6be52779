"""The access reviews: what `kubectl auth can-i` (SelfSubjectAccessReview, and with --list
SelfSubjectRulesReview), `kubectl auth whoami` (SelfSubjectReview) and other components
(SubjectAccessReview, LocalSubjectAccessReview) ask, answered from the same authorizer chain as
the requests themselves. Each function takes the request body (a dict), validates it as
kube-apiserver does (ValidationErrors of FieldErrors with upstream's wording: the API layer
answers 422 Invalid, or 400 for the namespace mismatch of a LocalSubjectAccessReview), and
returns the object to answer with (201 Created), status filled in.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.auth.attributes import Attributes, Verdict
from nodeagent.cluster.auth.authenticator import Authenticator
from nodeagent.cluster.auth.authorizer import Authorizer
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.request import AuthnRequest
from nodeagent.cluster.auth.user import UserInfo, frozen_extra, node_identity
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.timefmt import rfc3339

AUTHZ_VERSION = "authorization.k8s.io/v1"
AUTHN_VERSION = "authentication.k8s.io/v1"


def invalid(value: object, detail: str) -> str:
    """apimachinery's field.Invalid body: nil as "null", strings quoted, objects as JSON."""
    if value is None:
        shown = '"null"'
    elif isinstance(value, bool):
        shown = "true" if value else "false"
    elif isinstance(value, (int, float)):
        shown = str(value)
    else:
        shown = json.dumps(value, separators=(",", ":"), sort_keys=True)
    return f"Invalid value: {shown}: {detail}"


class NamespaceMismatch(ValueError):
    """A LocalSubjectAccessReview whose namespace is not the URL's: 400 BadRequest."""



def _spec(body: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = body.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise ValidationErrors([FieldError("spec", invalid(spec, "must be an object"))])
    return spec


def _str(obj: Mapping[str, Any], key: str, path: str, errors: list[FieldError]) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.append(FieldError(f"{path}.{key}", invalid(value, "must be a string")))
        return ""
    return value


def _selector_text(value: object) -> str:
    """resourceAttributes.fieldSelector / labelSelector: {rawSelector} (requirements are turned
    into `key op value` terms the authorizers read the same way)."""
    if not isinstance(value, Mapping):
        return ""
    raw = value.get("rawSelector")
    if isinstance(raw, str) and raw:
        return raw
    terms = []
    for req in value.get("requirements") or []:
        if isinstance(req, Mapping) and req.get("operator") == "In" and len(req.get("values") or []) == 1:
            terms.append(f"{req.get('key')}={req['values'][0]}")
    return ",".join(terms)


def _check_metadata(body: Mapping[str, Any], errors: list[FieldError]) -> None:
    meta = body.get("metadata")
    if isinstance(meta, Mapping) and any(v not in (None, "", {}, []) for v in meta.values()):
        errors.append(FieldError("metadata", invalid(dict(meta), "must be empty")))


def _attributes(spec: Mapping[str, Any], user: UserInfo, errors: list[FieldError]) -> Attributes | None:
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if ra is not None and nra is not None:
        errors.append(FieldError("spec.nonResourceAttributes",
                                 invalid(nra, "cannot be specified in combination with resourceAttributes")))
        return None
    if ra is None and nra is None:
        errors.append(FieldError("spec.resourceAttributes",
                                 invalid(None, "exactly one of nonResourceAttributes or resourceAttributes "
                                               "must be specified")))
        return None
    if ra is not None:
        if not isinstance(ra, Mapping):
            errors.append(FieldError("spec.resourceAttributes", invalid(ra, "must be an object")))
            return None
        p = "spec.resourceAttributes"
        return Attributes(user=user, verb=_str(ra, "verb", p, errors), resource_request=True,
                          api_group=_str(ra, "group", p, errors), api_version=_str(ra, "version", p, errors),
                          resource=_str(ra, "resource", p, errors), subresource=_str(ra, "subresource", p, errors),
                          namespace=_str(ra, "namespace", p, errors), name=_str(ra, "name", p, errors),
                          field_selector=_selector_text(ra.get("fieldSelector")),
                          label_selector=_selector_text(ra.get("labelSelector")))
    if not isinstance(nra, Mapping):
        errors.append(FieldError("spec.nonResourceAttributes", invalid(nra, "must be an object")))
        return None
    p = "spec.nonResourceAttributes"
    return Attributes(user=user, verb=_str(nra, "verb", p, errors), resource_request=False,
                      path=_str(nra, "path", p, errors))


def _answer(body: Mapping[str, Any], kind: str, authorizer: Authorizer, attrs: Attributes) -> dict[str, Any]:
    d = authorizer.authorize(attrs)
    status: dict[str, Any] = {"allowed": d.verdict is Verdict.ALLOW}
    if d.verdict is Verdict.DENY:
        status["denied"] = True
    if d.reason:
        status["reason"] = d.reason
    if d.error:
        status["evaluationError"] = d.error
    out = {k: copy.deepcopy(v) for k, v in body.items() if k != "status"}
    out["apiVersion"], out["kind"] = AUTHZ_VERSION, kind
    out.setdefault("metadata", {})
    out["status"] = status
    return out


def self_subject_access_review(body: Mapping[str, Any], user: UserInfo, authorizer: Authorizer) -> dict[str, Any]:
    """`kubectl auth can-i VERB RESOURCE`: may the requesting user do it?"""
    errors: list[FieldError] = []
    _check_metadata(body, errors)
    attrs = _attributes(_spec(body), user, errors)
    if errors or attrs is None:
        raise ValidationErrors(errors)
    return _answer(body, "SelfSubjectAccessReview", authorizer, attrs)


def _subject(spec: Mapping[str, Any], errors: list[FieldError]) -> UserInfo:
    name = _str(spec, "user", "spec", errors)
    uid = _str(spec, "uid", "spec", errors)
    groups = spec.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        errors.append(FieldError("spec.groups", invalid(groups, "must be a list of strings")))
        groups = []
    extra = spec.get("extra") or {}
    if not isinstance(extra, Mapping) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                                 for v in extra.values()):
        errors.append(FieldError("spec.extra", invalid(extra, "must map strings to lists of strings")))
        extra = {}
    if not name and not groups:
        errors.append(FieldError("spec.user", invalid(name, "at least one of user or group must be specified")))
    return UserInfo(name=name, uid=uid, groups=tuple(groups), extra=frozen_extra(extra))


def subject_access_review(body: Mapping[str, Any], authorizer: Authorizer) -> dict[str, Any]:
    """May the user named in spec (user, groups, extra, uid) do it? (kubectl auth can-i --as)"""
    errors: list[FieldError] = []
    _check_metadata(body, errors)
    spec = _spec(body)
    user = _subject(spec, errors)
    attrs = _attributes(spec, user, errors)
    if errors or attrs is None:
        raise ValidationErrors(errors)
    return _answer(body, "SubjectAccessReview", authorizer, attrs)


def local_subject_access_review(body: Mapping[str, Any], namespace: str, authorizer: Authorizer) -> dict[str, Any]:
    """A SubjectAccessReview limited to the namespace of its URL."""
    errors: list[FieldError] = []
    spec = _spec(body)
    if spec.get("nonResourceAttributes") is not None:
        errors.append(FieldError("spec.nonResourceAttributes",
                                 invalid(spec["nonResourceAttributes"], "disallowed on this kind of request")))
    meta = body.get("metadata") if isinstance(body.get("metadata"), Mapping) else {}
    meta_ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    user = _subject(spec, errors)
    attrs = _attributes(spec, user, errors)
    if errors or attrs is None:
        raise ValidationErrors(errors)
    if attrs.namespace != namespace or (meta_ns and meta_ns != namespace):
        raise NamespaceMismatch(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
    out = _answer(body, "LocalSubjectAccessReview", authorizer, attrs)
    out["metadata"] = {**out.get("metadata", {}), "namespace": namespace}
    return out


def self_subject_rules_review(body: Mapping[str, Any], user: UserInfo, rbac: RBACIndex | None,
                              *, node_mode: bool = True, always_allow: bool = False) -> dict[str, Any]:
    """`kubectl auth can-i --list [-n NS]`: the rules that apply to the requesting user."""
    spec = _spec(body)
    errors: list[FieldError] = []
    namespace = _str(spec, "namespace", "spec", errors)
    if errors:
        raise ValidationErrors(errors)
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    evaluation: list[str] = []
    incomplete = False
    if always_allow:
        resource_rules.append({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})
        non_resource_rules.append({"verbs": ["*"], "nonResourceURLs": ["*"]})
    if node_mode and node_identity(user) is not None:
        incomplete = True
        evaluation.append("node authorizer does not support user rule resolution")
    if rbac is not None:
        rules, errs = rbac.rules_for(user, namespace)
        evaluation.extend(errs)
        for r in rules:
            api = r.to_api()
            if r.resources:
                resource_rules.append({k: api[k] for k in ("verbs", "apiGroups", "resources", "resourceNames")
                                       if k in api})
            if r.non_resource_urls:
                non_resource_rules.append({"verbs": api["verbs"], "nonResourceURLs": api["nonResourceURLs"]})
    status: dict[str, Any] = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                              "incomplete": incomplete}
    if evaluation:
        status["evaluationError"] = "; ".join(evaluation)
    return {"apiVersion": AUTHZ_VERSION, "kind": "SelfSubjectRulesReview", "metadata": {},
            "spec": {"namespace": namespace} if namespace else {}, "status": status}


def self_subject_review(user: UserInfo, now: float) -> dict[str, Any]:
    """`kubectl auth whoami`."""
    return {"apiVersion": AUTHN_VERSION, "kind": "SelfSubjectReview",
            "metadata": {"creationTimestamp": rfc3339(now)}, "status": {"userInfo": user.to_api()}}


def token_review(body: Mapping[str, Any], authenticator: Authenticator,
                 api_audiences: Sequence[str] = ()) -> dict[str, Any]:
    """TokenReview (authentication.k8s.io/v1): who a bearer token is, from the same chain that
    authenticates requests (without the peer certificate and without anonymous access)."""
    spec = _spec(body)
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        raise ValidationErrors([FieldError("spec.token", "Required value: token is required for TokenReview in "
                                                         "authentication")])
    wanted = spec.get("audiences") or []
    if not isinstance(wanted, list) or not all(isinstance(a, str) for a in wanted):
        raise ValidationErrors([FieldError("spec.audiences", invalid(wanted, "must be a list of strings"))])
    if wanted and api_audiences and not set(wanted) & set(api_audiences):
        status: dict[str, Any] = {"authenticated": False, "user": {},
                                  "error": "token audiences are not valid for this server"}
    else:
        chain = Authenticator(authenticator.authenticators, None)
        result = chain.authenticate(AuthnRequest(headers={"Authorization": f"Bearer {token}"}))
        if result.user is None:
            status = {"authenticated": False, "user": {}, "error": result.error}
        else:
            status = {"authenticated": True, "user": result.user.to_api(),
                      "audiences": list(wanted) or list(api_audiences)}
    out = {k: copy.deepcopy(v) for k, v in body.items() if k not in ("status", "spec")}
    out.update(apiVersion=AUTHN_VERSION, kind="TokenReview", spec={k: v for k, v in spec.items() if k != "token"})
    out.setdefault("metadata", {})
    out["status"] = status
    return out
