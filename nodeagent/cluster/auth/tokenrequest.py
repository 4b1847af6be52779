"""The TokenRequest API (POST serviceaccounts/<name>/token, what `kubectl create token` and
projected volumes use): a signed service-account token, optionally bound to a pod (revoked when
the pod goes), as kube-apiserver's token REST storage.

`token_request(body, service_account, ...)` validates the TokenRequest (422 via
ValidationErrors, upstream's wording), checks the bound object (the pod must exist with that uid
and run as this service account), clamps the expiration to serviceAccountMaxTokenExpiration and
returns the TokenRequest to answer with (201), status.token and status.expirationTimestamp set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodeagent.cluster.auth.serviceaccount import MIN_EXPIRATION_SECONDS, ObjectRef, TokenIssuer
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.timefmt import rfc3339

DEFAULT_EXPIRATION_SECONDS = 3600
MAX_EXPIRATION_SECONDS = 1 << 32

PodGetter = Callable[[str, str], Mapping[str, Any] | None]


class BoundObjectError(ValueError):
    """The bound object is missing or not this service account's: `code` 404 or 400/422."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _dict(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def token_request(body: Mapping[str, Any], service_account: Mapping[str, Any], issuer: TokenIssuer, *,
                  api_audiences: Sequence[str], get_pod: PodGetter,
                  max_expiration_seconds: float | None = None) -> dict[str, Any]:
    spec = body.get("spec") if body.get("spec") is not None else {}
    errors: list[FieldError] = []
    if not isinstance(spec, Mapping):
        raise ValidationErrors([FieldError("spec", "must be an object")])
    exp = spec.get("expirationSeconds", DEFAULT_EXPIRATION_SECONDS)
    if exp is None:
        exp = DEFAULT_EXPIRATION_SECONDS
    if isinstance(exp, bool) or not isinstance(exp, int):
        errors.append(FieldError("spec.expirationSeconds", f"Invalid value: {exp!r}: must be an integer"))
        exp = DEFAULT_EXPIRATION_SECONDS
    elif exp < MIN_EXPIRATION_SECONDS:
        errors.append(FieldError("spec.expirationSeconds",
                                 f"Invalid value: {exp}: may not specify a duration less than 10 minutes"))
    elif exp > MAX_EXPIRATION_SECONDS:
        errors.append(FieldError("spec.expirationSeconds",
                                 f"Invalid value: {exp}: may not specify a duration larger than 2^32 seconds"))
    audiences = spec.get("audiences") or []
    if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
        errors.append(FieldError("spec.audiences", "must be a list of non-empty strings"))
        audiences = []
    ref = spec.get("boundObjectRef")
    if ref is not None and (not isinstance(ref, Mapping) or ref.get("kind") not in ("Pod",)
                            or not isinstance(ref.get("name"), str) or not ref.get("name")):
        kind = ref.get("kind") if isinstance(ref, Mapping) else ref
        errors.append(FieldError("spec.boundObjectRef.kind",
                                 f'Unsupported value: "{kind}": supported values: "Pod" (with a name)'))
    if errors:
        raise ValidationErrors(errors)

    meta = _dict(service_account, "metadata")
    namespace, name, uid = str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or "")
    pod_ref: ObjectRef | None = None
    node_ref: ObjectRef | None = None
    if isinstance(ref, Mapping):
        pod = get_pod(namespace, ref["name"])
        if pod is None:
            raise BoundObjectError(404, f'pods "{ref["name"]}" not found')
        pod_meta, pod_spec = _dict(pod, "metadata"), _dict(pod, "spec")
        pod_uid = str(pod_meta.get("uid") or "")
        if ref.get("uid") and ref["uid"] != pod_uid:
            raise BoundObjectError(400, f"the UID in the bound object reference ({ref['uid']}) does not match the UID "
                                        "in record. The object might have been deleted and then recreated")
        if (pod_spec.get("serviceAccountName") or "default") != name:
            raise BoundObjectError(400, f'cannot bind token for serviceaccount "{name}" to pod running with different '
                                        "serviceaccount name.")
        pod_ref = ObjectRef(ref["name"], pod_uid)
        node_name = pod_spec.get("nodeName")
        if isinstance(node_name, str) and node_name:
            node_ref = ObjectRef(node_name)
    if max_expiration_seconds is not None and exp > max_expiration_seconds:
        exp = int(max_expiration_seconds)
    token = issuer.service_account_token(namespace, name, uid, audiences=audiences or list(api_audiences),
                                         expiration_seconds=exp, pod=pod_ref, node=node_ref)
    out = {k: v for k, v in body.items() if k != "status"}
    out.update(apiVersion="authentication.k8s.io/v1", kind="TokenRequest")
    out["metadata"] = {**_dict(body, "metadata"), "name": name, "namespace": namespace}
    out["spec"] = {**spec, "audiences": audiences or list(api_audiences), "expirationSeconds": exp}
    out["status"] = {"token": token, "expirationTimestamp": rfc3339(issuer.clock.wall() + exp)}
    return out
