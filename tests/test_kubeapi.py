"""The Kubernetes API over HTTP: discovery, Tables, watch streams, Status errors, content types."""

from __future__ import annotations

import json

import pytest
from kube.fixtures import make_registry, pod

from nodeagent.cluster.apiserver.kubeapi import create_kube_app
from nodeagent.cluster.apiserver.resources import ApiSettings

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"


@pytest.fixture
async def api(aiohttp_client):
    reg, store, clock = await make_registry()
    client = await aiohttp_client(create_kube_app(reg, ApiSettings(clock, bookmark_interval=0.05)))
    client.store = store  # type: ignore[attr-defined]
    yield client
    await reg.close()


async def _status(resp, code: int, reason: str) -> dict:
    assert resp.status == code, await resp.text()
    body = await resp.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == code and body["reason"] == reason
    return body


async def test_legacy_discovery(api) -> None:
    resp = await api.get("/api")
    assert (await resp.json())["versions"] == ["v1"]
    groups = await (await api.get("/apis")).json()
    names = [g["name"] for g in groups["groups"]]
    assert {"scheduling.k8s.io", "coordination.k8s.io", "events.k8s.io", "rbac.authorization.k8s.io",
            "authorization.k8s.io"} <= set(names)
    core = await (await api.get("/api/v1")).json()
    byname = {r["name"]: r for r in core["resources"]}
    assert byname["pods"]["shortNames"] == ["po"] and byname["pods"]["categories"] == ["all"]
    assert byname["pods"]["namespaced"] and not byname["nodes"]["namespaced"]
    assert byname["pods/status"]["kind"] == "Pod" and byname["namespaces/finalize"]["verbs"] == ["update"]
    rbac = await (await api.get("/apis/rbac.authorization.k8s.io/v1")).json()
    assert {r["name"] for r in rbac["resources"]} == {"roles", "clusterroles", "rolebindings", "clusterrolebindings"}
    group = await (await api.get("/apis/coordination.k8s.io")).json()
    assert group["preferredVersion"]["groupVersion"] == "coordination.k8s.io/v1"


async def test_aggregated_discovery_when_asked(api) -> None:
    resp = await api.get("/apis", headers={"Accept": V2})
    assert resp.headers["Content-Type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    body = await resp.json()
    assert body["kind"] == "APIGroupDiscoveryList" and body["apiVersion"] == "apidiscovery.k8s.io/v2"
    leases = next(g for g in body["items"] if g["metadata"]["name"] == "coordination.k8s.io")
    res = leases["versions"][0]["resources"][0]
    assert res["resource"] == "leases" and res["scope"] == "Namespaced"
    assert res["responseKind"] == {"group": "coordination.k8s.io", "version": "v1", "kind": "Lease"}
    core = await (await api.get("/api", headers={"Accept": V2})).json()
    assert core["items"][0]["metadata"]["name"] == ""
    pods = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    assert pods["subresources"][0] == {"subresource": "status", "responseKind": {"group": "", "version": "v1",
                                                                                 "kind": "Pod"},
                                       "verbs": ["get", "patch", "update"]}


async def test_version_and_health(api) -> None:
    v = await (await api.get("/version")).json()
    assert v["major"] == "1" and v["minor"] == "37" and v["gitVersion"].startswith("v1.37.")
    for path in ("/healthz", "/livez", "/readyz"):
        resp = await api.get(path)
        assert resp.status == 200 and await resp.text() == "ok"


@pytest.mark.parametrize("path", ["/nope", "/api/v2", "/api/v1/bogus", "/apis/networking.k8s.io/v1/ingresses",
                                  "/api/v1/namespaces/default/pods/x/bogus", "/api/v1/namespaces/default/nodes"])
async def test_unknown_paths_are_404_status(api, path: str) -> None:
    body = await _status(await api.get(path), 404, "NotFound")
    assert body["message"] == "the server could not find the requested resource"


async def test_get_missing_object_is_404_with_details(api) -> None:
    body = await _status(await api.get("/api/v1/namespaces/default/pods/ghost"), 404, "NotFound")
    assert body["message"] == 'pods "ghost" not found' and body["details"] == {"name": "ghost", "kind": "pods"}


async def test_create_json_and_yaml_and_get_as_table(api) -> None:
    resp = await api.post("/api/v1/namespaces/default/pods", json=pod("web", labels={"app": "web"}))
    assert resp.status == 201
    yaml_body = "apiVersion: v1\nkind: Pod\nmetadata: {name: db}\nspec:\n  containers: [{name: c, command: [x]}]\n"
    resp = await api.post("/api/v1/namespaces/default/pods", data=yaml_body,
                          headers={"Content-Type": "application/yaml"})
    assert resp.status == 201, await resp.text()
    resp = await api.get("/api/v1/pods", headers={"Accept": TABLE})
    t = await resp.json()
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    cols = [(c["name"], c["priority"]) for c in t["columnDefinitions"]]
    assert cols[:5] == [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0)]
    assert ("Node", 1) in cols and ("IP", 1) in cols
    rows = {r["cells"][0]: r for r in t["rows"]}
    assert rows["web"]["cells"][1:4] == ["0/1", "Pending", 0]
    assert rows["web"]["object"]["kind"] == "PartialObjectMetadata"
    assert rows["web"]["object"]["metadata"]["labels"] == {"app": "web"}  # what --show-labels and -L read
    assert rows["web"]["object"]["metadata"]["namespace"] == "default"  # what -A reads
    full = await (await api.get("/api/v1/namespaces/default/pods/web?includeObject=Object",
                                headers={"Accept": TABLE})).json()
    assert full["rows"][0]["object"]["kind"] == "Pod"


