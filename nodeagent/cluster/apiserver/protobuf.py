"""Kubernetes protobuf request bodies of the kinds kubectl's generators create.

kubectl 1.37's typed clients (`kubectl create namespace|quota|priorityclass|role|rolebinding|
clusterrole|clusterrolebinding|configmap|secret|serviceaccount|deployment|job|cronjob|pdb|token`,
`kubectl autoscale`) post
`application/vnd.kubernetes.protobuf` and do not fall back to JSON on 415. The body is
`k8s\\x00` + runtime.Unknown{typeMeta, raw}, raw the kind's message from the upstream
generated.proto; it is decoded here into the dict the JSON body would give (the registry then
treats it as any body). Hand-written as a table of the messages involved: no maintained Python
package ships the Kubernetes .proto definitions (the one on PyPI is from 2019), and these
messages use only varints and length-delimited fields. Empty strings are left out, as Go's JSON
does for its omitempty fields (`kubectl create secret` sends type ""). Anything malformed is a ProtobufError
(400). Responses stay JSON (kubectl accepts them). Field numbers are upstream's; the real
kubectl checks them in tests/test_kube_clients.py. The wire reader is daemonkit/protowire.py's.
"""

from __future__ import annotations

import base64
from typing import Any

from nodeagent.daemonkit.protowire import CONTENT_TYPE as CONTENT_TYPE
from nodeagent.daemonkit.protowire import MAGIC as MAGIC
from nodeagent.daemonkit.protowire import ProtobufError as ProtobufError
from nodeagent.daemonkit.protowire import check_depth, fields, utf8

Schema = dict[int, tuple[str, str, Any]]
# kinds: str, int, bool, bytes (base64 in JSON), strs (repeated string), msg, msgs (repeated message),
# map_str (map<string,string>), map_bytes (map<string,bytes>), map_qty (map<string, resource.Quantity>),
# qty (one resource.Quantity)

_TYPE_META: Schema = {1: ("apiVersion", "str", None), 2: ("kind", "str", None)}
_UNKNOWN: Schema = {1: ("typeMeta", "msg", _TYPE_META), 2: ("raw", "bytes_raw", None),
                    3: ("contentEncoding", "str", None), 4: ("contentType", "str", None)}
_OWNER: Schema = {5: ("apiVersion", "str", None), 1: ("kind", "str", None), 3: ("name", "str", None),
                  4: ("uid", "str", None), 6: ("controller", "bool", None), 7: ("blockOwnerDeletion", "bool", None)}
_META: Schema = {1: ("name", "str", None), 2: ("generateName", "str", None), 3: ("namespace", "str", None),
                 5: ("uid", "str", None), 6: ("resourceVersion", "str", None), 11: ("labels", "map_str", None),
                 12: ("annotations", "map_str", None), 13: ("ownerReferences", "msgs", _OWNER),
                 14: ("finalizers", "strs", None)}
_RULE: Schema = {1: ("verbs", "strs", None), 2: ("apiGroups", "strs", None), 3: ("resources", "strs", None),
                 4: ("resourceNames", "strs", None), 5: ("nonResourceURLs", "strs", None)}
_REQUIREMENT: Schema = {1: ("key", "str", None), 2: ("operator", "str", None), 3: ("values", "strs", None)}
_LABEL_SELECTOR: Schema = {1: ("matchLabels", "map_str", None), 2: ("matchExpressions", "msgs", _REQUIREMENT)}
_SUBJECT: Schema = {1: ("kind", "str", None), 2: ("apiGroup", "str", None), 3: ("name", "str", None),
                    4: ("namespace", "str", None)}
_ROLE_REF: Schema = {1: ("apiGroup", "str", None), 2: ("kind", "str", None), 3: ("name", "str", None)}
_SCOPED_REQ: Schema = {1: ("scopeName", "str", None), 2: ("operator", "str", None), 3: ("values", "strs", None)}
_REF: Schema = {1: ("kind", "str", None), 2: ("namespace", "str", None), 3: ("name", "str", None),
                4: ("uid", "str", None), 5: ("apiVersion", "str", None), 6: ("resourceVersion", "str", None),
                7: ("fieldPath", "str", None)}
_LOCAL_REF: Schema = {1: ("name", "str", None)}

