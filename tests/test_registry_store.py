"""The generic registry store over a Store: kube-apiserver's semantics for every verb."""

from __future__ import annotations

import pytest
from kube.fixtures import make_registry, pod

from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions
from nodeagent.core.selectors import parse_field_selector, parse_label_selector


async def _pods():
    reg, store, clock = await make_registry()
    return reg, reg.resource("", "v1", "pods"), store, clock


async def test_create_sets_server_fields_and_key() -> None:
    reg, pods, store, clock = await _pods()
    body = pod(labels={"app": "web"})
    body["metadata"].update(uid="client-uid", resourceVersion="99", creationTimestamp="2000-01-01T00:00:00Z")
    obj = await pods.create("default", body, Context())
    meta = obj["metadata"]
    assert meta["uid"] != "client-uid" and len(meta["uid"]) == 36
    assert meta["creationTimestamp"] == "2023-11-14T22:30:00Z"  # the fake clock's wall time
    assert meta["generation"] == 1 and meta["namespace"] == "default"
    assert meta["resourceVersion"] == str(store.revision)
    kv, _ = await store.get("/registry/core/pods/default/web")
    assert kv is not None and b"resourceVersion" not in kv.value  # set from the revision when read
    assert obj["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert obj["spec"]["restartPolicy"] == "Always" and obj["spec"]["terminationGracePeriodSeconds"] == 30


async def test_cluster_scoped_key_has_no_namespace() -> None:
    reg, store, _ = await make_registry()
    pcs = reg.resource("scheduling.k8s.io", "v1", "priorityclasses")
    await pcs.create(None, {"metadata": {"name": "high"}, "value": 1000}, Context())
    kv, _ = await store.get("/registry/scheduling.k8s.io/priorityclasses/high")
    assert kv is not None


async def test_generate_name_gets_five_character_suffix() -> None:
    reg, pods, *_ = await _pods()
    body = pod()
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "web-"
    obj = await pods.create("default", body, Context())
    name = obj["metadata"]["name"]
    assert name.startswith("web-") and len(name) == 9
    assert all(c in "bcdfghjklmnpqrstvwxz2456789" for c in name[4:])


async def test_create_needs_an_existing_active_namespace() -> None:
    reg, pods, *_ = await _pods()
    with pytest.raises(StatusError) as e:
        await pods.create("nope", pod(), Context())
    assert e.value.code == 404 and e.value.message == 'namespaces "nope" not found'
    ns = reg.resource("", "v1", "namespaces")
    await ns.create(None, {"metadata": {"name": "going"}}, Context())
    await pods.create("going", pod("before"), Context())  # the active namespace's answer is kept ...
    gone, deleted = await ns.delete(None, "going", DeleteOptions(), Context())
    assert not deleted and gone["status"]["phase"] == "Terminating" and gone["metadata"]["deletionTimestamp"]
    with pytest.raises(StatusError) as e:
        await pods.create("going", pod(), Context())
    assert e.value.code == 403
    assert e.value.message == "unable to create new content in namespace going because it is being terminated"
    assert e.value.details["causes"][0]["reason"] == "NamespaceTerminating"  # ... until the namespace changes


async def test_namespace_finalize_deletes_it() -> None:
    reg, *_ = await make_registry()
    ns = reg.resource("", "v1", "namespaces")
    await ns.create(None, {"metadata": {"name": "x"}}, Context())
    await ns.delete(None, "x", DeleteOptions(), Context())
    obj = await ns.get(None, "x")
    obj["spec"]["finalizers"] = []
    await ns.update(None, "x", obj, Context(), subresource="finalize")
    with pytest.raises(StatusError) as e:
        await ns.get(None, "x")
    assert e.value.code == 404


async def test_duplicate_create_is_already_exists() -> None:
    reg, pods, *_ = await _pods()
    await pods.create("default", pod(), Context())
    with pytest.raises(StatusError) as e:
        await pods.create("default", pod(), Context())
    assert (e.value.code, e.value.reason, e.value.message) == (409, "AlreadyExists", 'pods "web" already exists')


async def test_invalid_pod_is_422_with_causes() -> None:
    reg, pods, *_ = await _pods()
    body = pod()
    body["spec"]["containers"][0]["name"] = "Bad_Name"
    with pytest.raises(StatusError) as e:
        await pods.create("default", body, Context())
    assert e.value.code == 422 and e.value.reason == "Invalid"
    assert e.value.message.startswith('Pod "web" is invalid: spec.containers[0].name: Invalid value: "Bad_Name"')
    cause = e.value.details["causes"][0]
    assert cause["field"] == "spec.containers[0].name" and cause["reason"] == "FieldValueInvalid"
    assert e.value.details["kind"] == "Pod" and e.value.details["name"] == "web"


async def test_strict_field_validation_refuses_unknown_fields_and_warn_warns() -> None:
    reg, pods, *_ = await _pods()
    body = pod()
    body["spec"]["bogus"] = 1
    with pytest.raises(StatusError) as e:
        await pods.create("default", body, Context(field_validation="Strict"))
    assert e.value.code == 400 and e.value.message == 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.bogus"'
    ctx = Context(field_validation="Warn")
    obj = await pods.create("default", body, ctx)
    assert ctx.warnings == ['unknown field "spec.bogus"'] and "bogus" not in obj["spec"]


async def test_kind_and_namespace_mismatch_are_bad_requests() -> None:
    reg, pods, *_ = await _pods()
    with pytest.raises(StatusError) as e:
        await pods.create("default", {**pod(), "kind": "ConfigMap"}, Context())
    assert e.value.code == 400 and "kind" in e.value.message
    body = pod()
    body["metadata"]["namespace"] = "kube-system"
    with pytest.raises(StatusError) as e:
        await pods.create("default", body, Context())
    assert e.value.message == "the namespace of the provided object does not match the namespace sent on the request"


async def test_dry_run_writes_nothing() -> None:
    reg, pods, store, _ = await _pods()
    rev = store.revision
    obj = await pods.create("default", pod(), Context(dry_run=True))
    assert obj["metadata"]["name"] == "web" and "resourceVersion" not in obj["metadata"]
    assert store.revision == rev


# ---- list -----------------------------------------------------------------------------------------
async def _many(pods, n: int = 7):
    for i in range(n):
        await pods.create("default", pod(f"p{i}", labels={"i": str(i), "even": str(i % 2 == 0).lower()}), Context())


async def test_list_with_label_and_field_selectors() -> None:
    reg, pods, *_ = await _pods()
    await _many(pods)
    got = await pods.list("default", ListOptions(label=parse_label_selector("even=true,i!=0")))
    assert [o["metadata"]["name"] for o in got.items] == ["p2", "p4", "p6"]
    got = await pods.list(None, ListOptions(field=parse_field_selector("metadata.name=p3")))
    assert [o["metadata"]["name"] for o in got.items] == ["p3"]
    got = await pods.list(None, ListOptions(field=parse_field_selector("spec.nodeName=,status.phase=Pending")))
    assert len(got.items) == 7
    with pytest.raises(StatusError) as e:
        await pods.list(None, ListOptions(field=parse_field_selector("spec.bogus=x")))
    assert e.value.code == 400 and e.value.message == "field label not supported: spec.bogus"


async def test_pagination_continue_and_remaining_item_count() -> None:
    reg, pods, *_ = await _pods()
    await _many(pods)
    first = await pods.list("default", ListOptions(limit=3))
    assert [o["metadata"]["name"] for o in first.items] == ["p0", "p1", "p2"]
    assert first.continue_token and first.remaining == 4
    await pods.create("default", pod("p99"), Context())  # later writes do not show in the same list
    second = await pods.list("default", ListOptions(limit=3, continue_token=first.continue_token))
    assert [o["metadata"]["name"] for o in second.items] == ["p3", "p4", "p5"]
    assert second.revision == first.revision and second.remaining == 1
    third = await pods.list("default", ListOptions(limit=3, continue_token=second.continue_token))
    assert [o["metadata"]["name"] for o in third.items] == ["p6"] and not third.continue_token


async def test_pagination_with_a_selector_fills_pages_and_omits_the_count() -> None:
    reg, pods, *_ = await _pods()
    await _many(pods)
    page = await pods.list("default", ListOptions(limit=2, label=parse_label_selector("even=true")))
    assert [o["metadata"]["name"] for o in page.items] == ["p0", "p2"] and page.remaining is None
    rest = await pods.list("default", ListOptions(limit=5, continue_token=page.continue_token,
                                                  label=parse_label_selector("even=true")))
    assert [o["metadata"]["name"] for o in rest.items] == ["p4", "p6"] and not rest.continue_token


async def test_resource_version_semantics() -> None:
    reg, pods, store, _ = await _pods()
    await pods.create("default", pod("a"), Context())
    at = store.revision
    await pods.create("default", pod("b"), Context())
    exact = await pods.list("default", ListOptions(resource_version=str(at), resource_version_match="Exact"))
    assert [o["metadata"]["name"] for o in exact.items] == ["a"] and exact.revision == at
    newer = await pods.list("default", ListOptions(resource_version=str(at), resource_version_match="NotOlderThan"))
    assert len(newer.items) == 2
    with pytest.raises(StatusError) as e:
        await pods.list("default", ListOptions(resource_version=str(store.revision + 5)))
    assert e.value.code == 504 and e.value.reason == "Timeout"
    assert e.value.message == f"Timeout: Too large resource version: {store.revision + 5}, current: {store.revision}"
    await store.compact(store.revision)
    with pytest.raises(StatusError) as e:
        await pods.list("default", ListOptions(resource_version=str(at), resource_version_match="Exact"))
    assert e.value.code == 410 and e.value.reason == "Expired"


async def test_expired_continue_token_is_410() -> None:
    reg, pods, store, _ = await _pods()
    await _many(pods, 4)
    page = await pods.list("default", ListOptions(limit=2))
    await pods.create("default", pod("late"), Context())
    await store.compact(store.revision)
    with pytest.raises(StatusError) as e:
        await pods.list("default", ListOptions(limit=2, continue_token=page.continue_token))
    assert e.value.code == 410 and e.value.message.startswith("The provided continue parameter is too old")


@pytest.mark.parametrize(("opts", "field"), [
    (ListOptions(resource_version_match="Exact"), "resourceVersionMatch"),
    (ListOptions(resource_version="0", resource_version_match="Exact"), "resourceVersionMatch"),
    (ListOptions(resource_version="5", continue_token="x"), "resourceVersion"),
    (ListOptions(resource_version_match="Bogus", resource_version="1"), "resourceVersionMatch"),
    (ListOptions(send_initial_events=True), "sendInitialEvents"),
    (ListOptions(watch=True, send_initial_events=True, allow_bookmarks=True), "resourceVersionMatch"),
])
async def test_invalid_list_options_are_422(opts: ListOptions, field: str) -> None:
    reg, pods, *_ = await _pods()
    with pytest.raises(StatusError) as e:
        if opts.watch:
            await pods.watch("default", opts)
        else:
            await pods.list("default", opts)
    assert e.value.code == 422 and e.value.details["kind"] == "ListOptions"
    assert field in [c["field"] for c in e.value.details["causes"]]


async def test_malformed_continue_token_is_400() -> None:
    reg, pods, *_ = await _pods()
    with pytest.raises(StatusError) as e:
        await pods.list("default", ListOptions(continue_token="not-a-token"))
    assert e.value.code == 400


# ---- update ---------------------------------------------------------------------------------------
async def test_stale_update_is_a_conflict_with_kubes_wording() -> None:
    reg, pods, *_ = await _pods()
    obj = await pods.create("default", pod(labels={"v": "1"}), Context())
    fresh = {**obj, "metadata": {**obj["metadata"], "labels": {"v": "2"}}}
    await pods.update("default", "web", fresh, Context())
    stale = {**obj, "metadata": {**obj["metadata"], "labels": {"v": "3"}}}
    with pytest.raises(StatusError) as e:
        await pods.update("default", "web", stale, Context())
    assert e.value.code == 409 and e.value.reason == "Conflict"
    assert e.value.message == ('Operation cannot be fulfilled on pods "web": the object has been modified; please '
                               "apply your changes to the latest version and try again")
    assert (await pods.get("default", "web"))["metadata"]["labels"] == {"v": "2"}


async def test_update_without_resource_version_and_no_op_update() -> None:
    reg, pods, store, _ = await _pods()
    obj = await pods.create("default", pod(), Context())
    body = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}}
    rev = store.revision
    same, _ = await pods.update("default", "web", body, Context())
    assert store.revision == rev and same["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


async def test_spec_and_status_updates_reset_each_other() -> None:
    reg, pods, *_ = await _pods()
    obj = await pods.create("default", pod(), Context())
    obj["status"] = {"phase": "Running"}
    obj["metadata"]["labels"] = {"a": "b"}
    updated, _ = await pods.update("default", "web", obj, Context())
    assert updated["status"]["phase"] == "Pending"  # a spec update cannot change status
    assert updated["metadata"]["labels"] == {"a": "b"}
    updated["status"] = {"phase": "Running"}
    updated["spec"]["activeDeadlineSeconds"] = 5
    via_status, _ = await pods.update("default", "web", updated, Context(), subresource="status")
    assert via_status["status"]["phase"] == "Running"
    assert "activeDeadlineSeconds" not in via_status["spec"]  # a status update cannot change spec
    assert via_status["metadata"]["generation"] == 1


@pytest.mark.parametrize("subresource", ["", "status"])
async def test_an_update_naming_another_uid_is_422_and_changes_nothing(subresource: str) -> None:
    """The uid is immutable (kube-apiserver's ValidateObjectMetaUpdate): a writer that names the uid
    of a pod that was deleted and made again under the same name is refused, not applied to the new one
    (the kubelet's status patches carry the uid for exactly this)."""
    reg, pods, store, _ = await _pods()
    obj = await pods.create("default", pod(), Context())
    stale = {**obj, "metadata": {**obj["metadata"], "uid": "0b3a8f6e-0000-4000-8000-000000000000"},
             "status": {"phase": "Running"}}
    rev = store.revision
    with pytest.raises(StatusError) as e:
        await pods.update("default", "web", stale, Context(), subresource=subresource)
    assert e.value.code == 422
    causes = e.value.status["details"]["causes"]
    assert causes == [{"reason": "FieldValueInvalid", "field": "metadata.uid",
                       "message": 'Invalid value: "0b3a8f6e-0000-4000-8000-000000000000": field is immutable'}]
    assert store.revision == rev
    uid = obj["metadata"]["uid"]
    same = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "uid"},
            "status": {"phase": "Running"}}  # no uid (or its own) is fine
    updated, _ = await pods.update("default", "web", same, Context(), subresource=subresource)
    assert updated["metadata"]["uid"] == uid