async def test_list_json_with_limit_and_continue(api) -> None:
    for i in range(3):
        await api.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": f"c{i}"}})
    page = await (await api.get("/api/v1/namespaces/default/configmaps?limit=2")).json()
    assert page["kind"] == "ConfigMapList" and len(page["items"]) == 2
    assert page["metadata"]["remainingItemCount"] == 1 and page["metadata"]["continue"]
    rest = await (await api.get(f"/api/v1/namespaces/default/configmaps?limit=2&continue={page['metadata']['continue']}")).json()
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c2"] and "continue" not in rest["metadata"]


async def test_malformed_bodies_are_400_and_change_nothing(api) -> None:
    rev = api.store.revision
    for data, ctype in (("{not json", "application/json"), ("[1, 2]", "application/json"),
                        ("a: [", "application/yaml"), ("", "application/json"), ("\xff\xfe", "application/json")):
        resp = await api.post("/api/v1/namespaces/default/pods", data=data.encode("latin-1"),
                              headers={"Content-Type": ctype})
        assert resp.status == 400, (data, await resp.text())
        assert (await resp.json())["reason"] == "BadRequest"
    assert api.store.revision == rev
    resp = await api.get("/healthz")
    assert resp.status == 200


async def test_unsupported_media_types(api) -> None:
    await _status(await api.post("/api/v1/namespaces/default/pods", data=b"x",
                                 headers={"Content-Type": "application/vnd.kubernetes.protobuf"}),
                  400, "BadRequest")  # protobuf is read for the kinds kubectl's generators create, not this
    await _status(await api.post("/api/v1/namespaces/default/pods", data=b"x", headers={"Content-Type": "text/csv"}),
                  415, "UnsupportedMediaType")
    await _status(await api.patch("/api/v1/namespaces/default/pods/x", data=b"{}",
                                  headers={"Content-Type": "text/plain"}), 415, "UnsupportedMediaType")


async def test_unknown_field_warns_by_default_and_fails_under_strict(api) -> None:
    body = pod("w")
    body["spec"]["bogus"] = True
    resp = await api.post("/api/v1/namespaces/default/pods", json=body)
    assert resp.status == 201 and resp.headers.getall("Warning") == ['299 - "unknown field \\"spec.bogus\\""']
    body["metadata"]["name"] = "s"
    resp = await api.post("/api/v1/namespaces/default/pods?fieldValidation=Strict", json=body)
    st = await _status(resp, 400, "BadRequest")
    assert st["message"] == 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.bogus"'
    await _status(await api.get("/api/v1/namespaces/default/pods/s"), 404, "NotFound")
    await _status(await api.post("/api/v1/namespaces/default/pods?fieldValidation=Loose", json=body), 422, "Invalid")