# the workload kinds `kubectl create deployment|job|cronjob|pdb` send (core/v1, apps/v1, batch/v1, policy/v1);
# "int32_nz": a non-pointer int32 Go always marshals, left out when 0 as its JSON would
_INT_OR_STRING: Schema = {1: ("type", "int32", None), 2: ("intVal", "int32", None), 3: ("strVal", "str", None)}
_QTY_RESOURCES: Schema = {1: ("limits", "map_qty", None), 2: ("requests", "map_qty", None)}
_PORT: Schema = {1: ("name", "str", None), 2: ("hostPort", "int32_nz", None), 3: ("containerPort", "int32", None),
                 4: ("protocol", "str", None), 5: ("hostIP", "str", None)}
_ENV: Schema = {1: ("name", "str", None), 2: ("value", "str", None)}
_CONTAINER: Schema = {1: ("name", "str", None), 2: ("image", "str", None), 3: ("command", "strs", None),
                      4: ("args", "strs", None), 5: ("workingDir", "str", None), 6: ("ports", "msgs", _PORT),
                      7: ("env", "msgs", _ENV), 8: ("resources", "msg", _QTY_RESOURCES),
                      14: ("imagePullPolicy", "str", None)}
_POD_SPEC: Schema = {2: ("containers", "msgs", _CONTAINER), 3: ("restartPolicy", "str", None),
                     4: ("terminationGracePeriodSeconds", "int32", None), 6: ("dnsPolicy", "str", None),
                     7: ("nodeSelector", "map_str", None), 8: ("serviceAccountName", "str", None),
                     19: ("schedulerName", "str", None), 20: ("initContainers", "msgs", _CONTAINER)}
_POD_TEMPLATE: Schema = {1: ("metadata", "msg", _META), 2: ("spec", "msg", _POD_SPEC)}
_DEPLOYMENT_SPEC: Schema = {
    1: ("replicas", "int32", None), 2: ("selector", "msg", _LABEL_SELECTOR), 3: ("template", "msg", _POD_TEMPLATE),
    4: ("strategy", "msg", {1: ("type", "str", None), 2: ("rollingUpdate", "msg", {
        1: ("maxUnavailable", "intstr", _INT_OR_STRING), 2: ("maxSurge", "intstr", _INT_OR_STRING)})}),
    5: ("minReadySeconds", "int32_nz", None), 6: ("revisionHistoryLimit", "int32", None),
    9: ("progressDeadlineSeconds", "int32", None)}
_JOB_SPEC: Schema = {1: ("parallelism", "int32", None), 2: ("completions", "int32", None),
                     3: ("activeDeadlineSeconds", "int32", None), 4: ("selector", "msg", _LABEL_SELECTOR),
                     5: ("manualSelector", "bool", None), 6: ("template", "msg", _POD_TEMPLATE),
                     7: ("backoffLimit", "int32", None), 8: ("ttlSecondsAfterFinished", "int32", None),
                     9: ("completionMode", "str", None), 10: ("suspend", "bool", None)}
_CRONJOB_SPEC: Schema = {1: ("schedule", "str", None), 8: ("timeZone", "str", None),
                         2: ("startingDeadlineSeconds", "int32", None), 3: ("concurrencyPolicy", "str", None),
                         4: ("suspend", "bool", None),
                         5: ("jobTemplate", "msg", {1: ("metadata", "msg", _META), 2: ("spec", "msg", _JOB_SPEC)}),
                         6: ("successfulJobsHistoryLimit", "int32", None), 7: ("failedJobsHistoryLimit", "int32", None)}
_PDB_SPEC: Schema = {1: ("minAvailable", "intstr", _INT_OR_STRING), 2: ("selector", "msg", _LABEL_SELECTOR),
                     3: ("maxUnavailable", "intstr", _INT_OR_STRING), 4: ("unhealthyPodEvictionPolicy", "str", None)}

# autoscaling/v2 and v1 HorizontalPodAutoscaler (`kubectl autoscale` posts v2, then v1 when v2 fails);
# "qty": a resource.Quantity message (its string is field 1)
_CROSS_REF: Schema = {1: ("kind", "str", None), 2: ("name", "str", None), 3: ("apiVersion", "str", None)}
_METRIC_TARGET: Schema = {1: ("type", "str", None), 2: ("value", "qty", None), 3: ("averageValue", "qty", None),
                          4: ("averageUtilization", "int32", None)}
