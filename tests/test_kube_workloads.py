"""The workload kinds over HTTP (apps/v1, batch/v1, policy/v1): defaults as kube-apiserver's,
422s naming the field, generation on spec changes only, status through /status only, the
autoscaling/v1 Scale subresource, Table columns and discovery."""

from __future__ import annotations

import copy

import pytest
from kube.fixtures import make_registry

from nodeagent.cluster.apiserver.kubeapi import create_kube_app
from nodeagent.cluster.apiserver.resources import ApiSettings
from nodeagent.cluster.registry.kinds.workloads import format_selector, selector_string

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
async def api(aiohttp_client):
    reg, store, clock = await make_registry()
    client = await aiohttp_client(create_kube_app(reg, ApiSettings(clock)))
    yield client
    await reg.close()


def template(labels: dict[str, str], restart: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "web", "image": "nginx:1.27"}]}
    if restart:
        spec["restartPolicy"] = restart
    return {"metadata": {"labels": labels}, "spec": spec}


def deployment(name: str = "web", replicas: int | None = 2, labels: dict[str, str] | None = None) -> dict:
    labels = labels or {"app": name}
    spec: dict = {"selector": {"matchLabels": labels}, "template": template(labels)}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec}


async def _created(api, path: str, body: dict) -> dict:
    resp = await api.post(path, json=body)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def _invalid(resp, field: str, text: str = "") -> dict:
    assert resp.status == 422, await resp.text()
    body = await resp.json()
    fields = [c["field"] for c in body["details"]["causes"]]
    assert field in fields, body
    assert text in body["message"], body["message"]
    return body


# ---- defaults --------------------------------------------------------------------------------------
async def test_deployment_defaults_as_kube_apiserver(api) -> None:
    obj = await _created(api, DEPLOYS, deployment(replicas=None))
    spec = obj["spec"]
    assert spec["replicas"] == 1 and spec["revisionHistoryLimit"] == 10 and spec["progressDeadlineSeconds"] == 600
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Always" and pod["dnsPolicy"] == "ClusterFirst"
    assert pod["terminationGracePeriodSeconds"] == 30 and pod["schedulerName"] == "default-scheduler"
    assert pod["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert obj["metadata"]["generation"] == 1 and "status" not in obj


async def test_recreate_gets_no_rolling_update(api) -> None:
    body = deployment()
    body["spec"]["strategy"] = {"type": "Recreate"}
    obj = await _created(api, DEPLOYS, body)
    assert obj["spec"]["strategy"] == {"type": "Recreate"}
    body = deployment("other")
    body["spec"]["strategy"] = {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}
    await _invalid(await api.post(DEPLOYS, json=body), "spec.strategy.rollingUpdate", "Forbidden")


async def test_other_apps_defaults(api) -> None:
    rs = await _created(api, "/apis/apps/v1/namespaces/default/replicasets",
                        {"metadata": {"name": "rs"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                              "template": template({"a": "b"})}})
    assert rs["spec"]["replicas"] == 1
    ds = await _created(api, "/apis/apps/v1/namespaces/default/daemonsets",
                        {"metadata": {"name": "ds"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                              "template": template({"a": "b"})}})
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert ds["spec"]["revisionHistoryLimit"] == 10
    sts = await _created(api, "/apis/apps/v1/namespaces/default/statefulsets",
                         {"metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"a": "db"}},
                                                               "serviceName": "db", "template": template({"a": "db"})}})
    assert sts["spec"]["podManagementPolicy"] == "OrderedReady" and sts["spec"]["replicas"] == 1
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    explicit = await _created(api, "/apis/apps/v1/namespaces/default/statefulsets", {
        "metadata": {"name": "db2"}, "spec": {"selector": {"matchLabels": {"a": "db"}}, "template": template(
            {"a": "db"}), "updateStrategy": {"type": "RollingUpdate"}}})
    assert explicit["spec"]["updateStrategy"] == {"type": "RollingUpdate"}  # as SetDefaults_StatefulSet