async def test_generation_bumps_on_spec_changes_only() -> None:
    reg, pods, *_ = await _pods()
    obj = await pods.create("default", pod(), Context())
    obj["spec"]["activeDeadlineSeconds"] = 60
    obj, _ = await pods.update("default", "web", obj, Context())
    assert obj["metadata"]["generation"] == 2
    obj["metadata"]["labels"] = {"x": "y"}
    obj, _ = await pods.update("default", "web", obj, Context())
    assert obj["metadata"]["generation"] == 2


async def test_pod_spec_is_immutable_but_image_may_change() -> None:
    reg, pods, *_ = await _pods()
    obj = await pods.create("default", pod(), Context())
    obj["spec"]["containers"][0]["image"] = "busybox:1"
    obj, _ = await pods.update("default", "web", obj, Context())
    obj["spec"]["restartPolicy"] = "Never"
    with pytest.raises(StatusError) as e:
        await pods.update("default", "web", obj, Context())
    assert e.value.code == 422 and e.value.details["causes"][0]["field"] == "spec"


async def test_update_of_missing_object_is_404_unless_the_kind_allows_create() -> None:
    reg, pods, *_ = await _pods()
    with pytest.raises(StatusError) as e:
        await pods.update("default", "ghost", pod("ghost"), Context())
    assert e.value.code == 404
    leases = reg.resource("coordination.k8s.io", "v1", "leases")
    obj, created = await leases.update("default", "l", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}},
                                       Context())
    assert created and obj["spec"]["holderIdentity"] == "a"