_METRIC_ID: Schema = {1: ("name", "str", None), 2: ("selector", "msg", _LABEL_SELECTOR)}
_METRIC_SPEC: Schema = {
    1: ("type", "str", None),
    2: ("object", "msg", {1: ("describedObject", "msg", _CROSS_REF), 2: ("target", "msg", _METRIC_TARGET),
                          3: ("metric", "msg", _METRIC_ID)}),
    3: ("pods", "msg", {1: ("metric", "msg", _METRIC_ID), 2: ("target", "msg", _METRIC_TARGET)}),
    4: ("resource", "msg", {1: ("name", "str", None), 2: ("target", "msg", _METRIC_TARGET)}),
    5: ("external", "msg", {1: ("metric", "msg", _METRIC_ID), 2: ("target", "msg", _METRIC_TARGET)}),
    7: ("containerResource", "msg", {1: ("name", "str", None), 2: ("target", "msg", _METRIC_TARGET),
                                     3: ("container", "str", None)})}
_SCALING_RULES: Schema = {3: ("stabilizationWindowSeconds", "int32", None), 1: ("selectPolicy", "str", None),
                          2: ("policies", "msgs", {1: ("type", "str", None), 2: ("value", "int32", None),
                                                   3: ("periodSeconds", "int32", None)}),
                          4: ("tolerance", "qty", None)}
_HPA_V2_SPEC: Schema = {1: ("scaleTargetRef", "msg", _CROSS_REF), 2: ("minReplicas", "int32", None),
                        3: ("maxReplicas", "int32", None), 4: ("metrics", "msgs", _METRIC_SPEC),
                        5: ("behavior", "msg", {1: ("scaleUp", "msg", _SCALING_RULES),
                                                2: ("scaleDown", "msg", _SCALING_RULES)})}
_HPA_V1_SPEC: Schema = {1: ("scaleTargetRef", "msg", _CROSS_REF), 2: ("minReplicas", "int32", None),
                        3: ("maxReplicas", "int32", None), 4: ("targetCPUUtilizationPercentage", "int32", None)}

