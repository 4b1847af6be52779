"""Request bodies (JSON or YAML) to plain JSON values, noting duplicate fields as Go's decoders do.

kube-apiserver's strict decoding reports a duplicated JSON field as `duplicate field "a.b"` at
the position of its second occurrence (the last value wins), and a duplicated YAML key as
go-yaml's `line N: key "k" already set in map`. Both are kept here so field validation can put
them in the same order upstream does. Why a hand-written layer: Python's json and PyYAML keep the
last duplicate silently; their hooks (object_pairs_hook, a mapping constructor) are used.

What a body may hold after decoding is exactly JSON: dicts with string keys, lists, str, int,
finite float, bool, None. Anything else is a DecodeError (400): malformed text, NaN/Infinity,
numbers beyond float range or with absurd digit counts, YAML timestamps or binary under explicit
tags, non-scalar YAML keys, more than one YAML document, nesting deeper than MAX_DEPTH, and YAML
aliases that would expand beyond MAX_NODES values (billion laughs). Invalid UTF-8 and lone
surrogate escapes become U+FFFD, as in Go.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_DEPTH = 200
MAX_NODES = 2_000_000
MAX_NUMBER_DIGITS = 400

_LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class DecodeError(ValueError):
    """A body that is not well-formed JSON/YAML (kube-apiserver answers 400 BadRequest)."""


@dataclass(slots=True)
class Decoded:
    """A decoded body. `dup_keys` maps id() of each JSON object that had a repeated key to
    (that object, its keys in document order, repeats included); `yaml_duplicates` holds
    go-yaml's texts. `objects` keeps those objects alive so the ids stay theirs."""

    value: Any
    fmt: str = "json"
    dup_keys: dict[int, list[str]] = field(default_factory=dict)
    yaml_duplicates: list[str] = field(default_factory=list)
    _objects: list[object] = field(default_factory=list, repr=False)

    def key_order(self, obj: dict[str, Any]) -> list[str] | None:
        """The keys of `obj` in document order with repeats, when it had a duplicate."""
        return self.dup_keys.get(id(obj))

    def duplicate_fields(self) -> list[str]:
        """Every duplicated field, as the strict decoder names it, in document order (JSON: paths
        such as `spec.paused`; YAML: go-yaml's line texts)."""
        if self.fmt == "yaml":
            return list(self.yaml_duplicates)
        out: list[str] = []
        if self.dup_keys:
            _collect_dups(self, self.value, "", out, 0)
        return out