# ---- delete ---------------------------------------------------------------------------------------
async def test_unbound_pod_goes_at_once_bound_pod_gracefully() -> None:
    reg, pods, *_ = await _pods()
    await pods.create("default", pod("unbound"), Context())
    obj, gone = await pods.delete("default", "unbound", DeleteOptions(), Context())
    assert gone
    await pods.create("default", pod("bound", nodeName="n1"), Context())
    obj, gone = await pods.delete("default", "bound", DeleteOptions(), Context())
    assert not gone and obj["metadata"]["deletionGracePeriodSeconds"] == 30
    assert obj["metadata"]["deletionTimestamp"] == "2023-11-14T22:30:30Z"  # now + grace, as kube-apiserver
    obj, gone = await pods.delete("default", "bound", DeleteOptions(grace_period_seconds=0), Context())
    assert gone  # the node's agent finishes with grace 0
    with pytest.raises(StatusError):
        await pods.get("default", "bound")


async def test_terminal_pods_go_at_once() -> None:
    reg, pods, *_ = await _pods()
    obj = await pods.create("default", pod(nodeName="n1"), Context())
    obj["status"] = {"phase": "Succeeded"}
    await pods.update("default", "web", obj, Context(), subresource="status")
    _, gone = await pods.delete("default", "web", DeleteOptions(), Context())
    assert gone