async def test_job_defaults_and_generated_selector(api) -> None:
    job = await _created(api, "/apis/batch/v1/namespaces/default/jobs",
                         {"metadata": {"name": "pi"}, "spec": {"template": template({}, "Never")}})
    spec, uid = job["spec"], job["metadata"]["uid"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed" and spec["manualSelector"] is False
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                                                      "batch.kubernetes.io/job-name": "pi", "job-name": "pi"}
    assert job["metadata"]["labels"] == spec["template"]["metadata"]["labels"]
    par = await _created(api, "/apis/batch/v1/namespaces/default/jobs",
                         {"metadata": {"name": "par"}, "spec": {"parallelism": 3, "template": template({}, "Never")}})
    assert par["spec"]["parallelism"] == 3 and "completions" not in par["spec"]


async def test_job_restart_policy_must_be_never_or_on_failure(api) -> None:
    resp = await api.post("/apis/batch/v1/namespaces/default/jobs",
                          json={"metadata": {"name": "pi"}, "spec": {"template": template({})}})
    await _invalid(resp, "spec.template.spec.restartPolicy", '"Always"')


async def test_cronjob_defaults_and_schedule(api) -> None:
    cj = await _created(api, "/apis/batch/v1/namespaces/default/cronjobs",
                        {"metadata": {"name": "tick"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {
                            "spec": {"template": template({}, "OnFailure")}}}})
    spec = cj["spec"]
    assert (spec["concurrencyPolicy"], spec["suspend"]) == ("Allow", False)
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (3, 1)
    bad = copy.deepcopy(cj)
    del bad["metadata"]
    bad["metadata"] = {"name": "bad"}
    bad["spec"]["schedule"] = "every minute"
    await _invalid(await api.post("/apis/batch/v1/namespaces/default/cronjobs", json=bad), "spec.schedule",
                   "expected exactly 5 fields")
    bad["spec"]["schedule"] = "@hourly"
    bad["metadata"]["name"] = "x" * 53
    await _invalid(await api.post("/apis/batch/v1/namespaces/default/cronjobs", json=bad), "metadata.name",
                   "no more than 52")