KINDS: dict[tuple[str, str], Schema] = {
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", "msg", _META)},  # kubectl auth whoami
    ("autoscaling/v2", "HorizontalPodAutoscaler"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", _HPA_V2_SPEC)},
    ("autoscaling/v1", "HorizontalPodAutoscaler"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", _HPA_V1_SPEC)},
    ("apps/v1", "Deployment"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", _DEPLOYMENT_SPEC)},
    ("batch/v1", "Job"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", _JOB_SPEC)},
    ("batch/v1", "CronJob"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", _CRONJOB_SPEC)},
    ("policy/v1", "PodDisruptionBudget"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", _PDB_SPEC)},
    ("v1", "Namespace"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", {1: ("finalizers", "strs", None)})},
    ("v1", "ResourceQuota"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", {
        1: ("hard", "map_qty", None), 2: ("scopes", "strs", None),
        3: ("scopeSelector", "msg", {1: ("matchExpressions", "msgs", _SCOPED_REQ)})})},
    ("v1", "ConfigMap"): {1: ("metadata", "msg", _META), 2: ("data", "map_str", None),
                          3: ("binaryData", "map_bytes", None), 4: ("immutable", "bool", None)},
    ("v1", "Secret"): {1: ("metadata", "msg", _META), 2: ("data", "map_bytes", None), 3: ("type", "str", None),
                       4: ("stringData", "map_str", None), 5: ("immutable", "bool", None)},
    ("authentication.k8s.io/v1", "TokenRequest"): {1: ("metadata", "msg", _META), 2: ("spec", "msg", {
        1: ("audiences", "strs", None), 4: ("expirationSeconds", "int32", None),
        3: ("boundObjectRef", "msg", {1: ("kind", "str", None), 2: ("apiVersion", "str", None),
                                      3: ("name", "str", None), 4: ("uid", "str", None)})})},
    ("v1", "ServiceAccount"): {1: ("metadata", "msg", _META), 2: ("secrets", "msgs", _REF),
                               3: ("imagePullSecrets", "msgs", _LOCAL_REF),
                               4: ("automountServiceAccountToken", "bool", None)},
    ("scheduling.k8s.io/v1", "PriorityClass"): {1: ("metadata", "msg", _META), 2: ("value", "int32", None),
                                                3: ("globalDefault", "bool", None), 4: ("description", "str", None),
                                                5: ("preemptionPolicy", "str", None)},
    ("rbac.authorization.k8s.io/v1", "Role"): {1: ("metadata", "msg", _META), 2: ("rules", "msgs", _RULE)},
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): {
        1: ("metadata", "msg", _META), 2: ("rules", "msgs", _RULE),
        3: ("aggregationRule", "msg", {1: ("clusterRoleSelectors", "msgs", _LABEL_SELECTOR)})},
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): {1: ("metadata", "msg", _META), 2: ("subjects", "msgs", _SUBJECT),
                                                      3: ("roleRef", "msg", _ROLE_REF)},
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): {1: ("metadata", "msg", _META),
                                                             2: ("subjects", "msgs", _SUBJECT),
                                                             3: ("roleRef", "msg", _ROLE_REF)},
}


def _bytes(value: int | bytes, name: str) -> bytes:
    if not isinstance(value, bytes):
        raise ProtobufError(f"{name}: expected a length-delimited field")
    return value


def _text(value: int | bytes, name: str) -> str:
    return utf8(_bytes(value, name), name)


def _entry(value: int | bytes, name: str) -> tuple[str, int | bytes | None]:
    key, val = "", None
    for number, v in fields(_bytes(value, name)):
        if number == 1:
            key = _text(v, name)
        elif number == 2:
            val = v
    return key, val


def _message(data: bytes, schema: Schema, depth: int = 0) -> dict[str, Any]:
    check_depth(depth)
    out: dict[str, Any] = {}
    for number, value in fields(data):
        if number not in schema:
            continue  # status, and fields this server does not read
        name, kind, sub = schema[number]
        if kind == "str":
            text = _text(value, name)
            if text:  # Go marshals empty strings; its JSON leaves them out (omitempty), so do we
                out[name] = text
        elif kind == "bytes_raw":
            out[name] = _bytes(value, name)
        elif kind == "strs":
            out.setdefault(name, []).append(_text(value, name))
        elif kind == "msg":
            out[name] = _message(_bytes(value, name), sub, depth + 1)
        elif kind == "msgs":
            out.setdefault(name, []).append(_message(_bytes(value, name), sub, depth + 1))
        elif kind in ("map_str", "map_bytes", "map_qty"):
            key, val = _entry(value, name)
            raw = b"" if val is None else _bytes(val, name)
            if kind == "map_str":
                out.setdefault(name, {})[key] = _text(raw, name)
            elif kind == "map_bytes":
                out.setdefault(name, {})[key] = base64.b64encode(raw).decode()
            else:
                qty = next((v for n, v in fields(raw) if n == 1), b"")
                out.setdefault(name, {})[key] = _text(qty, name)
        elif kind == "qty":
            out[name] = _text(next((v for n, v in fields(_bytes(value, name)) if n == 1), b""), name)
        elif kind == "intstr":  # intstr.IntOrString: type 1 is the string form
            both = _message(_bytes(value, name), sub, depth + 1)
            out[name] = both.get("strVal", "") if both.get("type") == 1 else both.get("intVal", 0)
        elif kind in ("int32", "int32_nz", "bool"):
            if not isinstance(value, int):
                raise ProtobufError(f"{name}: expected a number")
            if kind == "bool":
                out[name] = bool(value)
            elif value or kind == "int32":
                out[name] = value - (1 << 64) if value >= 1 << 63 else value  # negative int32s are 10-byte varints
    return out


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf body -> the JSON-shaped dict of its object (apiVersion, kind, metadata, ...)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (no k8s\\x00 prefix)")
    envelope = _message(body[len(MAGIC):], _UNKNOWN)
    meta = envelope.get("typeMeta", {})
    gvk = (meta.get("apiVersion", ""), meta.get("kind", ""))
    if envelope.get("contentEncoding"):
        raise ProtobufError(f"unsupported content encoding {envelope['contentEncoding']!r}")
    schema = KINDS.get(gvk)
    if schema is None:
        raise ProtobufError(f"this server reads no protobuf {gvk[1] or 'object'} of {gvk[0] or 'no apiVersion'}; "
                            "send JSON")
    return {"apiVersion": gvk[0], "kind": gvk[1], **_message(envelope.get("raw", b""), schema)}
