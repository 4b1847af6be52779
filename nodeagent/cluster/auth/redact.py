"""Secret values and credentials kept out of log lines.

Where the API layer must apply it:
- `redact_object` on every object before it reaches a log line or an error text: request and
  response bodies (debug logging), admission and validation failures, watch events, audit
  records. A Secret keeps its keys (names say what is there, not what it is) and loses every
  value of `data` and `stringData`, and its `kubectl.kubernetes.io/last-applied-configuration`
  annotation (kubectl copies the whole object, values included, into it). Lists and watch
  events are walked.
- `redact_headers` on request headers before logging them (Authorization, Cookie, the WebSocket
  bearer subprotocol, impersonation extras).
- `redact_processor` in the server's structlog chain (before the renderer), as the last line:
  it applies both to every value of every event, so a Secret or a header map passed to a log
  call by mistake is still redacted.
- field errors about a Secret's data must not echo the value (say which key is wrong, not what
  it holds); `redact_value` gives the text to show instead.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from nodeagent.core.wellknown import LAST_APPLIED

REDACTED = "REDACTED"
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-auth-token"})
_SECRET_FIELDS = frozenset({"authorization", "token", "password", "secret", "bearer", "client-key-data", "key_pem"})
WEBSOCKET_PROTOCOL_PREFIX = "base64url.bearer.authorization.k8s.io."  # a WebSocket client's bearer token


def redact_value(value: object) -> str:
    """What to show instead of a secret value: its size only."""
    if isinstance(value, (str, bytes)):
        return f"{REDACTED} ({len(value)} bytes)"
    return REDACTED


def _is_secret(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Secret" and str(obj.get("apiVersion", "v1")) in ("v1", "")


def _redact_secret(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    for field in ("data", "stringData"):
        values = obj.get(field)
        if isinstance(values, Mapping):
            out[field] = dict.fromkeys(values, REDACTED)
        elif values is not None:
            out[field] = REDACTED
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("annotations"), Mapping) \
            and LAST_APPLIED in meta["annotations"]:
        out["metadata"] = {**meta, "annotations": {**meta["annotations"], LAST_APPLIED: REDACTED}}
    return out


def redact_object(obj: Any) -> Any:
    """A copy of `obj` safe to log: Secrets (alone, in `items`, or as a watch event's `object`)
    without their values; anything else unchanged. Never modifies `obj`."""
    if isinstance(obj, Mapping):
        if _is_secret(obj):
            return _redact_secret(obj)
        if isinstance(obj.get("items"), list):
            return {**obj, "items": [redact_object(i) for i in obj["items"]]}
        if isinstance(obj.get("object"), Mapping) and "type" in obj:
            return {**obj, "object": redact_object(obj["object"])}
        return obj
    if isinstance(obj, list):
        return [redact_object(i) for i in obj]
    return obj


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in headers.items():
        lk = k.lower()
        if lk in _SECRET_HEADERS:
            scheme = v.split(" ", 1)[0] if " " in v else ""
            out[k] = f"{scheme} {REDACTED}".strip()
        elif lk == "sec-websocket-protocol" and WEBSOCKET_PROTOCOL_PREFIX in v:
            prefix = WEBSOCKET_PROTOCOL_PREFIX
            out[k] = ", ".join(f"{prefix}{REDACTED}" if p.strip().startswith(prefix) else p.strip()
                               for p in v.split(","))
        elif lk.startswith("impersonate-extra-"):
            out[k] = REDACTED
        else:
            out[k] = v
    return out


def _scrub(value: Any, depth: int = 0) -> Any:
    if depth > 8:
        return value
    if isinstance(value, Mapping):
        if _is_secret(value):
            return _redact_secret(value)
        if any(isinstance(k, str) and k.lower() in _SECRET_HEADERS for k in value):
            return redact_headers({str(k): str(v) for k, v in value.items()})
        return {k: (REDACTED if isinstance(k, str) and k.lower() in _SECRET_FIELDS else _scrub(v, depth + 1))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, depth + 1) for v in value]
    return value


def redact_processor(logger: object, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: every value of the event scrubbed (module docstring)."""
    for k in list(event_dict):
        if k.lower() in _SECRET_FIELDS:
            event_dict[k] = REDACTED
        elif isinstance(event_dict[k], (Mapping, list)):
            event_dict[k] = _scrub(event_dict[k])
    return event_dict
