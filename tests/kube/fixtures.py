"""Shared helpers of the registry and API tests: a registry over the tests' MemoryStore, and the
`registry` fixture of the controller-manager tests (the server's own plugins)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeagent.cluster.controlplane import plugins as server_plugins
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


@pytest.fixture(name="registry")
async def served_registry() -> AsyncIterator[tuple[Registry, FakeClock]]:
    """A registry with the plugins `server run` gives it, over a memory store and a fake clock;
    a module imports this to have the `registry` fixture."""
    clock = FakeClock()
    store = MemoryStore()
    reg = Registry(store, clock, plugins=server_plugins(clock))
    await reg.ensure_system_namespaces()
    yield reg, clock
    await reg.close()
    await store.close()


def pod(name: str = "web", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "command": ["sleep", "100"]}], **spec}}