async def test_dry_run_all(api) -> None:
    rev = api.store.revision
    resp = await api.post("/api/v1/namespaces/default/configmaps?dryRun=All", json={"metadata": {"name": "d"}})
    assert resp.status == 201 and api.store.revision == rev
    await _status(await api.post("/api/v1/namespaces/default/configmaps?dryRun=Some", json={"metadata": {"name": "d"}}),
                  422, "Invalid")


async def test_stale_put_is_409(api) -> None:
    cm = await (await api.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}})).json()
    cm["data"] = {"a": "1"}
    assert (await api.put("/api/v1/namespaces/default/configmaps/c", json=cm)).status == 200
    cm["data"] = {"a": "2"}
    body = await _status(await api.put("/api/v1/namespaces/default/configmaps/c", json=cm), 409, "Conflict")
    assert body["message"].startswith('Operation cannot be fulfilled on configmaps "c": the object has been modified')
    now = await (await api.get("/api/v1/namespaces/default/configmaps/c")).json()
    assert now["data"] == {"a": "1"}


async def test_delete_answers(api) -> None:
    await api.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}})
    resp = await api.delete("/api/v1/namespaces/default/configmaps/c", json={"propagationPolicy": "Background"})
    body = await resp.json()
    assert resp.status == 200 and body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "c" and body["details"]["kind"] == "configmaps"
    await api.post("/api/v1/namespaces/default/pods", json=pod("p", nodeName="n1"))
    resp = await api.delete("/api/v1/namespaces/default/pods/p?gracePeriodSeconds=5&propagationPolicy=Foreground")
    obj = await resp.json()
    assert obj["kind"] == "Pod" and obj["metadata"]["deletionGracePeriodSeconds"] == 5
    assert obj["metadata"]["finalizers"] == ["foregroundDeletion"]
    await _status(await api.delete("/api/v1/namespaces/default/pods/p", json={"propagationPolicy": "Sideways"}),
                  422, "Invalid")


async def test_cluster_wide_create_is_not_allowed(api) -> None:
    await _status(await api.post("/api/v1/pods", json=pod()), 405, "MethodNotAllowed")
    await _status(await api.put("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews/x", json={}),
                  405, "MethodNotAllowed")


async def test_self_subject_access_review(api) -> None:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "default"}}}
    resp = await api.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review)
    assert resp.status == 201 and (await resp.json())["status"]["allowed"] is True


async def _lines(resp, n: int) -> list[dict]:
    out = []
    while len(out) < n:
        line = await resp.content.readline()
        assert line, f"stream ended after {out}"
        out.append(json.loads(line))
    return out


async def test_watch_stream_with_initial_events_and_bookmark(api) -> None:
    await api.post("/api/v1/namespaces/default/pods", json=pod("web"))
    resp = await api.get("/api/v1/namespaces/default/pods?watch=true&sendInitialEvents=true"
                         "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5"
                         "&fieldSelector=metadata.name%3Dweb")
    assert resp.status == 200 and resp.headers["Content-Type"] == "application/json"
    added, mark = await _lines(resp, 2)
    assert added["type"] == "ADDED" and added["object"]["metadata"]["name"] == "web"
    assert mark["type"] == "BOOKMARK"
    assert mark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert mark["object"]["kind"] == "Pod" and mark["object"]["metadata"]["resourceVersion"] == str(api.store.revision)
    await api.delete("/api/v1/namespaces/default/pods/web")
    (deleted,) = await _lines(resp, 1)
    assert deleted["type"] == "DELETED"
    resp.close()


async def test_watch_resume_and_periodic_bookmarks_and_timeout(api) -> None:
    rv = api.store.revision
    resp = await api.get(f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
                         "&allowWatchBookmarks=true&timeoutSeconds=1")
    await api.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}})
    events = []
    async for line in resp.content:  # the server ends the stream after timeoutSeconds
        events.append(json.loads(line))
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "c"
    assert any(e["type"] == "BOOKMARK" for e in events[1:])


