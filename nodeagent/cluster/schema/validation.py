"""Server-side field validation, as kube-apiserver's strict decoding does it, plus type checks.

`validate_fields(schema, body)` walks a decoded body along its schema and returns an Outcome
(for a patch: `validate_fields(schema, patched).after(body_problems(patch_body))`, which puts the
patch body's duplicates first and the patched object's unknown fields after, as upstream does):
- `problems`: what strict decoding objects to, in upstream's order and wording
  (`unknown field "spec.foo"`, `duplicate field "metadata.name"`; for YAML bodies go-yaml's
  `line N: key "k" already set in map` first). With `fieldValidation=Strict` they make the
  request fail (400 `strict decoding error: ...`, see `strict_error`); with Warn (the default)
  each is a `Warning: 299` text; with Ignore nothing is said.
- `errors`: values of the wrong type for the schema (a `spec` that is a number, a string where a
  map is due, 3000000000 in an int32, a malformed quantity or date-time, non-base64 bytes) as
  FieldErrors with their path, for 422 Invalid. Malformed input never raises.
- `value`: the body as Go's typed decoding would keep it: unknown fields dropped (in every mode),
  null struct fields dropped, null list items and map values turned into their zero value.

As upstream: a field both unknown and duplicated is reported once, as unknown (JSON); fields
under `x-kubernetes-preserve-unknown-fields` and free-form values (RawExtension) are kept as they
are; an `x-kubernetes-embedded-resource` object knows apiVersion, kind and metadata (checked as
ObjectMeta). Bodies decoded from YAML, and values re-encoded after a patch, are walked in sorted
key order, as upstream re-marshals them from Go maps before decoding strictly. Not checked here
(the kinds' own validation does it, after defaulting): `required` and `enum`. kube-apiserver
prefixes the strict error with `<Kind> in version "<v>" cannot be handled as a <Kind>: `; that,
the 400 and the `Warning: 299 - "<text>"` headers are the API's.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

import orjson

from nodeagent.cluster.schema.decode import MAX_DEPTH, Decoded
from nodeagent.cluster.schema.model import Schema, Shape
from nodeagent.core.errors import FieldError
from nodeagent.core.quantity import parse_quantity

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
QUANTITY_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", re.ASCII)
_SHOWN = 64  # characters of a bad value quoted in a message


class FieldValidation(StrEnum):
    STRICT = "Strict"
    WARN = "Warn"
    IGNORE = "Ignore"


def parse_field_validation(raw: str | None) -> FieldValidation:
    """The `fieldValidation` query parameter; unset or empty is Warn, as in kube-apiserver.
    Anything else raises FieldError (kube-apiserver: 422 on the request's options)."""
    if not raw:
        return FieldValidation.WARN
    try:
        return FieldValidation(raw)
    except ValueError:
        shown = raw if len(raw) <= _SHOWN else raw[:_SHOWN] + "..."
        raise FieldError(
            "fieldValidation",
            f'Unsupported value: "{shown}": supported values: "Ignore", "Strict", "Warn"',
        ) from None


class CausedFieldError(FieldError):
    """A FieldError that names its Kubernetes cause reason (a Status cause's `reason`)."""

    reason: ClassVar[str] = "FieldValueInvalid"


class FieldTypeError(CausedFieldError):
    """A value of the wrong JSON type (Kubernetes cause reason FieldValueTypeInvalid)."""

    reason = "FieldValueTypeInvalid"


class FieldValueError(CausedFieldError):
    """A value of the right type that its format or range rejects (FieldValueInvalid)."""

    reason = "FieldValueInvalid"


@dataclass(frozen=True, slots=True)
class Outcome:
    value: Any
    problems: tuple[str, ...]
    errors: tuple[FieldError, ...]
    yaml_duplicates: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems and not self.errors and not self.yaml_duplicates

    def warnings(self, mode: FieldValidation) -> list[str]:
        """Texts for `Warning: 299 - "<text>"` headers (Warn only)."""
        if mode != FieldValidation.WARN:
            return []
        return [*self.yaml_duplicates, *self.problems]

    def after(self, body_problems: Sequence[str]) -> Outcome:
        """This outcome (of a patched object) with the problems of the patch body itself first, as
        upstream reports them for patches."""
        return Outcome(self.value, (*body_problems, *self.problems), self.errors, self.yaml_duplicates)

    def strict_error(self, mode: FieldValidation) -> str | None:
        """The 400 message under Strict when strict decoding objects to something, else None."""
        if mode != FieldValidation.STRICT or not (self.problems or self.yaml_duplicates):
            return None
        parts: list[str] = []
        if self.yaml_duplicates:
            parts.append("yaml: unmarshal errors:\n" + "\n".join(f"  {d}" for d in self.yaml_duplicates))
        parts.extend(self.problems)
        return "strict decoding error: " + ", ".join(parts)


def body_problems(body: Decoded) -> list[str]:
    """The strict-decoding problems of a merge or strategic patch body on its own (its duplicate
    fields); for JSON patch bodies use cluster.patch.jsonpatch.operation_problems."""
    if body.fmt == "yaml":
        return list(body.yaml_duplicates)
    return [f'duplicate field "{path}"' for path in body.duplicate_fields()]


def validate_fields(
    schema: Schema,
    body: Decoded | Any,
    *,
    object_meta: Schema | None = None,
    sorted_keys: bool | None = None,
) -> Outcome:
    """Check `body` (a Decoded body, or a plain value such as a patched object) against `schema`.

    `object_meta` is the schema embedded resources' metadata is checked against (free-form
    without it). `sorted_keys` forces the walk order; by default YAML bodies and plain values
    are walked sorted, JSON bodies in document order.
    """
    decoded = body if isinstance(body, Decoded) else None
    value = decoded.value if decoded is not None else body
    if sorted_keys is None:
        sorted_keys = decoded is None or decoded.fmt == "yaml"
    walker = _Walker(decoded if decoded is not None and decoded.fmt == "json" else None, sorted_keys, object_meta)
    if value is None:
        walker.errors.append(_type_error("", value, "object"))
        pruned = None
    else:
        pruned = walker.walk(schema, value, "", "", 0)
    yaml_dups = tuple(decoded.yaml_duplicates) if decoded is not None and decoded.fmt == "yaml" else ()
    return Outcome(pruned, tuple(walker.problems), tuple(walker.errors), yaml_dups)


_STRING = Schema(shape=Shape.STRING)
_ANY = Schema(shape=Shape.ANY)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _type_error(path: str, value: Any, expected: str) -> FieldError:
    actual = _json_type(value)
    where = path or "body"
    return FieldTypeError(path, f'Invalid value: "{actual}": {where} in body must be of type {expected}: "{actual}"')


def _shown(value: str) -> str:
    text = value if len(value) <= _SHOWN else value[:_SHOWN] + "..."
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _zero(schema: Schema) -> Any:
    """What Go's decoder leaves for a JSON null in a list item or map value of this schema."""
    shape = schema.shape
    if shape in (Shape.STRUCT, Shape.MAP):
        return {}
    if shape == Shape.STRING:
        return ""
    if shape in (Shape.INTEGER, Shape.NUMBER, Shape.INT_OR_STRING):
        return 0
    if shape == Shape.BOOLEAN:
        return False
    if shape == Shape.QUANTITY:
        return "0"
    return None


def _info(schema: Schema) -> tuple[Shape, str | None]:
    """(shape, format) of a node, computed once per node."""
    cache = schema.cache
    if cache is None:
        cache = schema.cache = {}
    info: tuple[Shape, str | None] | None = cache.get("validation")
    if info is None:
        info = cache["validation"] = (schema.shape, schema.format)
    return info


def _plain_scalar(schema: Schema, value: Any) -> bool:
    """A value that needs no check: a string without format, a boolean, an int64 integer."""
    shape, fmt = _info(schema)
    kind = type(value)
    if shape is Shape.STRING:
        return kind is str and fmt is None
    if shape is Shape.BOOLEAN:
        return kind is bool
    if shape is Shape.INTEGER and kind is int:
        low, high = INT32 if fmt == "int32" else INT64
        return bool(low <= value <= high)
    return False


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _CleanMemo:
    """Top-level fields (a pod's spec) that a walk found clean: no unknown, duplicate or invalid
    field, nothing dropped, by their canonical JSON. A ReplicaSet's pods share one spec, which is
    then walked once, not on every create. Least recently used values go first."""

    SIZE = 256

    def __init__(self) -> None:
        self._clean: dict[bytes, Schema] = {}

    def seen(self, schema: Schema, key: bytes) -> bool:
        hit = self._clean.pop(key, None)
        if hit is None:
            return False
        self._clean[key] = hit
        return hit is schema

    def add(self, schema: Schema, key: bytes) -> None:
        if len(self._clean) >= self.SIZE:
            del self._clean[next(iter(self._clean))]
        self._clean[key] = schema


_CLEAN = _CleanMemo()


class _Walker:
    def __init__(self, decoded: Decoded | None, sorted_keys: bool, object_meta: Schema | None) -> None:
        self.decoded = decoded
        self.sorted_keys = sorted_keys
        self.object_meta = object_meta
        self.problems: list[str] = []
        self.errors: list[FieldError] = []
        # the memo answers for a value, not for its text: usable when the text repeated no key, and
        # when the walk keeps the document's key order (a sorted walk's output is ordered anew)
        self.memo = not sorted_keys and (decoded is None or not decoded.dup_keys)

    def _top_field(self, schema: Schema, value: dict[str, Any], upath: str, fpath: str) -> Any:
        """walk() of a top-level field, or the value itself when the same value walked clean before."""
        try:
            key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # what orjson cannot encode (an integer beyond 64 bits) is walked each time
            return self.walk(schema, value, upath, fpath, 1)
        if _CLEAN.seen(schema, key):
            return value
        problems, errors = len(self.problems), len(self.errors)
        out = self.walk(schema, value, upath, fpath, 1)
        if len(self.problems) == problems and len(self.errors) == errors and out == value:
            _CLEAN.add(schema, key)
        return out

    def _keys(self, obj: dict[str, Any]) -> list[str]:
        if self.decoded is not None and not self.sorted_keys:
            order = self.decoded.key_order(obj)
            if order is not None:
                return order
        return sorted(obj) if self.sorted_keys else list(obj)

    def walk(self, schema: Schema, value: Any, upath: str, fpath: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            self.errors.append(FieldValueError(fpath, f"nested deeper than {MAX_DEPTH} levels"))
            return value
        shape = _info(schema)[0]
        if shape == Shape.STRUCT:
            return self._struct(schema, value, upath, fpath, depth)
        if shape == Shape.MAP:
            return self._map(schema, value, upath, fpath, depth)
        if shape == Shape.LIST:
            return self._list(schema, value, upath, fpath, depth)
        if shape != Shape.ANY:
            self._scalar(schema, shape, value, fpath)
        return value

    def _field(self, schema: Schema, key: str) -> Schema | None:
        child = schema.field(key)
        if child is None and schema.embedded_resource:
            if key in ("apiVersion", "kind"):
                return _STRING
            if key == "metadata":
                return self.object_meta or _ANY
        return child

    def _struct(self, schema: Schema, value: Any, upath: str, fpath: str, depth: int) -> Any:
        if not isinstance(value, dict):
            self.errors.append(_type_error(fpath, value, "object"))
            return value
        preserve = schema.preserve_unknown_fields
        keys = self._keys(value)
        last = {key: i for i, key in enumerate(keys)} if len(keys) != len(value) else None
        seen: set[str] = set()
        out: dict[str, Any] = {}
        for i, key in enumerate(keys):
            repeat = key in seen
            seen.add(key)
            child = self._field(schema, key)
            if child is None:
                if preserve:
                    out[key] = value[key]
                elif not repeat:
                    self.problems.append(f'unknown field "{_join(upath, key)}"')
                continue
            if repeat:
                self.problems.append(f'duplicate field "{_join(upath, key)}"')
            if last is not None and last[key] != i:
                continue
            item = value[key]
            if item is None:
                continue  # Go leaves the zero value, which is not written back
            if _plain_scalar(child, item):
                out[key] = item
                continue
            if depth == 0 and self.memo and item and isinstance(item, dict) and key != "metadata":
                out[key] = self._top_field(child, item, _join(upath, key), _join(fpath, key))
                continue
            out[key] = self.walk(child, item, _join(upath, key), _join(fpath, key), depth + 1)
        return out

    def _map(self, schema: Schema, value: Any, upath: str, fpath: str, depth: int) -> Any:
        if not isinstance(value, dict):
            self.errors.append(_type_error(fpath, value, "object"))
            return value
        item_schema = schema.additional or _ANY
        keys = self._keys(value)
        last = {key: i for i, key in enumerate(keys)} if len(keys) != len(value) else None
        seen: set[str] = set()
        out: dict[str, Any] = {}
        for i, key in enumerate(keys):
            if key in seen:
                self.problems.append(f'duplicate field "{_join(upath, key)}"')
            seen.add(key)
            if last is not None and last[key] != i:
                continue
            item = value[key]
            if item is None:
                out[key] = _zero(item_schema)
            else:
                out[key] = self.walk(item_schema, item, _join(upath, key), f"{fpath}[{key}]", depth + 1)
        return out

    def _list(self, schema: Schema, value: Any, upath: str, fpath: str, depth: int) -> Any:
        if not isinstance(value, list):
            self.errors.append(_type_error(fpath, value, "array"))
            return value
        item_schema = schema.items or _ANY
        out = []
        for i, item in enumerate(value):
            if item is None:
                out.append(_zero(item_schema))
            else:
                out.append(self.walk(item_schema, item, f"{upath}[{i}]", f"{fpath}[{i}]", depth + 1))
        return out

    def _scalar(self, schema: Schema, shape: Shape, value: Any, fpath: str) -> None:
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if shape == Shape.STRING:
            if not isinstance(value, str):
                self.errors.append(_type_error(fpath, value, "string"))
            else:
                self._string_format(schema.format, value, fpath)
        elif shape == Shape.INTEGER:
            if not is_int:
                self.errors.append(_type_error(fpath, value, "integer"))
            else:
                self._range(schema.format, value, fpath)
        elif shape == Shape.NUMBER:
            if not (is_int or isinstance(value, float)):
                self.errors.append(_type_error(fpath, value, "number"))
        elif shape == Shape.BOOLEAN:
            if not isinstance(value, bool):
                self.errors.append(_type_error(fpath, value, "boolean"))
        elif shape == Shape.INT_OR_STRING:
            if is_int:
                self._range("int32", value, fpath)
            elif not isinstance(value, str):
                self.errors.append(_type_error(fpath, value, "integer or string"))
        elif shape == Shape.QUANTITY:
            if isinstance(value, str):
                try:
                    parse_quantity(value)
                except ValueError:
                    self.errors.append(FieldValueError(fpath, f"Invalid value: {_shown(value)}: {QUANTITY_MESSAGE}"))
            elif not (is_int or isinstance(value, float)):
                self.errors.append(_type_error(fpath, value, "string or number"))

    def _range(self, fmt: str | None, value: int, fpath: str) -> None:
        low, high = INT32 if fmt == "int32" else INT64
        if not low <= value <= high:
            bits = 32 if fmt == "int32" else 64
            shown = str(value) if len(str(value)) <= _SHOWN else str(value)[:_SHOWN] + "..."
            message = f"Invalid value: {shown}: must fit in a {bits}-bit signed integer ({low} to {high})"
            self.errors.append(FieldValueError(fpath, message))

    def _string_format(self, fmt: str | None, value: str, fpath: str) -> None:
        if fmt == "byte":
            try:
                base64.b64decode(value.replace("\n", "").replace("\r", ""), validate=True)
            except (binascii.Error, ValueError):
                # the value is not shown: byte fields hold Secret data
                message = "Invalid value: illegal base64 data (want RFC 4648 base64 with padding)"
                self.errors.append(FieldValueError(fpath, message))
        elif fmt == "date-time" and not _is_rfc3339(value):
            message = f'Invalid value: {_shown(value)}: must be an RFC 3339 date-time such as "2024-05-01T12:00:00Z"'
            self.errors.append(FieldValueError(fpath, message))


def _is_rfc3339(value: str) -> bool:
    if not _RFC3339.fullmatch(value):
        return False
    try:
        datetime.datetime.fromisoformat(value)
    except ValueError:
        return False
    return True
