"""Reads kubernetes-validate's `_definitions.json` (Kubernetes 1.37) into compact Schema nodes.

Why this way: the package's own API validates through `jsonschema` (and imports it, with
referencing and friends); we need the definitions themselves, their extensions and a fast
walk, so only the data file is read: located with importlib without importing the package, parsed
once, turned into slotted nodes, and the parsed JSON dropped. Kept per node: shape, nullability,
format, description (kubectl explain shows it), properties, required, items, additionalProperties,
enum and the `x-*` extensions. The figures are in bench/schema_bench.py.

The source is JSON schema as openapi2jsonschema writes it: optional fields are
`type: [T, "null"]`; `$ref` is `#/$defs/<name>`; IntOrString and Quantity are `oneOf` string and
integer / number. Definitions that are objects without properties are free-form (ANY) only when
they are free-form upstream (RawExtension, apiextensions JSON, FieldsV1, the JSONSchemaProps
unions); any other empty struct has no fields, as in Go.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeagent.cluster.schema.model import Schema, Shape

KUBERNETES_VERSION = "1.37.0"
DEFINITIONS_FILE = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local/_definitions.json"
REF_PREFIX = "#/$defs/"

FREE_FORM = frozenset(
    {
        "io.k8s.apimachinery.pkg.runtime.RawExtension",
        "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
    }
)

_SCALARS = {
    "string": Shape.STRING,
    "integer": Shape.INTEGER,
    "number": Shape.NUMBER,
    "boolean": Shape.BOOLEAN,
    "array": Shape.LIST,
}


class SchemaSourceError(RuntimeError):
    """The definitions file is missing or not what we expect (a packaging problem, not input)."""


def definitions_path() -> Path:
    """Where the installed kubernetes-validate keeps the 1.37 definitions (the package is not imported)."""
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise SchemaSourceError("the kubernetes-validate package is not installed")
    for location in spec.submodule_search_locations:
        path = Path(location) / DEFINITIONS_FILE
        if path.is_file():
            return path
    raise SchemaSourceError(f"kubernetes-validate has no {DEFINITIONS_FILE}")


def load_raw(path: Path | None = None) -> Mapping[str, Any]:
    """The `$defs` of the file, as parsed JSON."""
    with open(path or definitions_path(), "rb") as f:
        doc = json.load(f)
    defs = doc.get("$defs") if isinstance(doc, dict) else None
    if not isinstance(defs, dict):
        raise SchemaSourceError("the definitions file has no $defs object")
    return defs


def compact(raw: Mapping[str, Any]) -> dict[str, Schema]:
    """Turn parsed `$defs` into linked Schema nodes, one per definition name."""
    builder = _Builder(raw)
    nodes = {name: builder.definition(name) for name in raw}
    builder.link(nodes)
    return nodes


class _Builder:
    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw
        self._refs: list[tuple[Schema, str]] = []
        self._strings: dict[str, str] = {}

    def _intern(self, s: str) -> str:
        return self._strings.setdefault(s, s)

    def definition(self, name: str) -> Schema:
        return self.node(self._raw[name], name=name)

    def node(self, raw: Mapping[str, Any], name: str | None = None) -> Schema:
        description = raw.get("description")
        ext = {self._intern(k): v for k, v in raw.items() if k.startswith("x-")}
        ref = raw.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith(REF_PREFIX):
                raise SchemaSourceError(f"unexpected $ref {ref!r}")
            node = Schema(description=description, extensions=ext, fmt=raw.get("format"))
            self._refs.append((node, ref[len(REF_PREFIX):]))
            return node
        types, nullable = _types(raw)
        one_of = raw.get("oneOf")
        properties: dict[str, Schema] | None = None
        items = additional = None
        if one_of:
            alternatives = {t for alt in one_of for t in _types(alt)[0]}
            nullable = nullable or any(_types(alt)[1] for alt in one_of)
            if alternatives == {"string", "integer"}:
                shape = Shape.INT_OR_STRING
            elif alternatives == {"string", "number"}:
                shape = Shape.QUANTITY
            else:
                shape = Shape.ANY
        elif raw.get("x-kubernetes-int-or-string"):
            shape = Shape.INT_OR_STRING
        elif "properties" in raw:
            shape = Shape.STRUCT
            properties = {self._intern(k): self.node(v) for k, v in raw["properties"].items()}
        elif isinstance(raw.get("additionalProperties"), dict):
            shape = Shape.MAP
            additional = self.node(raw["additionalProperties"])
        elif "array" in types:
            shape = Shape.LIST
            items = self.node(raw["items"]) if isinstance(raw.get("items"), dict) else Schema(shape=Shape.ANY)
        elif "object" in types:
            free = name in FREE_FORM or raw.get("x-kubernetes-preserve-unknown-fields")
            shape = Shape.ANY if free else Shape.STRUCT
            properties = None
        elif len(types) == 1 and next(iter(types)) in _SCALARS:
            shape = _SCALARS[next(iter(types))]
        else:
            shape = Shape.ANY
        embedded = raw.get("x-kubernetes-embedded-resource")
        if shape == Shape.STRUCT and properties is None and name is None and not embedded:
            shape = Shape.ANY  # an inline `type: object` without properties (CRD style) is free-form
        required = tuple(self._intern(r) for r in raw.get("required", ()) if isinstance(r, str))
        enum = raw.get("enum")
        return Schema(
            shape=shape,
            name=name,
            description=description,
            nullable=nullable,
            fmt=raw.get("format"),
            properties=properties,
            required=required,
            items=items,
            additional=additional,
            enum=tuple(enum) if isinstance(enum, list) else None,
            extensions=ext,
        )

    def link(self, nodes: Mapping[str, Schema]) -> None:
        for node, target in self._refs:
            if target not in nodes:
                raise SchemaSourceError(f"$ref to an unknown definition {target!r}")
            node.ref = nodes[target]


def _types(raw: Mapping[str, Any]) -> tuple[set[str], bool]:
    t = raw.get("type")
    types = {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)} if isinstance(t, list) else set()
    nullable = "null" in types
    types.discard("null")
    return types, nullable
