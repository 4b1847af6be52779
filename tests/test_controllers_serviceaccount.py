"""The ServiceAccounts controller's and the root-CA publisher's decisions, table-tested against
upstream's serviceaccounts_controller_test.go and rootcacertpublisher/publisher_test.go cases."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.controllers.common.actions import Create, Update
from nodeagent.cluster.controllers.serviceaccount import accounts, rootca

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def ns(name: str = "team", phase: str | None = "Active", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": "ns-uid"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta, "status": {"phase": phase} if phase else {}}


@pytest.mark.parametrize(("namespace", "existing", "creates"), [
    (ns(), set(), ["default"]),                      # new namespace: default made
    (ns(phase=None), set(), ["default"]),            # no phase yet reads as Active
    (ns(), {"default"}, []),                         # already there
    (ns(), {"builder"}, ["default"]),                # another account does not count
    (ns(phase="Terminating"), set(), []),            # terminating: nothing made
    (ns(deleting=True), set(), []),                  # deletionTimestamp: nothing made
    (None, set(), []),                               # namespace gone
])
def test_default_account(namespace: dict[str, Any] | None, existing: set[str], creates: list[str]) -> None:
    plan = accounts.decide(namespace, existing)
    made = plan.of_type(Create)
    assert [c.obj["metadata"]["name"] for c in made] == creates
    for c in made:
        assert c.obj["kind"] == "ServiceAccount" and c.obj["metadata"]["namespace"] == "team"
    assert len(plan.actions) == len(made)


def cm(data: dict[str, str] | None, annotations: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": rootca.CONFIGMAP, "namespace": "team", "resourceVersion": "7", **extra}
    if annotations is not None:
        meta["annotations"] = annotations
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data is not None:
        out["data"] = data
    return out


GOOD_ANN = {rootca.DESCRIPTION_ANNOTATION: rootca.DESCRIPTION}


def test_root_ca_created_when_missing() -> None:
    plan = rootca.decide(ns(), None, CA)
    (create,) = plan.actions
    assert isinstance(create, Create)
    assert create.obj == {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "kube-root-ca.crt", "namespace": "team", "annotations": GOOD_ANN},
                          "data": {"ca.crt": CA}}


@pytest.mark.parametrize(("configmap", "update"), [
    (cm({"ca.crt": CA}, GOOD_ANN), False),                          # as it should be
    (cm({"ca.crt": CA}, {rootca.DESCRIPTION_ANNOTATION: "mine"}), False),  # any description is kept (upstream)
    (cm({"ca.crt": "old"}, GOOD_ANN), True),                         # stale CA
    (cm({"ca.crt": CA, "extra": "x"}, GOOD_ANN), True),              # extra keys dropped
    (cm(None, GOOD_ANN), True),                                      # data removed
    (cm({"ca.crt": CA}), True),                                      # annotation missing
])
def test_root_ca_updated_when_it_differs(configmap: dict[str, Any], update: bool) -> None:
    plan = rootca.decide(ns(), configmap, CA)
    assert [type(a) for a in plan.actions] == ([Update] if update else [])
    if update:
        obj = plan.actions[0].obj  # type: ignore[union-attr]
        assert obj["data"] == {"ca.crt": CA}
        assert obj["metadata"]["resourceVersion"] == "7"  # a compare-and-swap on what was read
        assert obj["metadata"]["annotations"][rootca.DESCRIPTION_ANNOTATION]
        assert configmap["metadata"].get("annotations") != obj["metadata"]["annotations"] or \
            configmap.get("data") != obj["data"]


def test_root_ca_update_keeps_other_annotations_and_labels() -> None:
    got = cm({"ca.crt": "old"}, {"team": "a"}, labels={"x": "y"})
    obj = rootca.decide(ns(), got, CA).actions[0].obj  # type: ignore[union-attr]
    assert obj["metadata"]["annotations"] == {"team": "a", **GOOD_ANN} and obj["metadata"]["labels"] == {"x": "y"}
    assert got["data"] == {"ca.crt": "old"} and got["metadata"]["annotations"] == {"team": "a"}  # the cache untouched


@pytest.mark.parametrize("namespace", [ns(phase="Terminating"), ns(deleting=True), None])
def test_root_ca_not_published_in_a_namespace_going_away(namespace: dict[str, Any] | None) -> None:
    assert rootca.decide(namespace, None, CA).actions == []
    assert rootca.decide(namespace, cm({"ca.crt": "old"}), CA).actions == []
