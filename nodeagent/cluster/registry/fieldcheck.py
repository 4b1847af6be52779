"""The FieldValidator of the registry, backed by the schema room's field validation.

Each kind is checked against its Kubernetes 1.37 definition (found by GVK); ObjectMeta is the
schema of embedded resources' metadata. A kind without a definition (none today) passes as is.
"""

from __future__ import annotations

from typing import Any

from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.plugins import FieldCheck
from nodeagent.cluster.schema.decode import Decoded
from nodeagent.cluster.schema.definitions import OBJECT_META, Definitions, definitions
from nodeagent.cluster.schema.model import Gvk, Schema
from nodeagent.cluster.schema.validation import FieldValidation, validate_fields


class SchemaFieldValidator:
    def __init__(self, defs: Definitions | None = None) -> None:
        self.defs = defs or definitions()
        self.object_meta = self.defs.by_ref(OBJECT_META)
        self._cache: dict[tuple[str, str, str], Schema | None] = {}

    def schema(self, info: ResourceInfo) -> Schema | None:
        key = (info.group, info.version, info.kind)
        if key not in self._cache:
            self._cache[key] = self.defs.by_gvk(Gvk(*key))
        return self._cache[key]

    def check(self, body: Any, info: ResourceInfo, mode: str) -> FieldCheck:
        schema = self.schema(info)
        if schema is None:
            return FieldCheck(body.value if isinstance(body, Decoded) else body)
        outcome = validate_fields(schema, body, object_meta=self.object_meta)
        m = FieldValidation(mode)
        return FieldCheck(outcome.value, tuple(outcome.warnings(m)), outcome.strict_error(m), outcome.errors)
