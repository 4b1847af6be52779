"""In-place resize on the agent (pods/resize.py): the patch, the checks, the cgroup values and their
order (pure tables), then the PodManager with real short processes and the in-memory cgroup tree:
admission (Infeasible, Deferred and its retry), the same PID, memory decreases held back,
RestartContainer, the record a restarted agent reads, and the HTTP route."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from fakes import FakeCgroupDriver
from test_pod_manager import MI, durable, make_manager, manifest, pid_of, status, stop_all, until

from nodeagent.agent.api import create_app
from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.resize import (
    MERGE,
    STRATEGIC,
    merge_patch,
    patched_pod,
    resize_errors,
    strategic_merge,
    widest,
)
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import parse_pod
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.resources import milli_cpu_to_shares

# ---- pure: the patch and the checks ----


def test_merge_patch_rfc7386() -> None:
    target = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_patch(target, {"a": {"b": None, "c": [3]}, "e": {"f": 1}}) == {"a": {"c": [3]}, "d": 1, "e": {"f": 1}}
    assert target == {"a": {"b": 1, "c": [1, 2]}, "d": 1}  # untouched


def test_strategic_merge_merges_containers_by_name() -> None:
    target = {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}, {"name": "b"}]}}
    patch = {"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                      "containers": [{"name": "b", "resources": {"requests": {"cpu": "1"}}}]}}
    got = strategic_merge(target, patch)
    assert got["spec"]["containers"] == [{"name": "a", "resources": {"limits": {"cpu": "1"}}},
                                         {"name": "b", "resources": {"requests": {"cpu": "1"}}}]
    deleted = strategic_merge(target, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["b"]
    with pytest.raises(FieldError) as e:
        strategic_merge(target, {"spec": {"$deleteFromPrimitiveList/x": []}})
    assert e.value.path == "spec.$deleteFromPrimitiveList/x"
    with pytest.raises(FieldError) as e:
        strategic_merge(target, {"spec": {"containers": [{"resources": {}}]}})
    assert e.value.path == "spec.containers[0].name"


def pod(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None, **extra: Any) -> Any:
    return parse_pod(manifest("p", requests=requests, limits=limits, **extra))


def test_patched_pod_takes_only_the_resources() -> None:
    current = pod(requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "200m", "memory": "128Mi"})
    patch = {"metadata": {"labels": {"x": "y"}},
             "spec": {"restartPolicy": "Never",
                      "containers": [{"name": "main", "command": ["evil"], "resources": {"limits": {"memory": "256Mi"}}}]}}
    got = patched_pod(current, patch, STRATEGIC)
    assert got.metadata.labels == {} and got.spec.restart_policy == "Always"  # dropNonResizeUpdates
    c = got.spec.containers[0]
    assert c.command == current.spec.containers[0].command
    assert c.resources.limits == {"cpu": parse_quantity("200m"), "memory": parse_quantity("256Mi")}
    assert c.resources.requests["memory"] == parse_quantity("64Mi")
    # a merge patch replaces the list: the named container's resources are what it says
    replaced = patched_pod(current, {"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]}},
                           MERGE)
    assert replaced.spec.containers[0].resources.limits == {"cpu": parse_quantity("1")}


@pytest.mark.parametrize(("patch", "path"), [
    ({"spec": {"containers": [{"name": "main"}, {"name": "extra", "command": ["x"]}]}}, "spec.containers"),
    ({"spec": {"containers": [{"name": "main", "resources": {"limits": {"memory": "lots"}}}]}},
     "spec.containers[0].resources.limits.memory"),
    ({"spec": "no"}, "spec"),
])
def test_patched_pod_errors_name_the_field(patch: dict[str, Any], path: str) -> None:
    current = pod(limits={"cpu": "200m"})
    with pytest.raises((FieldError, ValidationErrors)) as e:
        patched_pod(current, patch, STRATEGIC)
    err = e.value
    paths = [x.path for x in err.errors] if isinstance(err, ValidationErrors) else [err.path]
    assert any(p.startswith(path) for p in paths), paths


@pytest.mark.parametrize(("new", "paths"), [
    ({"requests": {"cpu": "200m", "memory": "64Mi"}}, []),
    ({"requests": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi"}},
     ["spec.containers[0].resources.requests[ephemeral-storage]"]),
    ({}, ["spec"]),  # Burstable -> BestEffort
])
def test_resize_errors(new: dict[str, Any], paths: list[str]) -> None:
    old = pod(requests={"cpu": "100m", "memory": "64Mi"})
    changed = patched_pod(old, {"spec": {"containers": [{"name": "main", "resources": new}]}}, MERGE)
    assert [e.path for e in resize_errors(old, changed, "Burstable")] == paths


def test_regular_init_containers_cannot_be_resized() -> None:
    init = [{"name": "init", "command": ["true"], "resources": {"requests": {"cpu": "100m"}}}]
    old = parse_pod({**manifest("p", requests={"cpu": "100m"}), "spec": {
        **manifest("p", requests={"cpu": "100m"})["spec"], "initContainers": init}})
    new = patched_pod(old, {"spec": {"initContainers": [{"name": "init", "resources": {"requests": {"cpu": "200m"}}}]}},
                      STRATEGIC)
    assert [e.path for e in resize_errors(old, new, "Burstable")] == ["spec.initContainers[0].resources"]


@pytest.mark.parametrize(("a", "b", "want"), [
    (CgroupSpec(cpu_shares=102, cpu_quota_us=20000, memory_max=100), CgroupSpec(cpu_shares=204, cpu_quota_us=10000, memory_max=200),
     CgroupSpec(cpu_shares=204, cpu_quota_us=20000, memory_max=200)),
    (CgroupSpec(cpu_quota_us=None, memory_max=100), CgroupSpec(cpu_quota_us=10000, memory_max=None),
     CgroupSpec(cpu_quota_us=None, memory_max=None)),
    (CgroupSpec(pids_max=10), CgroupSpec(pids_max=20), CgroupSpec(pids_max=20)),
])
def test_widest(a: CgroupSpec, b: CgroupSpec, want: CgroupSpec) -> None:
    assert widest(a, b) == want and widest(b, a) == want


# ---- the manager ----


def resize_body(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
                name: str = "main") -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"spec": {"containers": [{"name": name, "resources": resources}]}}


def paths(m: PodManager, name: str, container: str = "main") -> tuple[str, str]:
    plan = m.pods[("default", name)].plan
    c = plan.any_container(container)
    assert c is not None
    return plan.cgroup_path, c.cgroup_path


def conditions(m: PodManager, name: str) -> dict[str, dict[str, str]]:
    pod_ = m.get_pod("default", name)
    assert pod_ is not None
    return {c["type"]: c for c in pod_["status"].get("conditions", []) if c["type"].startswith("PodResize")}


@pytest.fixture
async def m(tmp_path: Path, driver: FakeCgroupDriver):  # type: ignore[no-untyped-def]
    manager = make_manager(tmp_path, driver)
    yield manager
    await stop_all(manager)
    await manager.resizes.close()


@pytest.fixture
def driver() -> FakeCgroupDriver:
    return FakeCgroupDriver()


async def running(m: PodManager, name: str) -> int:
    return await until(lambda: pid_of(m, name), what=f"{name} to run")  # type: ignore[no-any-return]


BURSTABLE = dict(requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "200m", "memory": "128Mi"})


async def test_a_resize_changes_the_cgroups_in_place(tmp_path: Path, m: PodManager, driver: FakeCgroupDriver) -> None:
    await m.create_pod(manifest("web", **BURSTABLE))  # type: ignore[arg-type]
    pid = await running(m, "web")
    pod_path, path = paths(m, "web")
    driver.updates.clear()
    got = await m.resize_pod("default", "web", resize_body({"cpu": "200m", "memory": "64Mi"},
                                                           {"cpu": "500m", "memory": "256Mi"}), STRATEGIC)
    assert got is not None
    assert driver.specs[path] == dataclasses.replace(driver.specs[path], cpu_shares=milli_cpu_to_shares(200),
                                                     cpu_quota_us=50000, memory_max=256 * MI)
    assert driver.specs[path].cpu_quota_us == 50000 and driver.specs[path].memory_max == 256 * MI
    assert driver.specs[pod_path].cpu_quota_us == 50000 and driver.specs[pod_path].memory_max == 256 * MI
    # the pod widened first; the burstable tier's weight follows the new request (one write)
    assert [p for p, _ in driver.updates if p.startswith(pod_path)] == [pod_path, path]
    assert [s.cpu_shares for p, s in driver.updates if p == "kubepods/burstable"] == [milli_cpu_to_shares(200)]
    assert pid_of(m, "web") == pid and status(m, "web")["restartCount"] == 0
    cs = status(m, "web")
    assert cs["allocatedResources"] == {"cpu": "200m", "memory": "64Mi"}
    assert cs["resources"] == {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}
    assert got["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi"}
    assert conditions(m, "web") == {}
    record = durable(tmp_path, "web")  # the allocation was on disk before the answer, then the cgroups were set
    assert record is not None and record.manifest["spec"]["containers"][0]["resources"]["limits"]["memory"] == "256Mi"
    await m.flush()
    record = durable(tmp_path, "web")  # and what the cgroups were given follows
    assert record is not None and record.resize is None
    # and back down: the container narrowed first, the pod last
    driver.updates.clear()
    await m.resize_pod("default", "web", resize_body(limits={"cpu": "200m", "memory": "128Mi"}), STRATEGIC)
    assert [p for p, _ in driver.updates] == [path, pod_path]
    assert driver.specs[pod_path].memory_max == 128 * MI and driver.specs[path].cpu_quota_us == 20000
    assert pid_of(m, "web") == pid


async def test_infeasible_is_kept_and_recorded(tmp_path: Path, m: PodManager, driver: FakeCgroupDriver) -> None:
    await m.create_pod(manifest("web", **BURSTABLE))  # type: ignore[arg-type]
    await running(m, "web")
    _, path = paths(m, "web")
    before = driver.specs[path]
    got = await m.resize_pod("default", "web", resize_body({"cpu": "3", "memory": "64Mi"},
                                                           {"cpu": "3", "memory": "128Mi"}), STRATEGIC)
    assert got is not None and got["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3"
    pending = conditions(m, "web")["PodResizePending"]
    assert pending["reason"] == "Infeasible"
    assert pending["message"] == "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"
    assert status(m, "web")["allocatedResources"]["cpu"] == "100m"
    assert driver.specs[path] == before
    record = durable(tmp_path, "web")
    assert record is not None and record.resize is not None
    assert record.resize["desired"]["main"]["requests"]["cpu"] == "3"
    assert record.manifest["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"
    # the resize is still asked for after an agent restart, and still infeasible
    await m.detach_all()
    second = make_manager(tmp_path, driver)
    try:
        await second.restore()
        await until(lambda: conditions(second, "web").get("PodResizePending", {}).get("reason") == "Infeasible",
                    what="the restored resize to be re-admitted")
        spec = second.get_pod("default", "web")["spec"]  # type: ignore[index]
        assert spec["containers"][0]["resources"]["requests"]["cpu"] == "3"
    finally:
        await stop_all(second)
        await second.resizes.close()


async def test_deferred_is_retried_when_room_appears(m: PodManager, driver: FakeCgroupDriver) -> None:
    await m.create_pod(manifest("big", requests={"cpu": "1500m"}))
    await m.create_pod(manifest("small", requests={"cpu": "100m"}))
    await running(m, "small")
    await m.resize_pod("default", "small", resize_body({"cpu": "1"}), STRATEGIC)
    pending = conditions(m, "small")["PodResizePending"]
    assert pending["reason"] == "Deferred"
    assert pending["message"] == "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
    _, path = paths(m, "small")
    assert driver.specs[path].cpu_shares == milli_cpu_to_shares(100)
    await m.delete_pod("default", "big", 0)
    # the allocation moves first and the cgroups follow (after the record's fsync, in a thread):
    # in between the pod shows PodResizeInProgress, so wait for what the cgroups were given
    await until(lambda: status(m, "small")["resources"] == {"requests": {"cpu": "1"}},
                what="the deferred resize to be actuated")
    assert status(m, "small")["allocatedResources"] == {"cpu": "1"}
    assert conditions(m, "small") == {}
    assert driver.specs[path].cpu_shares == milli_cpu_to_shares(1000)


async def test_qos_class_may_not_change(m: PodManager) -> None:
    await m.create_pod(manifest("web", **BURSTABLE))  # type: ignore[arg-type]
    with pytest.raises(ValidationErrors) as e:  # requests == limits: Guaranteed
        await m.resize_pod("default", "web", resize_body({"cpu": "200m", "memory": "128Mi"}), STRATEGIC)
    assert [x.path for x in e.value.errors] == ["spec"]
    assert "Pod QOS Class may not change as a result of resizing" in str(e.value)
    assert await m.resize_pod("default", "nope", resize_body({"cpu": "1"}), STRATEGIC) is None


async def test_a_memory_decrease_waits_for_usage(tmp_path: Path, m: PodManager, driver: FakeCgroupDriver) -> None:
    await m.create_pod(manifest("web", requests={"memory": "64Mi"}, limits={"memory": "256Mi"}))
    pid = await running(m, "web")
    _, path = paths(m, "web")
    driver.memory[path] = (200 * MI, 0)
    await m.resize_pod("default", "web", resize_body(limits={"memory": "128Mi"}), STRATEGIC)
    held = conditions(m, "web")["PodResizeInProgress"]
    assert held["reason"] == "Error" and f"memory usage {200 * MI} is above the desired memory limit {128 * MI}" in held["message"]
    assert driver.specs[path].memory_max == 256 * MI
    cs = status(m, "web")
    assert cs["resources"]["limits"]["memory"] == "256Mi" and cs["allocatedResources"]["memory"] == "64Mi"
    record = durable(tmp_path, "web")
    assert record is not None and record.resize is not None and "main" in record.resize["acknowledged"]
    # a restarted agent re-creates the cgroup with the looser limit, never below what it had
    restarted = FakeCgroupDriver()
    await m.flush()
    second = make_manager(tmp_path, restarted)
    restarted.memory[path] = (200 * MI, 0)
    second.resizes.retry_period = 3600
    try:
        await second.restore()
        assert restarted.specs[path].memory_max == 256 * MI
    finally:
        await second.resizes.close()
        for w in second.pods.values():
            await w.detach()
    driver.memory[path] = (50 * MI, 0)
    await m.resizes.retry()
    assert driver.specs[path].memory_max == 128 * MI and conditions(m, "web") == {}
    assert pid_of(m, "web") == pid


async def test_restart_container_policy(m: PodManager, driver: FakeCgroupDriver) -> None:
    container = {"name": "main", "command": ["/bin/sh", "-c", "exec sleep 30"],
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                 "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}
    await m.create_pod(manifest("web", containers=[container], grace=1))
    pid = await running(m, "web")
    _, path = paths(m, "web")
    await m.resize_pod("default", "web", resize_body({"cpu": "200m", "memory": "64Mi"}, {"memory": "128Mi"}),
                       STRATEGIC)  # cpu: NotRequired, live
    assert pid_of(m, "web") == pid and driver.specs[path].cpu_shares == milli_cpu_to_shares(200)
    await m.resize_pod("default", "web", resize_body(limits={"memory": "96Mi"}), STRATEGIC)
    await until(lambda: status(m, "web")["restartCount"] == 1 and pid_of(m, "web") not in (None, pid),
                what="the container to be restarted")
    await until(lambda: conditions(m, "web") == {}, what="the resize to complete")
    assert driver.specs[path].memory_max == 96 * MI


async def test_the_http_route(aiohttp_client: Any, m: PodManager) -> None:
    await m.create_pod(manifest("web", **BURSTABLE))  # type: ignore[arg-type]
    client: TestClient = await aiohttp_client(create_app(m))  # type: ignore[arg-type]
    url = "/api/v1/namespaces/default/pods/web/resize"
    r = await client.patch(url, json=resize_body(limits={"cpu": "300m", "memory": "128Mi"}),
                           headers={"Content-Type": STRATEGIC})
    assert r.status == 200
    assert (await r.json())["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] == "300m"
    r = await client.patch(url, json=resize_body(limits={"cpu": "300m", "memory": "128Mi"}))
    assert r.status == 415
    r = await client.patch(url, json=resize_body({"cpu": "200m", "memory": "128Mi"}, {"cpu": "200m", "memory": "128Mi"}),
                           headers={"Content-Type": MERGE})
    body = await r.json()
    assert r.status == 422 and body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "spec"
    r = await client.patch("/api/v1/namespaces/default/pods/nope/resize", json={}, headers={"Content-Type": MERGE})
    assert r.status == 404
    r = await client.get(url)
    assert r.status == 200 and (await r.json())["metadata"]["name"] == "web"
