"""The Job, TTL-after-finished and CronJob loops over a real in-process registry (memory store,
fake clock): the informers are refreshed from the store after every sync and the controllers'
own work queues are drained at the fake clock's time, so the delays they ask for (the one-second
batching, the pod-failure back-off, the active deadline, the TTL, the next schedule) are what
decides when something happens, with no sleeping. No agent runs here: pods are marked Failed or
Succeeded through pods/status, as a kubelet would report them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from kube.fixtures import served_registry  # noqa: F401 - the registry fixture

from nodeagent.cluster.controllers.job.reconcile import TRACKING_FINALIZER
from nodeagent.cluster.controllers.manager.client import ApiError
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controlplane import RegistryClient
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.core.clock import FakeClock
from nodeagent.core.timefmt import rfc3339

NS = "default"
POD_SPEC = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}


@dataclass
class Events:
    seen: list[tuple[str, str, str, str]] = field(default_factory=list)  # (component, kind/name, reason, message)

    def recorder(self, component: str) -> Any:
        events = self

        class R:
            def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
                events.seen.append((component, f"{obj['kind']}/{obj['metadata']['name']}", reason, message))
        return R()

    def reasons(self, component: str) -> list[str]:
        return [r for c, _, r, _ in self.seen if c == component]


class Harness:
    def __init__(self, reg: Registry, clock: FakeClock, enabled: list[str]) -> None:
        self.reg, self.clock = reg, clock
        self.client = RegistryClient(reg)
        self.events = Events()
        self.mgr = ControllerManager(self.client, clock, enabled=enabled, recorder=self.events.recorder)

    async def refresh(self) -> None:
        """What the feeds would deliver: every informer brought level with the store."""
        for (api_version, kind), inf in self.mgr.informers.items():
            listed = {f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o
                      for o in (await self.client.store(api_version, kind).list(None, ListOptions())).items}
            for k in inf.object_keys():
                if k not in listed:
                    old = inf.get(k)
                    assert old is not None
                    inf.apply("DELETED", dict(old))
            for k, obj in listed.items():
                old = inf.get(k)
                if old is None:
                    inf.apply("ADDED", obj)
                elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                    inf.apply("MODIFIED", obj)

    async def drain(self) -> int:
        """Process every key due at the fake clock's time until none is (a worker's loop, unslept)."""
        await self.refresh()
        n = 0
        progress = True
        while progress:
            progress = False
            for c in self.mgr.controllers:
                k = c.queue.poll()
                if k is not None:
                    await c.process_one(k)
                    await self.refresh()
                    n, progress = n + 1, True
            assert n < 500, "controllers do not settle"
        return n

    def due(self, c: Controller) -> float | None:
        """Seconds until the controller's next delayed key."""
        at = c.queue.next_due()
        return None if at is None else at - self.clock.now()

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.drain()

    def res(self, api_version: str, kind: str) -> Any:
        return self.client.resource(api_version, kind)

    async def pods(self) -> list[dict[str, Any]]:
        return (await self.client.store("v1", "Pod").list(NS, ListOptions())).items

    async def jobs(self) -> list[dict[str, Any]]:
        return (await self.client.store("batch/v1", "Job").list(NS, ListOptions())).items

    async def job(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = await self.res("batch/v1", "Job").get(NS, name)
        return out

    async def finish_pod(self, pod: dict[str, Any], phase: str, *, finished_ago: float = 0, code: int = 1) -> None:
        """What the kubelet reports for a container that exited."""
        at = rfc3339(self.clock.wall() - finished_ago)
        term = {"exitCode": 0 if phase == "Succeeded" else code, "finishedAt": at, "startedAt": at,
                "reason": "Completed" if phase == "Succeeded" else "Error"}
        await self.res("v1", "Pod").patch(NS, pod["metadata"]["name"], {"status": {
            "phase": phase, "containerStatuses": [{"name": "c", "ready": False, "restartCount": 0, "image": "busybox",
                                                   "imageID": "", "state": {"terminated": term}}]}}, "merge", "status")


def job_obj(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": {"template": {"spec": POD_SPEC}, **spec}}


def conditions(job: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in (job.get("status") or {}).get("conditions") or []}


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


async def test_failed_pods_are_replaced_after_the_exponential_back_off(registry: tuple[Registry, FakeClock]) -> None:
    h = Harness(*registry, enabled=["job"])
    jc = h.mgr.job
    await h.res("batch/v1", "Job").create(NS, job_obj("bo", backoffLimit=6))
    await h.drain()
    (first,) = await h.pods()
    assert first["metadata"]["finalizers"] == [TRACKING_FINALIZER] and first["metadata"]["generateName"] == "bo-"
    assert (await h.job("bo"))["status"]["active"] == 1

    await h.finish_pod(first, "Failed")
    await h.drain()
    assert h.due(jc) == pytest.approx(1.0)  # pod events are batched by a second
    await h.advance(1.0)
    st = (await h.job("bo"))["status"]
    assert st["failed"] == 1 and st["active"] == 0 and st["uncountedTerminatedPods"] == {}
    (gone,) = await h.pods()
    assert gone["metadata"].get("finalizers") is None  # counted, then released
    await h.advance(1.0)  # the finalizer's removal seen (batched): the back-off is still running
    assert h.due(jc) == pytest.approx(8.0)  # 10 s after the failure, 2 s of it gone
    await h.advance(7.5)
    assert len(await h.pods()) == 1, "no replacement before the back-off"
    await h.advance(0.5)
    pods = await h.pods()
    assert len(pods) == 2 and len(live(pods)) == 1

    second = live(pods)[0]
    await h.finish_pod(second, "Failed")
    await h.advance(1.0)
    assert (await h.job("bo"))["status"]["failed"] == 2
    await h.advance(1.0)
    assert h.due(jc) == pytest.approx(18.0)  # two failures since the last success: 20 s
    await h.advance(17.9)
    assert len(await h.pods()) == 2
    await h.advance(0.1)
    assert len(live(await h.pods())) == 1
    third = live(await h.pods())[0]
    await h.finish_pod(third, "Failed", finished_ago=15)  # the kubelet reported it late
    await h.advance(1.0)
    assert jc.backoffs["default/bo"].failures_after_last_success == 3
    await h.advance(1.0)
    assert h.due(jc) == pytest.approx(40.0 - 17.0)  # 40 s from its finishedAt, not from when it was seen
    assert h.events.reasons("job-controller").count("SuccessfulCreate") == 3


async def test_backoff_limit_exceeded_deletes_the_active_pods_then_fails(registry: tuple[Registry, FakeClock]) -> None:
    h = Harness(*registry, enabled=["job"])
    await h.res("batch/v1", "Job").create(NS, job_obj("lim", parallelism=2, completions=2, backoffLimit=0))
    await h.drain()
    a, b = await h.pods()
    await h.finish_pod(a, "Failed")
    await h.advance(1.0)
    await h.advance(1.0)  # the deleted pod's finalizer is removed, then it goes and the Job is marked Failed
    job = await h.job("lim")
    assert conditions(job) == {"FailureTarget": ("True", "BackoffLimitExceeded"),
                               "Failed": ("True", "BackoffLimitExceeded")}
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["message"] == "Job has reached the specified backoff limit"
    assert job["status"]["failed"] == 2 and job["status"]["active"] == 0 and "completionTime" not in job["status"]
    pods = await h.pods()
    assert [p["metadata"]["name"] for p in pods] == [a["metadata"]["name"]]  # the running one was deleted
    assert not pods[0]["metadata"].get("finalizers")
    assert ("job-controller", "Job/lim", "BackoffLimitExceeded", "Job has reached the specified backoff limit") \
        in h.events.seen


async def test_active_deadline_fails_the_job_at_its_time(registry: tuple[Registry, FakeClock]) -> None:
    h = Harness(*registry, enabled=["job"])
    await h.res("batch/v1", "Job").create(NS, job_obj("dl", activeDeadlineSeconds=30))
    await h.drain()
    assert len(live(await h.pods())) == 1
    assert h.due(h.mgr.job) == pytest.approx(1.0)  # its own pod's creation, batched
    await h.advance(1.0)
    assert h.due(h.mgr.job) == pytest.approx(29.0)  # then the deadline
    await h.advance(28.0)
    assert "Failed" not in conditions(await h.job("dl"))
    await h.advance(1.0)
    await h.advance(1.0)
    job = await h.job("dl")
    assert conditions(job)["Failed"] == ("True", "DeadlineExceeded")
    assert await h.pods() == []  # the active pod deleted, its finalizer removed


async def test_indexed_job_completes_and_the_ttl_deletes_it_with_its_pods(registry: tuple[Registry, FakeClock]) -> None:
    h = Harness(*registry, enabled=["job", "ttl-after-finished", "garbagecollector"])
    await h.res("batch/v1", "Job").create(NS, job_obj("ix", completions=3, parallelism=3, completionMode="Indexed",
                                                      ttlSecondsAfterFinished=60))
    await h.drain()
    pods = await h.pods()
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1", "2"]
    for p in pods:
        await h.finish_pod(p, "Succeeded")
    await h.advance(1.0)
    await h.advance(1.0)
    job = await h.job("ix")
    assert conditions(job) == {"SuccessCriteriaMet": ("True", "CompletionsReached"),
                               "Complete": ("True", "CompletionsReached")}
    assert job["status"]["completedIndexes"] == "0-2" and job["status"]["succeeded"] == 3
    done_at = job["status"]["completionTime"]
    assert h.due(h.mgr.ttl) == pytest.approx(60.0 - 1.0, abs=1.0)
    await h.advance(h.due(h.mgr.ttl) - 0.5)  # type: ignore[operator]
    assert (await h.job("ix"))["status"]["completionTime"] == done_at
    await h.advance(1.0)
    with pytest.raises(ApiError) as e:
        await h.job("ix")
    assert e.value.not_found
    assert await h.pods() == []  # foreground: the garbage collector took the pods first


async def test_an_orphaned_pod_loses_the_tracking_finalizer(registry: tuple[Registry, FakeClock]) -> None:
    h = Harness(*registry, enabled=["job", "garbagecollector"])
    await h.res("batch/v1", "Job").create(NS, job_obj("gone", parallelism=2, completions=4))
    await h.drain()
    assert len(await h.pods()) == 2
    await h.res("batch/v1", "Job").delete(NS, "gone", propagation="Background")
    await h.drain()
    assert await h.pods() == []  # deleted by the collector, released by the Job controller's orphan queue


def cronjob_obj(name: str, schedule: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": NS},
            "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": POD_SPEC}}}, **spec}}


