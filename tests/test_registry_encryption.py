"""Secrets encrypted at rest through the registry: ciphertext in the store, plain JSON above it."""

from __future__ import annotations

import base64

from nodeagent.cluster.auth.encryption import parse_encryption_config
from nodeagent.cluster.registry.encrypted import EncryptedStore
from nodeagent.cluster.registry.options import Context, ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock

CONFIG = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
          "resources": [{"resources": ["secrets"], "providers": [
              {"aesgcm": {"keys": [{"name": "key1", "secret": base64.b64encode(b"k" * 32).decode()}]}},
              {"identity": {}}]}]}


async def test_secret_values_are_ciphertext_in_the_store_and_plain_above_it() -> None:
    inner = MemoryStore()
    store = EncryptedStore(inner, parse_encryption_config(CONFIG, "test"))
    reg = Registry(store, FakeClock())
    await reg.ensure_system_namespaces()
    secrets = reg.resource("", "v1", "secrets")
    cms = reg.resource("", "v1", "configmaps")
    rv = str(store.revision)
    watch = await secrets.watch("default", ListOptions(watch=True, resource_version=rv))
    await secrets.create("default", {"metadata": {"name": "s"}, "stringData": {"pw": "hunter2"}}, Context())
    await cms.create("default", {"metadata": {"name": "c"}, "data": {"a": "1"}}, Context())
    kv, _ = await inner.get("/registry/core/secrets/default/s")
    assert kv is not None and kv.value.startswith(b"k8s:enc:aesgcm:v1:key1:") and b"aHVudGVyMg" not in kv.value
    plain, _ = await inner.get("/registry/core/configmaps/default/c")
    assert plain is not None and plain.value.startswith(b"{")  # other resources stay plain
    got = await secrets.get("default", "s")
    assert got["data"] == {"pw": base64.b64encode(b"hunter2").decode()}
    raw, _ = await secrets.list_raw("default", ListOptions())
    assert b"aHVudGVyMg" in raw[0]
    item = await watch.subscription.next(2.0)
    assert item is not None and item.object["data"]["pw"] == "aHVudGVyMg=="
    got["data"]["pw"] = base64.b64encode(b"new").decode()
    await secrets.update("default", "s", got, Context())
    assert (await secrets.get("default", "s"))["data"]["pw"] == "bmV3"
    await reg.close()