def _collect_dups(decoded: Decoded, value: Any, path: str, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        order = decoded.key_order(value)
        keys = order if order is not None else list(value)
        last = {key: i for i, key in enumerate(keys)}
        seen: set[str] = set()
        for i, key in enumerate(keys):
            sub = f"{path}.{key}" if path else key
            if key in seen:
                out.append(sub)
            seen.add(key)
            if last[key] == i:  # the value kept is the last one: its problems come after the repeat
                _collect_dups(decoded, value[key], sub, out, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _collect_dups(decoded, item, f"{path}[{i}]", out, depth + 1)


def _text(data: bytes | str) -> str:
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes | bytearray) else data


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS:
        raise DecodeError(f"json: number {text[:40]}... is too long")
    value = float(text)
    if math.isinf(value):
        raise DecodeError(f"json: number {text} is out of range")
    return value


def _parse_int(text: str) -> int | float:
    if len(text) > MAX_NUMBER_DIGITS:
        raise DecodeError(f"json: number {text[:40]}... is too long")
    if len(text) > 19:  # beyond int64 Go decodes a float64 (and typed fields reject it)
        return _parse_float(text)
    return int(text)


def _parse_constant(text: str) -> Any:
    raise DecodeError(f"invalid character {text[0]!r} looking for beginning of value")


def decode_json(data: bytes | str) -> Decoded:
    """Parse a JSON body; DecodeError says what is malformed and where."""
    text = _text(data)
    decoded = Decoded(value=None, fmt="json")

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            decoded.dup_keys[id(obj)] = [k for k, _ in pairs]
            decoded._objects.append(obj)
        return obj

    try:
        value = json.loads(
            text,
            object_pairs_hook=pairs_hook,
            parse_float=_parse_float,
            parse_int=_parse_int,
            parse_constant=_parse_constant,
        )
    except json.JSONDecodeError as e:
        raise DecodeError(f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise DecodeError(f"invalid JSON: nested deeper than {MAX_DEPTH} levels") from None
    if _nesting_may_exceed(text):
        _check_depth(value)
    if _LONE_SURROGATE_ESCAPE.search(text):
        value = _replace_surrogates(value)
    decoded.value = value
    return decoded


def _nesting_may_exceed(text: str) -> bool:
    return text.count("{") + text.count("[") > MAX_DEPTH


def _check_depth(value: Any) -> None:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise DecodeError(f"invalid body: nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, dict):
            stack.extend((c, depth + 1) for c in v.values())
        elif isinstance(v, list):
            stack.extend((c, depth + 1) for c in v)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _fix(s: str) -> str:
    return _SURROGATE.sub("\ufffd", s)


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _fix(value)
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_fix(k): _replace_surrogates(v) for k, v in value.items()}
    return value


# ---- YAML ----

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present


class _Loader(_BaseLoader):  # type: ignore[misc]
    """PyYAML's safe loader, minus implicit timestamps (they stay strings, as in a JSON body),
    with mappings that record duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


def _yaml_key(key: Any, mark: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, int | float):
        return json.dumps(key) if not isinstance(key, float) or math.isfinite(key) else str(key)
    raise DecodeError(f"yaml: line {mark.line + 1}: a mapping key must be a scalar")


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> Any:
    data: dict[str, Any] = {}
    yield data
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = _yaml_key(loader.construct_object(key_node, deep=True), key_node.start_mark)
        if key in data:
            loader.duplicates.append(f"line {key_node.start_mark.line + 1}: key {json.dumps(key)} already set in map")
        data[key] = loader.construct_object(value_node, deep=False)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def decode_yaml(data: bytes | str) -> Decoded:
    """Parse a YAML body (one document); DecodeError for what JSON cannot hold."""
    text = _text(data)
    loader = _Loader(text)
    try:
        value = loader.get_single_data()
    except DecodeError:
        raise
    except yaml.YAMLError as e:
        raise DecodeError(f"yaml: {e}".replace("\n", " ")) from None
    except RecursionError:
        raise DecodeError(f"yaml: nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, TypeError, OverflowError) as e:  # e.g. an unhashable key, a bad !!int
        raise DecodeError(f"yaml: {e}") from None
    finally:
        loader.dispose()
    budget = [MAX_NODES]
    return Decoded(value=_plain(value, 0, budget), fmt="yaml", yaml_duplicates=loader.duplicates)


def _plain(value: Any, depth: int, budget: list[int]) -> Any:
    """A JSON-shaped copy of a constructed YAML value (aliases become copies, within budget)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise DecodeError(f"yaml: document expands to more than {MAX_NODES} values (aliases)")
    if depth > MAX_DEPTH:
        raise DecodeError(f"yaml: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DecodeError(f"yaml: {value} cannot be represented in JSON")
        return value
    if isinstance(value, dict):
        return {_yaml_key(k, _NoMark): _plain(v, depth + 1, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1, budget) for v in value]
    raise DecodeError(f"yaml: a {type(value).__name__} value cannot be represented in JSON")


class _NoMark:
    line = -1


def decode(data: bytes | str, content_type: str) -> Decoded:
    """Decode by media type: `application/yaml` (and `application/apply-patch+yaml`) as YAML,
    anything else as JSON."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media.endswith("yaml"):
        return decode_yaml(data)
    return decode_json(data)