async def complete(h: Harness, job: dict[str, Any]) -> None:
    now = rfc3339(h.clock.wall())
    await h.res("batch/v1", "Job").patch(NS, job["metadata"]["name"], {"status": {
        "startTime": job["status"].get("startTime") or now, "completionTime": now, "succeeded": 1,
        "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                       {"type": "Complete", "status": "True", "lastTransitionTime": now}]}}, "merge", "status")


async def test_cronjob_fires_at_its_schedule_times(registry: tuple[Registry, FakeClock]) -> None:
    h = Harness(*registry, enabled=["cronjob"])
    cc = h.mgr.cronjob
    t0 = h.clock.wall()
    assert t0 % 300 == 0  # the fake clock starts on a five-minute boundary
    await h.res("batch/v1", "CronJob").create(NS, cronjob_obj("five", "*/5 * * * *", successfulJobsHistoryLimit=1))
    await h.drain()
    assert await h.jobs() == [] and h.due(cc) == pytest.approx(300.1)
    await h.advance(300.0)
    assert await h.jobs() == []
    await h.advance(0.1)
    (j1,) = await h.jobs()
    assert j1["metadata"]["name"] == f"five-{int(t0 + 300) // 60}"
    assert j1["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] == rfc3339(t0 + 300)
    cj = await h.res("batch/v1", "CronJob").get(NS, "five")
    assert cj["status"]["lastScheduleTime"] == rfc3339(t0 + 300)
    assert [(a["name"], a["uid"]) for a in cj["status"]["active"]] == [(j1["metadata"]["name"], j1["metadata"]["uid"])]
    assert h.due(cc) == pytest.approx(300.0)
    # Allow: the next one starts though the first still runs
    await h.advance(300.0)
    assert len(await h.jobs()) == 2
    assert "UnexpectedJob" not in h.events.reasons("cronjob-controller")
    assert "MissingJob" not in h.events.reasons("cronjob-controller")
    for j in await h.jobs():
        await complete(h, j)
    await h.drain()
    cj = await h.res("batch/v1", "CronJob").get(NS, "five")
    assert "active" not in cj["status"] and cj["status"]["lastSuccessfulTime"] == rfc3339(h.clock.wall())
    assert [j["metadata"]["name"] for j in await h.jobs()] == [f"five-{int(t0 + 600) // 60}"]  # history limit 1
    assert h.events.reasons("cronjob-controller").count("SawCompletedJob") == 2


async def test_concurrency_policies_suspend_and_starting_deadline(registry: tuple[Registry, FakeClock]) -> None:
    h = Harness(*registry, enabled=["cronjob"])
    t0 = h.clock.wall()
    cjs = h.res("batch/v1", "CronJob")
    await cjs.create(NS, cronjob_obj("cc", "*/5 * * * *", concurrencyPolicy="Forbid"))
    await h.advance(300.1)
    (first,) = await h.jobs()
    await h.advance(300.0)
    assert [j["metadata"]["name"] for j in await h.jobs()] == [first["metadata"]["name"]]
    assert "JobAlreadyActive" in h.events.reasons("cronjob-controller")

    await cjs.patch(NS, "cc", {"spec": {"concurrencyPolicy": "Replace"}}, "merge")
    await h.advance(300.0)
    (second,) = await h.jobs()
    assert second["metadata"]["name"] == f"cc-{int(t0 + 900) // 60}"
    assert ("cronjob-controller", "CronJob/cc", "SuccessfulDelete", f"Deleted job {first['metadata']['name']}") \
        in h.events.seen

    await cjs.patch(NS, "cc", {"spec": {"suspend": True, "concurrencyPolicy": "Allow", "startingDeadlineSeconds": 10}},
                    "merge")
    await h.advance(600.0)
    assert len(await h.jobs()) == 1  # suspended: nothing started
    await h.advance(30.0)  # 30 s after a schedule time, with a 10 s starting deadline: too late to start
    await cjs.patch(NS, "cc", {"spec": {"suspend": False}}, "merge")
    await h.drain()
    assert len(await h.jobs()) == 1 and h.due(h.mgr.cronjob) == pytest.approx(270.0)  # the clock is at +0.1
    await cjs.patch(NS, "cc", {"spec": {"startingDeadlineSeconds": 60}}, "merge")
    await h.drain()  # within 60 s of it: started now
    assert sorted(j["metadata"]["name"] for j in await h.jobs()) == [f"cc-{int(t0 + m) // 60}" for m in (900, 1500)]
    await h.advance(269.9)
    assert len(await h.jobs()) == 2
    await h.advance(0.1)
    assert len(await h.jobs()) == 3


async def test_cronjob_time_zone(registry: tuple[Registry, FakeClock]) -> None:
    h = Harness(*registry, enabled=["cronjob"])
    t0 = h.clock.wall()  # 2023-11-14 22:30 UTC, 07:30 on the 15th in Tokyo
    assert rfc3339(t0) == "2023-11-14T22:30:00Z"
    await h.res("batch/v1", "CronJob").create(NS, cronjob_obj("tokyo", "0 8 * * *", timeZone="Asia/Tokyo"))
    await h.drain()
    assert h.due(h.mgr.cronjob) == pytest.approx(1800.1)
    await h.advance(1800.1)
    (j,) = await h.jobs()
    assert j["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] == "2023-11-15T08:00:00+09:00"


async def test_a_job_created_before_a_lost_status_write_is_put_back_in_the_active_list(
        registry: tuple[Registry, FakeClock]) -> None:
    """A crash between the create and the status write: the next sync's create meets AlreadyExists,
    finds the Job its own and lists it (upstream's recovery), without starting a second one."""
    h = Harness(*registry, enabled=["cronjob"])
    t0 = h.clock.wall()
    cj = await h.res("batch/v1", "CronJob").create(NS, cronjob_obj("lost", "*/5 * * * *"))
    await h.drain()
    name = f"lost-{int(t0 + 300) // 60}"
    made = await h.res("batch/v1", "Job").create(NS, {  # what the crashed controller had created
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS, "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "CronJob", "name": "lost", "uid": cj["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"template": {"spec": POD_SPEC}}})
    await h.advance(300.1)
    st = (await h.res("batch/v1", "CronJob").get(NS, "lost"))["status"]
    assert [(a["name"], a["uid"]) for a in st["active"]] == [(name, made["metadata"]["uid"])]
    assert st["lastScheduleTime"] == rfc3339(t0 + 300)
    assert [j["metadata"]["name"] for j in await h.jobs()] == [name]
    assert "SuccessfulCreate" not in h.events.reasons("cronjob-controller")
    assert h.due(h.mgr.cronjob) == pytest.approx(300.0)


async def test_a_restarted_manager_creates_no_second_set_of_pods(registry: tuple[Registry, FakeClock]) -> None:
    """Caches rebuilt by listing (WaitForCacheSync) before the first sync: the pods already made are
    counted, whatever the lost expectations and back-off records said."""
    h = Harness(*registry, enabled=["job", "cronjob"])
    await h.res("batch/v1", "Job").create(NS, job_obj("par", parallelism=3, completions=6))
    await h.drain()
    first = await h.pods()
    await h.finish_pod(first[0], "Failed")
    await h.advance(1.0)
    assert len(live(await h.pods())) == 2  # the failed one waits for its back-off
    restarted = Harness(*registry, enabled=["job", "cronjob"])
    await restarted.drain()
    pods = await restarted.pods()
    assert len(live(pods)) == 3 and len(pods) == 4  # the back-off record is memory: replaced at once
    assert (await restarted.job("par"))["status"]["failed"] == 1
    await restarted.advance(1.0)
    assert len(await restarted.pods()) == 4