async def test_watch_from_a_compacted_revision_is_an_error_event(api) -> None:
    rv = api.store.revision
    await api.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}})
    await api.store.compact(api.store.revision)
    resp = await api.get(f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}")
    assert resp.status == 200
    (err,) = await _lines(resp, 1)
    assert err["type"] == "ERROR" and err["object"]["code"] == 410 and err["object"]["reason"] == "Expired"


async def test_watch_as_table_sends_columns_once(api) -> None:
    rv = api.store.revision
    resp = await api.get(f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}", headers={"Accept": TABLE})
    await api.post("/api/v1/namespaces/default/pods", json=pod("a"))
    await api.post("/api/v1/namespaces/default/pods", json=pod("b"))
    first, second = await _lines(resp, 2)
    assert first["object"]["kind"] == "Table" and first["object"]["columnDefinitions"]
    assert first["object"]["rows"][0]["cells"][0] == "a"
    assert second["object"]["columnDefinitions"] == [] and second["object"]["rows"][0]["cells"][0] == "b"
    resp.close()


async def test_future_resource_version_watch_is_504(api) -> None:
    await _status(await api.get(f"/api/v1/pods?watch=true&resourceVersion={api.store.revision + 100}"), 504, "Timeout")


async def test_bad_selectors_are_400(api) -> None:
    body = await _status(await api.get("/api/v1/pods?labelSelector=a%20in%20"), 400, "BadRequest")
    assert body["message"].startswith("unable to parse requirement")
    body = await _status(await api.get("/api/v1/pods?fieldSelector=spec.bogus%3Dx"), 400, "BadRequest")
    assert body["message"] == "field label not supported: spec.bogus"


@pytest.mark.parametrize("spec", [-1, 1e308, "x", [1], {"hard": "many"}, {"hard": {"pods": {"x": 1}}},
                                  {"hard": {"pods": "-1"}}, {"hard": {"bogus": "1"}}, {"scopes": "x"}])
async def test_malformed_resource_quotas_are_client_errors(api, spec) -> None:
    """The 8 of 630 payloads that got a 500 before (issue 13): a spec that is a number, a hard that is a string."""
    resp = await api.post("/api/v1/namespaces/default/resourcequotas", json={"metadata": {"name": "q"}, "spec": spec})
    assert resp.status in (400, 422), await resp.text()
    assert (await resp.json())["kind"] == "Status"
    await _status(await api.get("/api/v1/namespaces/default/resourcequotas/q"), 404, "NotFound")


async def test_valid_quota_and_its_table(api) -> None:
    resp = await api.post("/api/v1/namespaces/default/resourcequotas",
                          json={"metadata": {"name": "q"}, "spec": {"hard": {"pods": "10", "limits.cpu": "2"}}})
    assert resp.status == 201, await resp.text()
    t = await (await api.get("/api/v1/namespaces/default/resourcequotas", headers={"Accept": TABLE})).json()
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Age", "Request", "Limit"]
    assert t["rows"][0]["cells"][2:] == ["pods: 0/10", "limits.cpu: 0/2"]


async def test_subresources_are_pluggable(aiohttp_client) -> None:
    """Later work (pods/log, exec, eviction...) adds a catalog entry and a handler; discovery lists it."""
    from aiohttp import web

    from nodeagent.cluster.registry.catalog import Subresource
    from nodeagent.cluster.registry.kinds.pods import PodStrategy

    reg, store, clock = await make_registry()
    settings = ApiSettings(clock)
    reg.catalog.add_subresource(PodStrategy.info, Subresource("log", "Pod", ("get",)))

    async def log_handler(request, gs, ri, ctx):
        obj = await gs.get(ri.namespace, ri.name)
        return web.Response(text=f"log of {obj['metadata']['name']}\n", content_type="text/plain")

    settings.add_subresource("", "pods", "log", log_handler)
    client = await aiohttp_client(create_kube_app(reg, settings))
    await client.post("/api/v1/namespaces/default/pods", json=pod("p"))
    resp = await client.get("/api/v1/namespaces/default/pods/p/log")
    assert resp.status == 200 and await resp.text() == "log of p\n"
    core = await (await client.get("/api/v1")).json()
    assert {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]} in core["resources"]
    await _status(await client.get("/api/v1/namespaces/default/pods/p/exec"), 404, "NotFound")
    await reg.close()
