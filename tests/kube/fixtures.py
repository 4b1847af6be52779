"""Shared helpers of the registry and API tests: a registry over the tests' MemoryStore."""

from __future__ import annotations

import random
from typing import Any

from nodeagent.cluster.registry.fieldcheck import SchemaFieldValidator
from nodeagent.cluster.registry.patching import RegistryFieldManager, RegistryPatcher
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import Plugins
from nodeagent.cluster.storage.interface import StoreError
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock

_VALIDATOR: SchemaFieldValidator | None = None


class FailingStore(MemoryStore):
    """The storage room's MemoryStore; `fail_next` makes the next txn fail as a broken disk would."""

    fail_next = False

    async def txn(self, compares, success, failure=()):  # type: ignore[no-untyped-def]
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk I/O error")
        return await super().txn(compares, success, failure)


def validator() -> SchemaFieldValidator:
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = SchemaFieldValidator()
    return _VALIDATOR


async def make_registry(*, validate: bool = True) -> tuple[Registry, FailingStore, FakeClock]:
    store, clock = FailingStore(), FakeClock()
    plugins = Plugins(validator=validator() if validate else None, patcher=RegistryPatcher(clock),
                      field_manager=RegistryFieldManager(clock))
    reg = Registry(store, clock, plugins=plugins, rng=random.Random(7))
    await reg.ensure_system_namespaces()
    return reg, store, clock


def pod(name: str = "web", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "command": ["sleep", "100"]}], **spec}}