async def test_finalizers_hold_the_object_until_removed() -> None:
    reg, *_ = await make_registry()
    cms = reg.resource("", "v1", "configmaps")
    await cms.create("default", {"metadata": {"name": "c", "finalizers": ["example.com/keep"]}}, Context())
    obj, gone = await cms.delete("default", "c", DeleteOptions(), Context())
    assert not gone and obj["metadata"]["deletionTimestamp"] and obj["metadata"]["deletionGracePeriodSeconds"] == 0
    obj["metadata"]["finalizers"].append("example.com/new")
    with pytest.raises(StatusError) as e:
        await cms.update("default", "c", obj, Context())
    assert e.value.code == 422
    obj = await cms.get("default", "c")
    obj["metadata"]["finalizers"] = []
    await cms.update("default", "c", obj, Context())
    with pytest.raises(StatusError) as e:
        await cms.get("default", "c")
    assert e.value.code == 404


@pytest.mark.parametrize(("policy", "finalizer"), [("Foreground", "foregroundDeletion"), ("Orphan", "orphan")])
async def test_propagation_policy_is_recorded_as_a_finalizer(policy: str, finalizer: str) -> None:
    reg, *_ = await make_registry()
    cms = reg.resource("", "v1", "configmaps")
    await cms.create("default", {"metadata": {"name": "c"}}, Context())
    obj, gone = await cms.delete("default", "c", DeleteOptions(propagation_policy=policy), Context())  # type: ignore[arg-type]
    assert not gone and obj["metadata"]["finalizers"] == [finalizer]


