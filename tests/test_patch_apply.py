"""Server-side apply and field ownership: table cases after structured-merge-diff's and
kube-apiserver's behaviour (appliers sharing and dropping fields, conflicts and force, updates
taking ownership), list and map semantics from the 1.37 schema, and the fieldsV1 encoding."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.patch.apply import ApplyConflict, apply, update
from nodeagent.cluster.patch.errors import PatchError
from nodeagent.cluster.patch.fieldpath import FieldSet, PathElement, path_string
from nodeagent.cluster.patch.managedfields import MAX_UPDATE_MANAGERS, decode_managed_fields, encode_managed_fields
from nodeagent.cluster.schema.definitions import definitions
from nodeagent.cluster.schema.model import Gvk
from nodeagent.core.errors import FieldError

DEFS = definitions()
CM = DEFS.by_gvk(Gvk("", "v1", "ConfigMap"))
POD = DEFS.by_gvk(Gvk("", "v1", "Pod"))
DEPLOY = DEFS.by_gvk(Gvk("apps", "v1", "Deployment"))
T = [f"2024-05-01T12:00:{i:02d}Z" for i in range(60)]


def cm(**data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": data}


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": list(containers), **spec}}


def owners(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f'{e["manager"]}/{e["operation"]}': e["fieldsV1"] for e in obj["metadata"].get("managedFields", [])}


def do(obj: dict[str, Any] | None, manager: str, config: dict[str, Any], t: int, schema: Any = CM, force: bool = False) -> dict[str, Any]:
    return apply(obj, config, schema, manager=manager, api_version="v1", now=T[t], force=force)


def test_apply_creates_and_owns_what_it_set() -> None:
    obj = do(None, "A", cm(a="1"), 1)
    assert obj["data"] == {"a": "1"}
    assert obj["metadata"]["name"] == "c"
    assert obj["metadata"]["managedFields"] == [{
        "manager": "A", "operation": "Apply", "apiVersion": "v1", "time": T[1], "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:a": {}}},
    }]


def test_two_appliers_share_a_field_with_the_same_value() -> None:
    obj = do(do(None, "A", cm(a="1", b="2"), 1), "B", cm(b="2", c="3"), 2)
    assert obj["data"] == {"a": "1", "b": "2", "c": "3"}
    assert owners(obj) == {"A/Apply": {"f:data": {"f:a": {}, "f:b": {}}}, "B/Apply": {"f:data": {"f:b": {}, "f:c": {}}}}


def test_a_field_an_applier_stops_setting_is_removed_unless_someone_else_owns_it() -> None:
    obj = do(do(None, "A", cm(a="1", b="2"), 1), "B", cm(b="2"), 2)
    obj = do(obj, "A", cm(), 3)
    assert obj["data"] == {"b": "2"}
    assert owners(obj)["B/Apply"] == {"f:data": {"f:b": {}}}


def test_changing_a_field_another_applier_owns_conflicts() -> None:
    obj = do(do(None, "A", cm(a="1"), 1), "B", cm(b="2"), 2)
    with pytest.raises(ApplyConflict) as e:
        do(obj, "B", cm(a="9"), 3)
    assert e.value.code == 409
    assert e.value.message == 'Apply failed with 1 conflict: conflict with "A": .data.a'
    assert e.value.causes() == [{"reason": "FieldManagerConflict", "message": 'conflict with "A"', "field": ".data.a"}]


def test_several_conflicts_are_listed_by_manager() -> None:
    obj = do(do(None, "A", cm(a="1", b="1"), 1), "B", cm(c="1"), 2)
    with pytest.raises(ApplyConflict) as e:
        do(obj, "C", cm(a="2", b="2", c="2"), 3)
    assert e.value.message == (
        'Apply failed with 3 conflicts: conflicts with "A":\n- .data.a\n- .data.b\nconflicts with "B":\n- .data.c'
    )
    assert [c["field"] for c in e.value.causes()] == [".data.a", ".data.b", ".data.c"]


def test_force_takes_ownership() -> None:
    obj = do(None, "A", cm(a="1", b="1"), 1)
    obj = do(obj, "B", cm(a="2"), 2, force=True)
    assert obj["data"] == {"a": "2", "b": "1"}
    assert owners(obj) == {"A/Apply": {"f:data": {"f:b": {}}}, "B/Apply": {"f:data": {"f:a": {}}}}


def test_after_force_the_old_owner_no_longer_removes_the_field() -> None:
    obj = do(do(None, "A", cm(a="1"), 1), "B", cm(a="2"), 2, force=True)
    obj = do(obj, "A", cm(), 3)
    assert obj["data"] == {"a": "2"}


def test_a_create_by_update_then_server_side_apply_conflicts_as_kubectl_sees_it() -> None:
    base = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}
    created = update(None, base, DEPLOY, manager="kubectl-create", api_version="apps/v1", now=T[1])
    config = copy.deepcopy(base)
    config["spec"]["replicas"] = 3
    with pytest.raises(ApplyConflict) as e:
        apply(created, config, DEPLOY, manager="kubectl", api_version="apps/v1", now=T[2])
    assert e.value.message == 'Apply failed with 1 conflict: conflict with "kubectl-create" using apps/v1: .spec.replicas'
    same = apply(created, base, DEPLOY, manager="kubectl", api_version="apps/v1", now=T[2])
    assert same["spec"] == base["spec"]  # the same values: shared, no conflict


def test_an_update_takes_the_fields_it_changes_from_appliers() -> None:
    obj = do(None, "A", cm(a="1", b="1"), 1)
    new = copy.deepcopy(obj)
    new["data"]["a"] = "2"
    new["data"]["z"] = "9"
    obj = update(obj, new, CM, manager="kubectl-edit", api_version="v1", now=T[2])
    assert owners(obj) == {"A/Apply": {"f:data": {"f:b": {}}}, "kubectl-edit/Update": {"f:data": {"f:a": {}, "f:z": {}}}}
    with pytest.raises(ApplyConflict, match='conflict with "kubectl-edit" using v1: .data.a'):
        do(obj, "A", cm(a="1", b="1"), 3)


def test_an_update_that_removes_a_field_removes_it_from_every_manager() -> None:
    obj = do(do(None, "A", cm(a="1", b="1"), 1), "B", cm(b="1"), 2)
    new = copy.deepcopy(obj)
    del new["data"]["b"]
    obj = update(obj, new, CM, manager="kubectl-edit", api_version="v1", now=T[3])
    assert owners(obj) == {"A/Apply": {"f:data": {"f:a": {}}}}  # B owned nothing else: gone


def test_an_update_accumulates_what_the_manager_changed_before() -> None:
    obj = update(None, cm(a="1"), CM, manager="M", api_version="v1", now=T[1])
    new = copy.deepcopy(obj)
    new["data"]["b"] = "2"
    obj = update(obj, new, CM, manager="M", api_version="v1", now=T[2])
    assert owners(obj)["M/Update"] == {"f:data": {".": {}, "f:a": {}, "f:b": {}}}
    assert obj["metadata"]["managedFields"][0]["time"] == T[2]


def test_an_update_that_changes_nothing_keeps_the_time() -> None:
    obj = update(None, cm(a="1"), CM, manager="M", api_version="v1", now=T[1])
    again = update(obj, copy.deepcopy(obj), CM, manager="M", api_version="v1", now=T[5])
    assert again["metadata"]["managedFields"][0]["time"] == T[1]


def test_a_no_op_apply_keeps_the_time_and_the_object() -> None:
    obj = do(None, "A", cm(a="1"), 1)
    again = do(obj, "A", cm(a="1"), 7)
    assert again == obj


def test_managed_fields_sent_by_the_client_replace_the_live_ones_on_update() -> None:
    obj = do(None, "A", cm(a="1"), 1)
    new = copy.deepcopy(obj)
    new["metadata"]["managedFields"] = [{"manager": "X", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
                                         "fieldsV1": {"f:data": {"f:a": {}}}}]
    out = update(obj, new, CM, manager="M", api_version="v1", now=T[2])
    assert set(owners(out)) == {"X/Update"}


def test_unreadable_live_managed_fields_are_reset_on_update_and_refused_on_apply() -> None:
    obj = cm(a="1")
    obj["metadata"]["managedFields"] = [{"manager": "X", "operation": "Frob", "fieldsType": "FieldsV1", "fieldsV1": {}}]
    out = update(obj, cm(a="2"), CM, manager="M", api_version="v1", now=T[2])
    assert set(owners(out)) == {"M/Update"}
    with pytest.raises(FieldError) as e:
        do(obj, "A", cm(a="1"), 3)
    assert e.value.path == "metadata.managedFields[0].operation"


def test_meta_fields_are_never_owned() -> None:
    obj = do(None, "A", {**cm(a="1"), "metadata": {"name": "c", "namespace": "d", "uid": "u", "resourceVersion": "5",
                                                     "labels": {"x": "y"}}}, 1)
    assert owners(obj)["A/Apply"] == {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}


def test_ignored_prefixes_are_not_owned_or_compared() -> None:
    live = pod({"name": "c", "image": "i"})
    live["status"] = {"phase": "Pending"}
    new = copy.deepcopy(live)
    new["status"]["phase"] = "Running"
    out = update(live, new, POD, manager="agent", api_version="v1", now=T[1], ignored=("status",))
    assert "managedFields" not in out["metadata"]
    out = update(live, new, POD, manager="agent", api_version="v1", now=T[1], subresource="status")
    assert owners(out) == {"agent/Update": {"f:status": {"f:phase": {}}}}
    assert out["metadata"]["managedFields"][0]["subresource"] == "status"


# ---- list and map semantics from the schema ----


def test_containers_merge_by_name_and_each_applier_keeps_its_own() -> None:
    p = do(None, "A", pod({"name": "a", "image": "x"}), 1, POD)
    p = do(p, "B", pod({"name": "b", "image": "y"}), 2, POD)
    assert [c["name"] for c in p["spec"]["containers"]] == ["a", "b"]
    p = do(p, "A", pod({"name": "c", "image": "z"}), 3, POD)
    assert [c["name"] for c in p["spec"]["containers"]] == ["b", "c"]
    assert owners(p) == {
        "B/Apply": {"f:spec": {"f:containers": {'k:{"name":"b"}': {".": {}, "f:image": {}, "f:name": {}}}}},
        "A/Apply": {"f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}, "f:name": {}}}}},
    }


def test_a_conflict_inside_a_list_item_names_it_by_key() -> None:
    p = do(None, "A", pod({"name": "a", "image": "x"}), 1, POD)
    with pytest.raises(ApplyConflict) as e:
        do(p, "B", pod({"name": "a", "image": "y"}), 2, POD)
    assert e.value.causes()[0]["field"] == '.spec.containers[name="a"].image'


def test_ports_are_keyed_by_port_and_protocol_with_its_default() -> None:
    c = {"name": "a", "image": "x", "ports": [{"containerPort": 80}, {"containerPort": 80, "protocol": "UDP"}]}
    p = do(None, "A", pod(c), 1, POD)
    fields = owners(p)["A/Apply"]["f:spec"]["f:containers"]['k:{"name":"a"}']["f:ports"]
    assert set(fields) == {'k:{"containerPort":80,"protocol":"TCP"}', 'k:{"containerPort":80,"protocol":"UDP"}'}


def test_atomic_lists_and_maps_are_owned_whole_and_replaced() -> None:
    p = do(None, "A", pod({"name": "a", "image": "x", "args": ["1", "2"]}, nodeSelector={"k": "v"}), 1, POD)
    spec = owners(p)["A/Apply"]["f:spec"]
    assert spec["f:containers"]['k:{"name":"a"}']["f:args"] == {}
    assert spec["f:nodeSelector"] == {}
    with pytest.raises(ApplyConflict, match=r"\.spec\.nodeSelector"):
        do(p, "B", {**pod(), "spec": {"nodeSelector": {"other": "x"}}}, 2, POD)
    forced = do(p, "B", {**pod(), "spec": {"nodeSelector": {"other": "x"}}}, 2, POD, force=True)
    assert forced["spec"]["nodeSelector"] == {"other": "x"}


def test_sets_are_owned_item_by_item() -> None:
    def meta(*finalizers: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": list(finalizers)}}
    obj = do(do(None, "A", meta("a/x", "shared/s"), 1), "B", meta("b/y", "shared/s"), 2)
    assert obj["metadata"]["finalizers"] == ["a/x", "b/y", "shared/s"]  # live-only items first, then B's order
    assert owners(obj)["A/Apply"] == {"f:metadata": {"f:finalizers": {'v:"a/x"': {}, 'v:"shared/s"': {}}}}
    obj = do(obj, "A", meta(), 3)
    assert obj["metadata"]["finalizers"] == ["b/y", "shared/s"]


def test_the_configuration_orders_the_items_it_names() -> None:
    p = do(None, "A", pod({"name": "a", "image": "x"}, {"name": "b", "image": "y"}), 1, POD)
    p = do(p, "B", pod({"name": "z", "image": "q"}), 2, POD)
    p = do(p, "A", pod({"name": "b", "image": "y"}, {"name": "a", "image": "x"}), 3, POD)
    # upstream's merge: b and a in the configuration's order, z (B's) kept before the item it preceded
    assert [c["name"] for c in p["spec"]["containers"]] == ["b", "z", "a"]


@pytest.mark.parametrize(("containers", "message"), [
    ([{"image": "x"}], 'associative list with keys has an element that omits key field "name"'),
    ([{"name": "a"}, {"name": "a"}], 'duplicate entries for key [name="a"]'),
    (["a"], "associative list with keys may not have non-map elements"),
])
def test_configurations_that_cannot_be_merged(containers: list[Any], message: str) -> None:
    with pytest.raises(PatchError) as e:
        do(None, "A", pod(*containers), 1, POD)
    assert message in e.value.message
    assert e.value.code == 422
    assert e.value.message.startswith(".spec.containers")


def test_a_configuration_must_be_an_object() -> None:
    with pytest.raises(PatchError, match="must be a JSON object"):
        apply(None, [1], CM, manager="A", api_version="v1", now=T[1])  # type: ignore[arg-type]


# ---- fieldsV1 and managedFields ----


FIELDS = {
    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
    "f:spec": {
        "f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}, "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {}}}},
        "f:finalizers": {'v:"a"': {}, "v:1": {}},
        "f:list": {"i:0": {}, "i:10": {}, "i:2": {}},
    },
}


def test_fields_v1_round_trip_and_order() -> None:
    s = FieldSet.from_fields_v1(FIELDS)
    out = s.to_fields_v1()
    assert out == FIELDS
    assert list(out["f:spec"]["f:list"]) == ["i:0", "i:2", "i:10"]
    paths = [path_string(p) for p in s.paths()]
    assert '.spec.containers[name="c"].ports[containerPort=80,protocol="TCP"]' in paths
    assert '.spec.finalizers[="a"]' in paths and ".spec.list[10]" in paths
    assert ".metadata.labels" in paths and ".metadata" not in paths
    assert FieldSet.from_fields_v1({"f:a": {".": {}}}) == FieldSet.of((PathElement.field("a"),))


@pytest.mark.parametrize(("raw", "message"), [
    ({"x:y": {}}, "unknown path element type"),
    ({"f": {}}, "want f:, k:, v: or i:"),
    ({"k:[1]": {}}, "must hold a JSON object"),
    ({"v:{": {}}, "invalid JSON"),
    ({"i:x": {}}, "invalid list index"),
    ({"f:a": []}, "must be a JSON object"),
    ([], "fieldsV1 must be a JSON object"),
])
def test_fields_v1_errors(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FieldSet.from_fields_v1(raw)


def test_path_element_canonical_forms() -> None:
    assert PathElement.key({"protocol": "TCP", "containerPort": 80.0}).serialize() == 'k:{"containerPort":80,"protocol":"TCP"}'
    assert PathElement.parse('k:{"b":1,"a":"x"}') == PathElement.key({"a": "x", "b": 1})
    assert str(PathElement.value(True)) == "[=true]"


def test_set_algebra() -> None:
    f, k = PathElement.field, PathElement.key
    a = FieldSet.of((f("x"),), (f("y"), f("z")), (f("l"), k({"n": "1"})), (f("l"), k({"n": "1"}), f("v")))
    b = FieldSet.of((f("y"), f("z")), (f("l"), k({"n": "1"})))
    assert a.intersection(b) == b
    assert a.difference(b) == FieldSet.of((f("x"),), (f("l"), k({"n": "1"}), f("v")))
    assert a.recursive_difference(FieldSet.of((f("l"), k({"n": "1"})))) == FieldSet.of((f("x"),), (f("y"), f("z")))
    assert a.union(b) == a and FieldSet.of(()).empty


@pytest.mark.parametrize(("entry", "path"), [
    ({"manager": "m", "operation": "Apply", "fieldsType": "FieldsV2", "fieldsV1": {}}, "metadata.managedFields[0].fieldsType"),
    ({"manager": 1, "operation": "Apply", "fieldsType": "FieldsV1"}, "metadata.managedFields[0].manager"),
    ({"manager": "m", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"q:": {}}}, "metadata.managedFields[0].fieldsV1"),
    ({"manager": "m", "operation": "Apply", "fieldsType": "FieldsV1", "time": "yesterday"}, "metadata.managedFields[0].time"),
    ("x", "metadata.managedFields[0]"),
])
def test_managed_fields_errors_name_the_entry(entry: Any, path: str) -> None:
    with pytest.raises(FieldError) as e:
        decode_managed_fields([entry])
    assert e.value.path == path


def test_duplicate_managers_are_refused() -> None:
    entry = {"manager": "m", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:a": {}}}
    with pytest.raises(FieldError, match="duplicate entries for manager"):
        decode_managed_fields([entry, {**entry, "apiVersion": "v2"}])  # an applier's identity has no version


def test_decoded_managed_fields_are_the_callers_own_and_errors_repeat() -> None:
    """The decode cache (by the entries' text) answers like a decode: a fresh dict each time,
    equal to an uncached decode, and a bad list refused on every read, not only the first."""
    from nodeagent.cluster.patch import managedfields
    raw = [{"manager": "m", "operation": "Update", "apiVersion": "v1", "time": T[1], "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}}}]
    first, second = decode_managed_fields(raw), decode_managed_fields(copy.deepcopy(raw))
    assert first == second == managedfields._decode_entries(raw) and first is not second
    first.clear()
    assert decode_managed_fields(raw) == second
    bad = [raw[0], raw[0]]
    for _ in range(2):
        with pytest.raises(FieldError, match="duplicate entries for manager"):
            decode_managed_fields(bad)


def test_update_managers_are_capped_oldest_into_ancient_changes() -> None:
    obj: dict[str, Any] = cm()
    for i in range(MAX_UPDATE_MANAGERS + 3):
        new = copy.deepcopy(obj)
        new["data"][f"k{i}"] = "v"
        obj = update(obj, new, CM, manager=f"m{i}", api_version="v1", now=T[i + 1])
    names = [e["manager"] for e in obj["metadata"]["managedFields"]]
    assert len(names) == MAX_UPDATE_MANAGERS
    assert "ancient-changes" in names and "m0" not in names and f"m{MAX_UPDATE_MANAGERS + 2}" in names
    ancient = next(e for e in obj["metadata"]["managedFields"] if e["manager"] == "ancient-changes")
    assert set(ancient["fieldsV1"]["f:data"]) >= {"f:k0", "f:k1", "f:k2", "f:k3"}


def test_entries_are_sorted_apply_first_then_by_time() -> None:
    obj = update(None, cm(a="1"), CM, manager="z-updater", api_version="v1", now=T[1])
    obj = do(obj, "b-applier", cm(a="1", b="2"), 5)
    obj = do(obj, "a-applier", cm(c="3"), 3)
    assert [(e["operation"], e["manager"]) for e in obj["metadata"]["managedFields"]] == [
        ("Apply", "a-applier"), ("Apply", "b-applier"), ("Update", "z-updater")]
    again = encode_managed_fields(decode_managed_fields(obj["metadata"]["managedFields"]))
    assert again == obj["metadata"]["managedFields"]


# ---- properties ----

keys = st.sampled_from(["a", "b", "c", "d"])
datas = st.dictionaries(keys, st.sampled_from(["1", "2"]), max_size=4)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), datas, st.booleans()), min_size=1, max_size=6))
def test_apply_sequences_keep_ownership_consistent(steps: list[tuple[str, dict[str, str], bool]]) -> None:
    """After any sequence of applies: every applier's last configuration is in the object unless
    someone forced it away, every owned field exists, and no field is owned twice with different
    values (owners agree)."""
    obj: dict[str, Any] | None = None
    last: dict[str, dict[str, str]] = {}
    for t, (manager, data, force) in enumerate(steps):
        try:
            obj = do(obj, manager, cm(**data), t, force=force)
        except ApplyConflict:
            assert not force
            continue
        last[manager] = data
        for other, cfg in last.items():
            if other != manager:
                last[other] = {k: v for k, v in cfg.items() if k not in data or data[k] == v}
    assert obj is not None or not last
    if obj is None:
        return
    values = obj.get("data", {})
    for cfg in last.values():
        for k, v in cfg.items():
            assert values.get(k) == v
    for fields in owners(obj).values():
        for key in fields.get("f:data", {}):
            assert key.removeprefix("f:") in values
    assert set(values) <= {k for cfg in last.values() for k in cfg}


def test_managed_fields_of_one_empty_entry_clear_them_and_a_subresource_keeps_the_live_ones() -> None:
    obj = do(None, "A", cm(a="1"), 1)
    new = copy.deepcopy(obj)
    new["metadata"]["managedFields"] = [{}]
    assert "managedFields" not in update(obj, new, CM, manager="M", api_version="v1", now=T[2])["metadata"]
    sent = copy.deepcopy(obj)
    sent["metadata"]["managedFields"] = [{"manager": "X", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
                                          "fieldsV1": {"f:data": {"f:a": {}}}}]
    out = update(obj, sent, CM, manager="M", api_version="v1", now=T[2], subresource="status")
    assert set(owners(out)) == {"A/Apply"}


def test_creates_with_the_same_spec_share_its_field_set_and_record_what_a_fresh_walk_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.cluster.patch import typed
    memo = typed._OneSidedMemo()
    monkeypatch.setattr(typed, "_ONE_SIDED", memo)
    spec = {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80}]}], "nodeSelector": {"a": "b"}}
    made = [update(None, {**pod(), "metadata": {"name": f"p{i}", "labels": {"i": str(i)}}, "spec": copy.deepcopy(spec)},
                   POD, manager="M", api_version="v1", now=T[1]) for i in range(3)]
    assert [b for b in memo._sets if b.startswith(b'{"containers"')] != []  # the spec's set is remembered
    node = typed.resolve(POD.field("spec"), spec)
    assert typed._one_sided(made[0]["spec"], node, 1) is typed._one_sided(made[1]["spec"], node, 1)
    monkeypatch.setattr(typed, "_one_sided", typed._walk_one_sided)  # no memo: every level walked
    fresh = update(None, {**pod(), "metadata": {"name": "p2", "labels": {"i": "2"}}, "spec": copy.deepcopy(spec)},
                   POD, manager="M", api_version="v1", now=T[1])
    assert made[2]["metadata"]["managedFields"] == fresh["metadata"]["managedFields"]
    assert 'k:{"containerPort":80,"protocol":"TCP"}' in \
        owners(made[2])["M/Update"]["f:spec"]["f:containers"]['k:{"name":"c"}']["f:ports"]


def test_the_field_set_memo_is_bounded_and_keeps_recent_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.cluster.patch import typed
    memo = typed._OneSidedMemo()
    monkeypatch.setattr(typed, "_ONE_SIDED", memo)
    monkeypatch.setattr(typed._OneSidedMemo, "SIZE", 2)
    from nodeagent.cluster.patch import apply as ssa  # its create memo would answer the repeated shape itself
    monkeypatch.setattr(ssa._CREATED, "get", lambda value, schema, ignored, compute: compute())
    for data in ({"a": "1"}, {"b": "1"}, {"a": "1"}, {"c": "1"}):
        update(None, {**cm(), "data": data}, CM, manager="M", api_version="v1", now=T[1])
    assert sorted(memo._sets) == [b'{"a":"1"}', b'{"c":"1"}']  # {"a"} was used again, {"b"} went; no metadata
