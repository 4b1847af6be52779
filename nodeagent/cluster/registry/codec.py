"""Objects in the store: the served JSON without metadata.resourceVersion (set from the revision
when read, as kube-apiserver's versioner does), encoded with orjson (the list and watch hot paths
decode thousands of objects per request; the standard library's json is several times slower).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from nodeagent.cluster.registry import errors
from nodeagent.cluster.storage.interface import KeyValue


def encode(obj: dict[str, Any]) -> bytes:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "resourceVersion" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
    return orjson.dumps(obj)


def decode(value: bytes, revision: int) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads(value)
    obj.setdefault("metadata", {})["resourceVersion"] = str(revision)
    return obj


def decode_kv(kv: KeyValue) -> dict[str, Any]:
    return decode(kv.value, kv.mod_revision)


def encode_continue(revision: int, start_key: str) -> str:
    """kube-apiserver's continue token shape: base64 of {"v","rv","start"}."""
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start_key})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        rev, start = data["rv"], data["start"]
        if data.get("v") != "meta.k8s.io/v1" or not isinstance(rev, int) or not isinstance(start, str) or rev <= 0:
            raise ValueError
    except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise errors.bad_request("continue key is not valid: the continue token is malformed") from None
    return rev, start