async def test_delete_preconditions() -> None:
    reg, pods, *_ = await _pods()
    obj = await pods.create("default", pod(), Context())
    with pytest.raises(StatusError) as e:
        await pods.delete("default", "web", DeleteOptions(uid="other"), Context())
    assert e.value.code == 409 and "Precondition failed: UID in precondition: other" in e.value.message
    with pytest.raises(StatusError) as e:
        await pods.delete("default", "web", DeleteOptions(resource_version="1"), Context())
    assert e.value.code == 409
    _, gone = await pods.delete("default", "web", DeleteOptions(uid=obj["metadata"]["uid"]), Context())
    assert gone


async def test_delete_collection_by_label() -> None:
    reg, pods, *_ = await _pods()
    await _many(pods, 4)
    res = await pods.delete_collection("default", ListOptions(label=parse_label_selector("even=true")),
                                       DeleteOptions(), Context())
    assert sorted(o["metadata"]["name"] for o in res.items) == ["p0", "p2"]
    left = await pods.list("default", ListOptions())
    assert [o["metadata"]["name"] for o in left.items] == ["p1", "p3"]


async def test_store_failure_is_500_and_changes_nothing() -> None:
    reg, pods, store, _ = await _pods()
    store.fail_next = True
    with pytest.raises(StatusError) as e:
        await pods.create("default", pod(), Context())
    assert e.value.code == 500
    with pytest.raises(StatusError):
        await pods.get("default", "web")


