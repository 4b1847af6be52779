"""The pod registry's spec memo (registry/kinds/pods.py): a spec seen before is not parsed, checked
or defaulted again, and the answer is the one a full parse gives, errors included, for pods that
share a spec but differ in metadata, for specs the model refuses, and for fields it does not know."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeagent.cluster.registry.kinds import pods
from nodeagent.cluster.registry.kinds.pods import PodStrategy, pod_model
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.model import parse_pod


def manifest(name: str, spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {}},
            "spec": spec or {"containers": [{"name": "c", "image": "busybox:1.36",
                                             "resources": {"limits": {"cpu": "100m", "memory": "16Mi"}}}]}}


def errors_of(obj: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationErrors) as e:
        pod_model(obj)
    return [(x.path, x.message) for x in e.value.errors]


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch: pytest.MonkeyPatch) -> pods._SpecMemo:
    memo = pods._SpecMemo()
    monkeypatch.setattr(pods, "_SPECS", memo)
    return memo


def test_pods_sharing_a_spec_get_their_own_metadata_and_the_full_parse_answer(fresh_memo: pods._SpecMemo) -> None:
    first, second = manifest("a", labels={"app": "x"}), manifest("b", labels={"app": "y"})
    got = [pod_model(first), pod_model(second)]
    assert len(fresh_memo._specs) == 1  # one spec, parsed once
    for obj, model in zip((first, second), got, strict=True):
        assert model == parse_pod(obj)
        assert model.spec.containers[0].resources.requests == model.spec.containers[0].resources.limits  # defaulted
    assert got[1].metadata.name == "b" and got[1].metadata.labels == {"app": "y"}


def test_bad_metadata_is_refused_with_a_remembered_spec() -> None:
    pod_model(manifest("a"))
    assert errors_of(manifest("b", labels={"bad key!": "v"})) == errors_of(
        manifest("b", labels={"bad key!": "v"}) | {"spec": manifest("b")["spec"]})
    assert [p for p, _ in errors_of(manifest("b", labels={"bad key!": "v"}))] == ["metadata.labels"]


def test_a_spec_with_errors_gives_them_every_time(fresh_memo: pods._SpecMemo) -> None:
    spec = {"containers": [{"name": "c", "image": "busybox"}, {"name": "c", "image": "busybox"}]}
    want = [("spec.containers[1].name", 'Duplicate value: "c"')]
    assert errors_of(manifest("a", copy.deepcopy(spec))) == want
    assert errors_of(manifest("b", copy.deepcopy(spec))) == want  # from the memo
    assert errors_of(manifest("c", copy.deepcopy(spec), labels={"bad key!": "v"}))[1:] == want


def test_a_spec_the_model_refuses_is_parsed_whole_and_not_remembered(fresh_memo: pods._SpecMemo) -> None:
    spec = {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "lots"}}}]}
    paths = [p for p, _ in errors_of(manifest("a", spec))]
    assert paths and all(p.startswith("spec.containers[0].resources") for p in paths)  # full paths
    assert fresh_memo._specs == {}


def test_fields_the_model_does_not_know_are_left_out_once() -> None:
    spec = manifest("a")["spec"] | {"dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"}
    model = pod_model(manifest("a", spec))
    assert model == parse_pod(manifest("a"))
    assert PodStrategy().validate(manifest("b", spec)) == []


def test_the_memo_is_bounded(fresh_memo: pods._SpecMemo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pods._SpecMemo, "SIZE", 3)
    for i in range(5):
        pod_model(manifest(f"p{i}", {"containers": [{"name": f"c{i}", "image": "busybox"}]}))
    assert len(fresh_memo._specs) == 3
    assert all(b'"c0"' not in key and b'"c1"' not in key for key in fresh_memo._specs)  # the oldest went
