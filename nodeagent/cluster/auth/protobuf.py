"""The access-review kinds as kubectl sends them: Kubernetes protobuf.

kubectl 1.37 posts SelfSubjectAccessReview (`auth can-i`), SelfSubjectRulesReview (`can-i
--list`) and SelfSubjectReview (`auth whoami`) with `Content-Type:
application/vnd.kubernetes.protobuf` (its typed clients always do; it accepts JSON back) and
does not fall back to JSON on 415. So the API server decodes these bodies: the envelope is
apimachinery's runtime.Unknown after the magic `k8s\\x00` (typeMeta, raw, contentEncoding,
contentType), the message the generated.proto of authorization.k8s.io/v1 and
authentication.k8s.io/v1. Hand-written, as a table of the few messages involved, because a
protobuf runtime would still need the Kubernetes .proto files compiled for these five kinds;
the wire format (varints and length-delimited fields) is all they use.

`decode` returns the same dict the JSON body would give (the reviews module takes it as is);
anything malformed is a ProtobufError (400 BadRequest). The wire reader is daemonkit/protowire.py's.
"""

from __future__ import annotations

from typing import Any

from nodeagent.daemonkit.protowire import CONTENT_TYPE as CONTENT_TYPE
from nodeagent.daemonkit.protowire import MAGIC as MAGIC
from nodeagent.daemonkit.protowire import ProtobufError as ProtobufError
from nodeagent.daemonkit.protowire import check_depth, fields, utf8

# field number -> (json name, kind, sub-schema); kinds: str, int, bool, msg, strs (repeated
# string), msgs (repeated message), map (map<string, sub-schema>)
Schema = dict[int, tuple[str, str, Any]]

_TYPE_META: Schema = {1: ("apiVersion", "str", None), 2: ("kind", "str", None)}
_UNKNOWN: Schema = {1: ("typeMeta", "msg", _TYPE_META), 2: ("raw", "bytes", None),
                    3: ("contentEncoding", "str", None), 4: ("contentType", "str", None)}
_OBJECT_META: Schema = {1: ("name", "str", None), 2: ("generateName", "str", None), 3: ("namespace", "str", None),
                        5: ("uid", "str", None), 6: ("resourceVersion", "str", None)}
_REQUIREMENT: Schema = {1: ("key", "str", None), 2: ("operator", "str", None), 3: ("values", "strs", None)}
_SELECTOR: Schema = {1: ("rawSelector", "str", None), 2: ("requirements", "msgs", _REQUIREMENT)}
_RESOURCE_ATTRIBUTES: Schema = {1: ("namespace", "str", None), 2: ("verb", "str", None), 3: ("group", "str", None),
                                4: ("version", "str", None), 5: ("resource", "str", None),
                                6: ("subresource", "str", None), 7: ("name", "str", None),
                                8: ("fieldSelector", "msg", _SELECTOR), 9: ("labelSelector", "msg", _SELECTOR)}
_NON_RESOURCE_ATTRIBUTES: Schema = {1: ("path", "str", None), 2: ("verb", "str", None)}
_EXTRA_VALUE: Schema = {1: ("items", "strs", None)}
_SAR_SPEC: Schema = {1: ("resourceAttributes", "msg", _RESOURCE_ATTRIBUTES),
                     2: ("nonResourceAttributes", "msg", _NON_RESOURCE_ATTRIBUTES), 3: ("user", "str", None),
                     4: ("groups", "strs", None), 5: ("extra", "map", _EXTRA_VALUE), 6: ("uid", "str", None)}
_SSAR_SPEC: Schema = {1: ("resourceAttributes", "msg", _RESOURCE_ATTRIBUTES),
                      2: ("nonResourceAttributes", "msg", _NON_RESOURCE_ATTRIBUTES)}
_SSRR_SPEC: Schema = {1: ("namespace", "str", None)}

KINDS: dict[tuple[str, str], Schema] = {
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {1: ("metadata", "msg", _OBJECT_META),
                                                             2: ("spec", "msg", _SSAR_SPEC)},
    ("authorization.k8s.io/v1", "SubjectAccessReview"): {1: ("metadata", "msg", _OBJECT_META),
                                                         2: ("spec", "msg", _SAR_SPEC)},
    ("authorization.k8s.io/v1", "LocalSubjectAccessReview"): {1: ("metadata", "msg", _OBJECT_META),
                                                              2: ("spec", "msg", _SAR_SPEC)},
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): {1: ("metadata", "msg", _OBJECT_META),
                                                            2: ("spec", "msg", _SSRR_SPEC)},
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", "msg", _OBJECT_META)},
}


def _text(value: int | bytes, name: str) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError(f"{name}: expected a string")
    return utf8(value, name)


def _message(data: bytes, schema: Schema, depth: int = 0) -> dict[str, Any]:
    check_depth(depth)
    out: dict[str, Any] = {}
    for number, value in fields(data):
        if number not in schema:
            continue  # a field this server does not read (status, newer fields)
        name, kind, sub = schema[number]
        if kind == "str":
            out[name] = _text(value, name)
        elif kind == "bytes":
            if not isinstance(value, bytes):
                raise ProtobufError(f"{name}: expected bytes")
            out[name] = value
        elif kind == "strs":
            out.setdefault(name, []).append(_text(value, name))
        elif kind in ("msg", "msgs", "map"):
            if not isinstance(value, bytes):
                raise ProtobufError(f"{name}: expected a message")
            if kind == "msg":
                out[name] = _message(value, sub, depth + 1)
            elif kind == "msgs":
                out.setdefault(name, []).append(_message(value, sub, depth + 1))
            else:
                entry = _message(value, {1: ("key", "str", None), 2: ("value", "msg", sub)}, depth + 1)
                items = entry.get("value", {}).get("items", [])
                out.setdefault(name, {})[entry.get("key", "")] = items
        elif kind in ("int", "bool"):
            if not isinstance(value, int):
                raise ProtobufError(f"{name}: expected a number")
            out[name] = bool(value) if kind == "bool" else value
    return out


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded review -> its JSON-shaped dict (apiVersion, kind, metadata, spec)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (no k8s\\x00 prefix)")
    envelope = _message(body[len(MAGIC):], _UNKNOWN)
    meta = envelope.get("typeMeta", {})
    gvk = (meta.get("apiVersion", ""), meta.get("kind", ""))
    if envelope.get("contentEncoding"):
        raise ProtobufError(f"unsupported content encoding {envelope['contentEncoding']!r}")
    schema = KINDS.get(gvk)
    if schema is None:
        raise ProtobufError(f"this server reads no protobuf {gvk[1] or 'object'} of {gvk[0] or 'no apiVersion'}")
    obj = _message(envelope.get("raw", b""), schema)
    return {"apiVersion": gvk[0], "kind": gvk[1], **obj}
