"""Shared helpers of the registry and API tests: a registry over the tests' MemoryStore."""

from __future__ import annotations

import random
from typing import Any

from memstore import MemoryStore

from nodeagent.cluster.registry.fieldcheck import SchemaFieldValidator
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import Plugins
from nodeagent.core.clock import FakeClock

_VALIDATOR: SchemaFieldValidator | None = None


def validator() -> SchemaFieldValidator:
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = SchemaFieldValidator()
    return _VALIDATOR


async def make_registry(*, validate: bool = True) -> tuple[Registry, MemoryStore, FakeClock]:
    store, clock = MemoryStore(), FakeClock()
    plugins = Plugins(validator=validator() if validate else None)
    try:
        from nodeagent.cluster.registry.patching import RegistryPatcher  # the patch room's adapter, once wired
        plugins.patcher = RegistryPatcher()
    except ModuleNotFoundError:
        pass
    reg = Registry(store, clock, plugins=plugins, rng=random.Random(7))
    await reg.ensure_system_namespaces()
    return reg, store, clock


def pod(name: str = "web", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "command": ["sleep", "100"]}], **spec}}
