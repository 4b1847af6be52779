"""Decode a request body (JSON, or YAML by content type) into a plain JSON-compatible object.

Hostile input must end in a ValueError naming the problem, never in a crash or a blow-up:
YAML aliases are refused (no billion-laughs expansion), nesting depth is bounded, and values
JSON cannot carry (NaN, timestamps, binary, sets) are refused or turned into strings as the
Kubernetes YAML-to-JSON conversion does.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import yaml

from nodeagent.daemonkit.yamlerrors import YamlProblem

MAX_DEPTH = 64
MAX_NODES = 20_000  # a large pod manifest has a few hundred
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


# libyaml when available: the pure-Python loader needs ~40 us per node, which would let one
# 1 MiB request hold the event loop for seconds.
_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_yaml_events(text: str) -> None:
    """Refuse aliases, deep nesting and huge documents before building any objects."""
    depth = nodes = 0
    for ev in yaml.parse(text, Loader=_Loader):
        if isinstance(ev, yaml.AliasEvent):
            line = ev.start_mark.line + 1 if ev.start_mark is not None else "?"
            raise ValueError(f"YAML aliases are not allowed (line {line})")
        if isinstance(ev, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise ValueError(f"document has more than {MAX_NODES} nodes")
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(f"nesting deeper than {MAX_DEPTH}")
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _plain(value: Any, depth: int = 0) -> Any:
    """Check depth and convert to JSON-compatible types (keys become strings)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nesting deeper than {MAX_DEPTH}")
    if isinstance(value, dict):
        return {_key(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} cannot be represented in JSON")
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    raise ValueError(f"unsupported value of type {type(value).__name__}")


def _key(k: Any) -> str:
    if isinstance(k, bool):
        return "true" if k else "false"
    if isinstance(k, (str, int, float)) or k is None:
        return "null" if k is None else str(k)
    raise ValueError(f"unsupported mapping key of type {type(k).__name__}")


def decode_body(raw: bytes, content_type: str) -> Any:
    """Parse the body; YAML for the YAML content types, JSON otherwise. ValueError on failure."""
    if not raw.strip():
        raise ValueError("request body is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"body is not UTF-8: {e.reason} at byte {e.start}") from None
    if content_type in YAML_TYPES:
        try:
            _check_yaml_events(text)
            data = yaml.load(text, Loader=_Loader)
        except (yaml.YAMLError, RecursionError) as e:
            raise ValueError(str(YamlProblem.of(e))) from None
    else:
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as e:
            raise ValueError(f"invalid JSON: {e.msg} (line {e.lineno}, column {e.colno})") \
                from None
        except RecursionError:
            raise ValueError(f"invalid JSON: nesting deeper than {MAX_DEPTH}") from None
    return _plain(data)
