"""Which namespaces may be deleted: kube-apiserver's NamespaceLifecycle keeps default, kube-system
and kube-public (403 Forbidden, before preconditions and dry-run); every other one, kube-node-lease
included, goes Terminating."""

from __future__ import annotations

import pytest
from kube.fixtures import make_registry

from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.options import Context, DeleteOptions


@pytest.mark.parametrize(("name", "refused"), [
    ("default", True), ("kube-system", True), ("kube-public", True),
    ("kube-node-lease", False), ("kube-other", False), ("defaults", False),
])
async def test_only_the_immortal_namespaces_are_refused(name: str, refused: bool) -> None:
    reg, _, _ = await make_registry()
    ns = reg.resource("", "v1", "namespaces")
    if name not in ("default", "kube-system", "kube-public", "kube-node-lease"):
        await ns.create(None, {"metadata": {"name": name}}, Context())
    if refused:
        for opts, ctx in ((DeleteOptions(), Context()), (DeleteOptions(uid="wrong"), Context(dry_run=True))):
            with pytest.raises(errors.StatusError) as e:
                await ns.delete(None, name, opts, ctx)
            assert (e.value.code, e.value.status["reason"], e.value.status["message"]) == \
                (403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted')
            assert e.value.status["details"] == {"name": name, "kind": "namespaces"}
        got = await ns.get(None, name)
        assert got["status"]["phase"] == "Active" and "deletionTimestamp" not in got["metadata"]
    else:
        obj, gone = await ns.delete(None, name, DeleteOptions(), Context())
        assert not gone and obj["status"]["phase"] == "Terminating"