async def test_pdb_status_and_validation(api) -> None:
    path = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
    pdb = await _created(api, path, {"metadata": {"name": "p"}, "spec": {"minAvailable": 1,
                                                                        "selector": {"matchLabels": {"a": "b"}}},
                                     "status": {"disruptionsAllowed": 9}})
    assert pdb["status"] == {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    await _invalid(await api.post(path, json={"metadata": {"name": "q"}, "spec": {"minAvailable": 1,
                                                                                  "maxUnavailable": "10%"}}),
                   "spec", "cannot be both set")
    await _invalid(await api.post(path, json={"metadata": {"name": "q"}, "spec": {"maxUnavailable": "150%"}}),
                   "spec.maxUnavailable", "100%")
    resp = await api.put(f"{path}/p/status", json={**pdb, "status": {"disruptionsAllowed": 1, "currentHealthy": 2,
                                                                     "desiredHealthy": 1, "expectedPods": 2}})
    assert resp.status == 200 and (await resp.json())["status"]["disruptionsAllowed"] == 1


# ---- validation ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "field", "text"), [
    (lambda d: d["spec"].pop("selector"), "spec.selector", "Required value"),
    (lambda d: d["spec"].__setitem__("selector", {"matchLabels": {"app": "other"}}),
     "spec.template.metadata.labels", "`selector` does not match template `labels`"),
    (lambda d: d["spec"].__setitem__("selector", {}), "spec.selector", "empty selector"),
    (lambda d: d["spec"].__setitem__("replicas", -1), "spec.replicas", "greater than or equal to 0"),
    (lambda d: d["spec"]["template"]["spec"].__setitem__("containers", []), "spec.template.spec.containers",
     "Required value"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("image"),
     "spec.template.spec.containers[0].image", "Required value"),
    (lambda d: d["spec"].__setitem__("strategy", {"type": "RollingUpdate",
                                                  "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}),
     "spec.strategy.rollingUpdate.maxUnavailable", "may not be 0 when `maxSurge` is 0"),
    (lambda d: d["spec"].__setitem__("strategy", {"type": "Sideways"}), "spec.strategy.type", "Unsupported value"),
    (lambda d: d["spec"]["selector"].__setitem__("matchExpressions", [{"key": "a", "operator": "Near"}]),
     "spec.selector.matchExpressions[0].operator", "Unsupported value"),
    (lambda d: d["spec"]["template"]["spec"].__setitem__("restartPolicy", "Never"),
     "spec.template.spec.restartPolicy", "Unsupported value"),
])
async def test_deployment_422_names_the_field(api, change, field: str, text: str) -> None:
    body = deployment()
    change(body)
    await _invalid(await api.post(DEPLOYS, json=body), field, text)
    assert (await api.get(f"{DEPLOYS}/web")).status == 404


async def test_selector_is_immutable(api) -> None:
    obj = await _created(api, DEPLOYS, deployment())
    obj["spec"]["selector"]["matchLabels"]["tier"] = "x"
    obj["spec"]["template"]["metadata"]["labels"]["tier"] = "x"
    await _invalid(await api.put(f"{DEPLOYS}/web", json=obj), "spec.selector", "field is immutable")


# ---- generation, status, scale ---------------------------------------------------------------------
async def test_generation_moves_with_the_spec_only(api) -> None:
    obj = await _created(api, DEPLOYS, deployment())
    resp = await api.patch(f"{DEPLOYS}/web", json={"metadata": {"labels": {"x": "y"}}}, headers=MERGE)
    assert (await resp.json())["metadata"]["generation"] == 1
    resp = await api.patch(f"{DEPLOYS}/web", json={"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "nginx:1.28"}]}}}}, headers=MERGE)
    assert (await resp.json())["metadata"]["generation"] == 2
    status = {"observedGeneration": 2, "replicas": 2, "readyReplicas": 1, "updatedReplicas": 2,
              "availableReplicas": 1}
    resp = await api.patch(f"{DEPLOYS}/web/status", json={"status": status, "spec": {"replicas": 9}}, headers=MERGE)
    out = await resp.json()
    assert resp.status == 200 and out["status"] == status
    assert out["spec"]["replicas"] == 2 and out["metadata"]["generation"] == 2  # spec ignored on /status
    resp = await api.put(f"{DEPLOYS}/web", json={**out, "status": {"replicas": 7}})
    again = await resp.json()
    assert again["status"] == status  # status ignored on the main resource
    bad = await api.patch(f"{DEPLOYS}/web/status", json={"status": {"replicas": -3}}, headers=MERGE)
    await _invalid(bad, "status.replicas")
    assert obj["metadata"]["uid"] == again["metadata"]["uid"]


async def test_scale_subresource(api) -> None:
    await _created(api, DEPLOYS, deployment(labels={"app": "web", "tier": "front"}))
    scale = await (await api.get(f"{DEPLOYS}/web/scale")).json()
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 0, "selector": "app=web,tier=front"}
    resp = await api.patch(f"{DEPLOYS}/web/scale", json={"spec": {"replicas": 5}}, headers=MERGE)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["spec"]["replicas"] == 5
    obj = await (await api.get(f"{DEPLOYS}/web")).json()
    assert obj["spec"]["replicas"] == 5 and obj["metadata"]["generation"] == 2
    scale = await (await api.get(f"{DEPLOYS}/web/scale")).json()
    scale["spec"]["replicas"] = 3
    resp = await api.put(f"{DEPLOYS}/web/scale", json=scale)
    assert resp.status == 200 and (await resp.json())["spec"]["replicas"] == 3
    resp = await api.put(f"{DEPLOYS}/web/scale", json=scale)  # the same resourceVersion again: stale
    assert resp.status == 409 and (await resp.json())["reason"] == "Conflict"
    resp = await api.patch(f"{DEPLOYS}/web/scale", json={"spec": {"replicas": -1}}, headers=MERGE)
    body = await _invalid(resp, "spec.replicas", "greater than or equal to 0")
    assert body["details"]["kind"] == "Scale"
    resp = await api.patch(f"{DEPLOYS}/web/scale", json=[{"op": "replace", "path": "/spec/replicas", "value": 4}],
                           headers={"Content-Type": "application/json-patch+json"})
    assert (await resp.json())["spec"]["replicas"] == 4
    assert (await api.get(f"{DEPLOYS}/nope/scale")).status == 404
    assert (await api.get("/apis/apps/v1/namespaces/default/daemonsets/x/scale")).status == 404


async def test_scale_replicasets_and_statefulsets(api) -> None:
    await _created(api, "/apis/apps/v1/namespaces/default/replicasets",
                   {"metadata": {"name": "rs"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                         "template": template({"a": "b"})}})
    resp = await api.patch("/apis/apps/v1/namespaces/default/replicasets/rs/scale", json={"spec": {"replicas": 4}},
                           headers=MERGE)
    assert (await resp.json())["spec"]["replicas"] == 4


# ---- tables, discovery, field selectors ------------------------------------------------------------
async def test_deployment_table(api) -> None:
    await _created(api, DEPLOYS, deployment())
    table = await (await api.get(DEPLOYS, headers={"Accept": TABLE})).json()
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"]
    assert [c["priority"] for c in table["columnDefinitions"]][-3:] == [1, 1, 1]
    cells = table["rows"][0]["cells"]
    assert cells[:4] == ["web", "0/2", 0, 0] and cells[5:] == ["web", "nginx:1.27", "app=web"]


async def test_job_and_cronjob_tables(api) -> None:
    await _created(api, "/apis/batch/v1/namespaces/default/jobs",
                   {"metadata": {"name": "pi"}, "spec": {"completions": 3, "template": template({}, "Never")}})
    await api.patch("/apis/batch/v1/namespaces/default/jobs/pi/status", headers=MERGE, json={"status": {
        "succeeded": 3, "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:01:05Z",
        "conditions": [{"type": "Complete", "status": "True"}]}})
    table = await (await api.get("/apis/batch/v1/namespaces/default/jobs", headers={"Accept": TABLE})).json()
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Status", "Completions", "Duration", "Age"]
    assert table["rows"][0]["cells"][:4] == ["pi", "Complete", "3/3", "65s"]
    sel = await (await api.get("/apis/batch/v1/namespaces/default/jobs?fieldSelector=status.successful=3")).json()
    assert [i["metadata"]["name"] for i in sel["items"]] == ["pi"]
    await _created(api, "/apis/batch/v1/namespaces/default/cronjobs",
                   {"metadata": {"name": "tick"}, "spec": {"schedule": "@hourly", "jobTemplate": {
                       "spec": {"template": template({}, "OnFailure")}}}})
    table = await (await api.get("/apis/batch/v1/namespaces/default/cronjobs", headers={"Accept": TABLE})).json()
    assert table["rows"][0]["cells"][:6] == ["tick", "@hourly", "<none>", "False", 0, "<none>"]


async def test_discovery_lists_the_workloads(api) -> None:
    apps = await (await api.get("/apis/apps/v1")).json()
    byname = {r["name"]: r for r in apps["resources"]}
    assert byname["deployments"]["shortNames"] == ["deploy"] and byname["deployments"]["categories"] == ["all"]
    assert byname["deployments/scale"]["group"] == "autoscaling" and byname["deployments/scale"]["kind"] == "Scale"
    assert byname["replicasets"]["shortNames"] == ["rs"] and byname["daemonsets"]["shortNames"] == ["ds"]
    assert byname["statefulsets"]["shortNames"] == ["sts"] and "controllerrevisions" in byname
    batch = {r["name"]: r for r in (await (await api.get("/apis/batch/v1")).json())["resources"]}
    assert batch["cronjobs"]["shortNames"] == ["cj"] and batch["jobs"]["categories"] == ["all"]
    policy = {r["name"]: r for r in (await (await api.get("/apis/policy/v1")).json())["resources"]}
    assert policy["poddisruptionbudgets"]["shortNames"] == ["pdb"]
    agg = await (await api.get("/apis", headers={"Accept": V2})).json()
    assert {"apps", "batch", "policy"} <= {g["metadata"]["name"] for g in agg["items"]}
    apps_v1 = next(g for g in agg["items"] if g["metadata"]["name"] == "apps")["versions"][0]["resources"]
    deploy = next(r for r in apps_v1 if r["resource"] == "deployments")
    assert deploy["shortNames"] == ["deploy"] and deploy["categories"] == ["all"]
    assert {s["subresource"]: s["responseKind"] for s in deploy["subresources"]} == {
        "status": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "scale": {"group": "autoscaling", "version": "v1", "kind": "Scale"}}


def test_selector_strings() -> None:
    sel = {"matchLabels": {"b": "2", "a": "1"},
           "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]},
                                {"key": "d", "operator": "DoesNotExist"}, {"key": "aa", "operator": "Exists"}]}
    assert selector_string(sel) == "a=1,aa,b=2,c in (x,y),!d"
    assert format_selector({}) == "<none>" and format_selector(None) == "<none>"


# ---- updates: what may not change ------------------------------------------------------------------
JOBS = "/apis/batch/v1/namespaces/default/jobs"


async def test_job_updates(api) -> None:
    job = await _created(api, JOBS, {"metadata": {"name": "j"}, "spec": {"completions": 2,
                                                                        "template": template({}, "Never")}})
    resp = await api.patch(f"{JOBS}/j", json={"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "nginx:2"}]}}}}, headers=MERGE)
    await _invalid(resp, "spec.template", "field is immutable")
    await _invalid(await api.patch(f"{JOBS}/j", json={"spec": {"completions": 3}}, headers=MERGE),
                   "spec.completions", "field is immutable")
    resp = await api.patch(f"{JOBS}/j", json={"spec": {"parallelism": 5, "suspend": True}}, headers=MERGE)
    out = await resp.json()
    assert resp.status == 200 and out["spec"]["parallelism"] == 5 and out["metadata"]["generation"] == 2
    resp = await api.patch(f"{JOBS}/j", json={"spec": {"template": {"spec": {"nodeSelector": {"z": "a"}}}}},
                           headers=MERGE)
    assert resp.status == 200, await resp.text()  # a suspended job's template may change
    body = {"metadata": {"name": "manual"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                      "template": template({"a": "b"}, "Never")}}
    await _invalid(await api.post(JOBS, json=body), "spec.selector", "`selector` not auto-generated")
    body["spec"]["manualSelector"] = True
    manual = await _created(api, JOBS, body)
    assert manual["spec"]["selector"] == {"matchLabels": {"a": "b"}}
    assert manual["spec"]["template"]["metadata"]["labels"] == {"a": "b"}
    await _invalid(await api.post(JOBS, json={"metadata": {"name": "ix"}, "spec": {
        "completionMode": "Indexed", "parallelism": 2, "template": template({}, "Never")}}),
        "spec.completions", "when completion mode is Indexed")
    assert job["metadata"]["generation"] == 1


async def test_statefulset_and_revision_updates(api) -> None:
    path = "/apis/apps/v1/namespaces/default/statefulsets"
    await _created(api, path, {"metadata": {"name": "db"}, "spec": {
        "serviceName": "db", "selector": {"matchLabels": {"a": "db"}}, "template": template({"a": "db"})}})
    await _invalid(await api.patch(f"{path}/db", json={"spec": {"serviceName": "other"}}, headers=MERGE),
                   "spec.serviceName", "field is immutable")
    resp = await api.patch(f"{path}/db", json={"spec": {"updateStrategy": {"type": "Sometimes"}}}, headers=MERGE)
    await _invalid(resp, "spec.updateStrategy.type", '"Sometimes"')
    revs = "/apis/apps/v1/namespaces/default/controllerrevisions"
    await _invalid(await api.post(revs, json={"metadata": {"name": "r"}, "data": {}}), "revision", "Required")
    rev = await _created(api, revs, {"metadata": {"name": "r", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u1", "controller": True}]},
        "data": {"spec": {"x": 1}}, "revision": 1})
    rev["data"] = {"spec": {"x": 2}}
    await _invalid(await api.put(f"{revs}/r", json=rev), "data", "field is immutable")
    table = await (await api.get(revs, headers={"Accept": TABLE})).json()
    assert table["rows"][0]["cells"][:3] == ["r", "statefulset.apps/db", 1]


async def test_daemonset_validation(api) -> None:
    path = "/apis/apps/v1/namespaces/default/daemonsets"
    body = {"metadata": {"name": "ds"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template(
        {"a": "b"}), "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "0%"}}}}
    await _invalid(await api.post(path, json=body), "spec.updateStrategy.rollingUpdate.maxUnavailable",
                   "may not be 0 when `maxSurge` is 0")
    body["spec"]["updateStrategy"] = {"type": "OnDelete"}
    body["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    await _created(api, path, body)
    table = await (await api.get(path, headers={"Accept": TABLE})).json()
    assert table["rows"][0]["cells"][:7] == ["ds", 0, 0, 0, 0, 0, "disk=ssd"]
    assert (await api.get(f"{path}/ds/scale")).status == 404


async def test_scale_needs_a_scale_body(api) -> None:
    await _created(api, DEPLOYS, deployment())
    resp = await api.put(f"{DEPLOYS}/web/scale", json={"kind": "Deployment", "spec": {"replicas": 1}})
    assert resp.status == 400
    resp = await api.put(f"{DEPLOYS}/web/scale", json={"metadata": {"name": "other"}, "spec": {"replicas": 1}})
    assert resp.status == 400
    resp = await api.patch(f"{DEPLOYS}/web/scale?fieldManager=x", json={"spec": {"replicas": 1}},
                           headers={"Content-Type": "application/apply-patch+yaml"})
    assert resp.status == 415
    resp = await api.put(f"{DEPLOYS}/web/scale?dryRun=All", json={"spec": {"replicas": 9}})
    assert resp.status == 200 and (await resp.json())["spec"]["replicas"] == 9
    assert (await (await api.get(f"{DEPLOYS}/web")).json())["spec"]["replicas"] == 2
    assert (await api.delete(f"{DEPLOYS}/web/scale")).status == 405


@pytest.mark.parametrize(("conditions", "deleting", "shown"), [
    ([], False, "Running"),
    ([{"type": "Complete", "status": "True"}], True, "Complete"),
    ([{"type": "Failed", "status": "True"}, {"type": "Complete", "status": "False"}], False, "Failed"),
    ([{"type": "Suspended", "status": "True"}], True, "Terminating"),
    ([{"type": "Suspended", "status": "True"}, {"type": "FailureTarget", "status": "True"}], False, "Suspended"),
    ([{"type": "FailureTarget", "status": "True"}], False, "FailureTarget"),
    ([{"type": "Suspended", "status": "False"}], False, "Running"),
])
def test_job_status_column(conditions: list, deleting: bool, shown: str) -> None:
    from nodeagent.cluster.registry.kinds.batch import job_status

    meta = {"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}
    assert job_status({"metadata": meta, "status": {"conditions": conditions}}) == shown