async def test_events_are_served_in_both_versions_from_one_store() -> None:
    reg, *_ = await make_registry()
    core = reg.resource("", "v1", "events")
    v1 = reg.resource("events.k8s.io", "v1", "events")
    await v1.create("default", {"metadata": {"name": "e1"}, "regarding": {"kind": "Pod", "name": "web"},
                                "note": "hello", "reason": "Started", "type": "Normal",
                                "reportingController": "nodeagent", "reportingInstance": "n1",
                                "action": "Start", "eventTime": "2024-01-01T00:00:00.000000Z"}, Context())
    ev = await core.get("default", "e1")
    assert ev["involvedObject"]["name"] == "web" and ev["message"] == "hello" and ev["apiVersion"] == "v1"
    got = await core.list("default", ListOptions(field=parse_field_selector("involvedObject.name=web,reason=Started")))
    assert len(got.items) == 1
    back = await v1.get("default", "e1")
    assert back["note"] == "hello" and back["apiVersion"] == "events.k8s.io/v1"


def test_resource_version_spliced_into_stored_bytes() -> None:
    import orjson

    from nodeagent.cluster.registry.codec import encode, with_resource_version
    raw = encode({"spec": {"metadata": {"x": 1}}, "kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a"}})
    assert orjson.loads(with_resource_version(raw, 7))["metadata"] == {"resourceVersion": "7", "name": "a"}
    empty = encode({"kind": "Pod", "metadata": {}})
    assert orjson.loads(with_resource_version(empty, 3))["metadata"] == {"resourceVersion": "3"}
    nested_first = orjson.dumps({"spec": {"metadata": {}}, "metadata": {"name": "b"}})  # not encode()'s layout
    assert with_resource_version(nested_first, 1) is None


async def test_raw_list_equals_decoded_list_page_by_page() -> None:
    import orjson
    reg, pods, *_ = await _pods()
    await _many(pods, 5)
    token = ""
    while True:
        opts = ListOptions(limit=2, continue_token=token)
        raw, meta = await pods.list_raw("default", opts)
        decoded = await pods.list("default", opts)
        assert [orjson.loads(b) for b in raw] == decoded.items
        assert (meta.revision, meta.remaining, bool(meta.continue_token)) == \
            (decoded.revision, decoded.remaining, bool(decoded.continue_token))
        token = decoded.continue_token
        if not token:
            break


async def test_a_request_after_the_store_closed_is_503_and_logs_no_failure() -> None:
    """At shutdown the store closes while clients (an agent's watch, kubectl -w) reconnect at once:
    they get 503, as from a terminating kube-apiserver, and the log shows no store failure. A real
    storage error still logs store_failed."""
    from structlog.testing import capture_logs

    reg, pods, store, _ = await _pods()
    await pods.create("default", pod(), Context())
    store.fail_next = True
    with capture_logs() as logs, pytest.raises(StatusError) as broken:
        await pods.create("default", pod("other"), Context())
    assert broken.value.code == 500 and [e["event"] for e in logs] == ["store_failed"]
    await store.close()
    with capture_logs() as logs:
        for call in (lambda: pods.get("default", "web"), lambda: pods.list("default", ListOptions()),
                     lambda: pods.create("default", pod("late"), Context())):
            with pytest.raises(StatusError) as e:
                await call()
            assert e.value.code == 503 and e.value.status["reason"] == "ServiceUnavailable", e.value.status
    assert not [e for e in logs if e.get("log_level") == "error"], logs
