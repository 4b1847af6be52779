"""HorizontalPodAutoscaler in the registry: autoscaling/v2 stored, autoscaling/v1 served by conversion
(nothing of v2 lost through a v1 read-modify-write), defaults, 422s naming the field, the status
subresource, and kubectl's TARGETS column (upstream's formatHPAMetrics)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeagent.cluster.controlplane import plugins
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.kinds.autoscaling import HorizontalPodAutoscalerV1Strategy, format_targets
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock

CTX = Context(field_manager="test")
REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}


def cpu(target: int) -> dict[str, Any]:
    return {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                        "averageUtilization": target}}}


MEMORY = {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                        "averageValue": "200Mi"}}}
PODS = {"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}
EXTERNAL = {"type": "External", "external": {"metric": {"name": "queue"},
                                             "target": {"type": "AverageValue", "averageValue": "2"}}}


@pytest.mark.parametrize(("specs", "statuses", "shown"), [
    ([], [], "<none>"),
    ([cpu(50)], [], "cpu: <unknown>/50%"),
    ([cpu(50)], [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 42,
                                                                               "averageValue": "210m"}}}],
     "cpu: 42%/50%"),
    ([MEMORY], [{"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "100Mi"}}}],
     "memory: 100Mi/200Mi"),
    ([PODS], [{"type": "Pods", "pods": {"metric": {"name": "rps"}, "current": {"averageValue": "5"}}}], "5/10"),
    ([EXTERNAL], [], "<unknown>/2 (avg)"),
    ([cpu(50), MEMORY, PODS], [], "cpu: <unknown>/50%, memory: <unknown>/200Mi + 1 more..."),
    ([{"type": "Bogus"}], [], "<unknown type>"),
])
def test_targets_column_is_kubectls(specs: list[Any], statuses: list[Any], shown: str) -> None:
    assert format_targets(specs, statuses) == shown


@pytest.fixture
async def stores() -> AsyncIterator[tuple[GenericStore, GenericStore]]:
    clock = FakeClock()
    reg = Registry(MemoryStore(), clock, plugins=plugins(clock))
    await reg.ensure_system_namespaces()
    yield (reg.resource("autoscaling", "v2", "horizontalpodautoscalers"),
           reg.resource("autoscaling", "v1", "horizontalpodautoscalers"))
    await reg.close()
    await reg.store.close()


async def test_v1_and_v2_are_one_object(stores: tuple[GenericStore, GenericStore]) -> None:
    v2, v1 = stores
    made = await v1.create("default", {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                                       "metadata": {"name": "web"},
                                       "spec": {"scaleTargetRef": REF, "maxReplicas": 5}}, CTX)
    assert made["spec"]["minReplicas"] == 1 and made["status"] == {"currentReplicas": 0, "desiredReplicas": 0}
    assert made["metadata"]["generation"] == 1
    stored = await v2.get("default", "web")
    assert stored["apiVersion"] == "autoscaling/v2"
    assert stored["spec"]["metrics"] == [cpu(80)]  # v1's implicit default, made explicit in v2
    # a v2 writer adds what v1 cannot say: a memory metric and a behavior
    stored["spec"]["metrics"] = [MEMORY, cpu(60)]
    stored["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 60}}
    await v2.update("default", "web", stored, CTX)
    seen = await v1.get("default", "web")
    assert seen["spec"]["targetCPUUtilizationPercentage"] == 60
    annotations = seen["metadata"]["annotations"]
    assert "autoscaling.alpha.kubernetes.io/metrics" in annotations
    assert "autoscaling.alpha.kubernetes.io/behavior" in annotations
    # a v1 read-modify-write keeps them
    seen["spec"]["maxReplicas"] = 7
    await v1.update("default", "web", seen, CTX)
    back = await v2.get("default", "web")
    assert back["spec"]["maxReplicas"] == 7 and back["spec"]["metrics"] == [MEMORY, cpu(60)]
    assert back["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 60
    assert back["spec"]["behavior"]["scaleUp"]["policies"]  # defaulted when a behavior is given
    assert back["metadata"]["generation"] == 3  # a spec change through either version bumps it
    assert "annotations" not in back["metadata"]  # the round-trip annotations are not stored


async def test_status_is_its_own_subresource(stores: tuple[GenericStore, GenericStore]) -> None:
    v2, v1 = stores
    made = await v2.create("default", {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                                       "metadata": {"name": "web"},
                                       "spec": {"scaleTargetRef": REF, "maxReplicas": 5, "metrics": [cpu(50)]},
                                       "status": {"desiredReplicas": 9}}, CTX)
    assert made["status"] == {"desiredReplicas": 0}  # a client's status is dropped on create
    status = {"currentReplicas": 2, "desiredReplicas": 3, "currentMetrics": [
        {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 75,
                                                                     "averageValue": "375m"}}}]}
    await v2.update("default", "web", {**made, "status": status}, CTX, subresource="status")
    assert (await v2.get("default", "web"))["metadata"]["generation"] == 1  # a status write does not
    spec_update = copy.deepcopy(await v2.get("default", "web"))
    spec_update["spec"]["maxReplicas"] = 6
    spec_update["status"] = {"desiredReplicas": 0}
    await v2.update("default", "web", spec_update, CTX)
    got = await v2.get("default", "web")
    assert got["status"] == status and got["spec"]["maxReplicas"] == 6  # a spec update keeps the status
    old = await v1.get("default", "web")
    assert old["status"]["currentCPUUtilizationPercentage"] == 75 and old["status"]["desiredReplicas"] == 3
    cells = HorizontalPodAutoscalerV1Strategy().cells(old, 0.0)
    assert cells[:6] == ["web", "Deployment/web", "cpu: 75%/50%", "1", 6, 2]
    with pytest.raises(errors.StatusError) as e:
        await v2.update("default", "web", {**got, "status": {"currentReplicas": -1}}, CTX, subresource="status")
    assert e.value.code == 422 and "status.currentReplicas" in e.value.message


@pytest.mark.parametrize(("spec", "field"), [
    ({"maxReplicas": 0}, "spec.maxReplicas"),
    ({"maxReplicas": 3, "minReplicas": 0}, "spec.minReplicas"),
    ({"maxReplicas": 3, "metrics": [{"type": "Bogus"}]}, "spec.metrics[0].type"),
    ({"maxReplicas": 3, "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 0}}}]}, "spec.metrics[0].resource.target.averageUtilization"),
    ({"maxReplicas": 3, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 7200}}},
     "spec.behavior.scaleUp.stabilizationWindowSeconds"),
])
async def test_invalid_specs_are_422_naming_the_field(stores: tuple[GenericStore, GenericStore],
                                                      spec: dict[str, Any], field: str) -> None:
    v2, _ = stores
    with pytest.raises(errors.StatusError) as e:
        await v2.create("default", {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                                    "metadata": {"name": "bad"}, "spec": {"scaleTargetRef": REF, **spec}}, CTX)
    assert e.value.code == 422 and f"{field}:" in e.value.message, e.value.message


async def test_v1_validation_names_the_v2_field_as_upstream(stores: tuple[GenericStore, GenericStore]) -> None:
    _, v1 = stores
    with pytest.raises(errors.StatusError) as e:
        await v1.create("default", {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                                    "metadata": {"name": "bad"},
                                    "spec": {"scaleTargetRef": REF, "maxReplicas": 2,
                                             "targetCPUUtilizationPercentage": 0}}, CTX)
    assert e.value.code == 422
    assert "spec.metrics[0].resource.target.averageUtilization" in e.value.message, e.value.message
