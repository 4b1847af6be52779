"""The write path's shortcuts give what the long way gives: the scheduler cache's "equal but for
the node" spec test, the typed compare of shared subtrees and exact leaves, and the event
recorder's bodies, which skip field validation (Context.internal) because it returns them as
they are."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from nodeagent.cluster.events.correlator import Correlator
from nodeagent.cluster.events.recorder import EventRecorder
from nodeagent.cluster.patch.typed import compare
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.fieldcheck import SchemaFieldValidator
from nodeagent.cluster.registry.kinds.events import EventStrategy
from nodeagent.cluster.registry.patching import RegistryFieldManager
from nodeagent.cluster.scheduling.cache import same_but_node
from nodeagent.cluster.schema.definitions import definitions
from nodeagent.cluster.schema.model import Gvk
from nodeagent.core.clock import FakeClock

C = [{"name": "c", "image": "i"}]


@pytest.mark.parametrize(("old", "new", "same"), [
    ({}, {}, True),
    ({"containers": C}, {"containers": C}, True),
    ({"containers": C}, {"containers": C, "nodeName": "n1"}, True),
    ({"containers": C, "nodeName": "n1"}, {"containers": C}, True),
    ({"containers": C, "nodeName": "n1"}, {"containers": C, "nodeName": "n2"}, True),  # the node is not compared
    ({"containers": C}, {"containers": C, "nodeName": "n1", "priority": 0}, False),
    ({"containers": C, "priority": 0}, {"containers": C, "nodeName": "n1"}, False),
    ({"containers": C, "priority": 0}, {"containers": C, "nodeName": "n1", "hostNetwork": False}, False),
    ({"containers": C}, {"containers": [{"name": "c", "image": "j"}], "nodeName": "n1"}, False),
    ({"containers": C, "nodeName": "n1"}, {"nodeName": "n1"}, False),
])
def test_same_but_node(old: dict[str, Any], new: dict[str, Any], same: bool) -> None:
    assert same_but_node(old, new) is same
    assert same_but_node(new, old) is same


POD_SCHEMA = definitions().by_gvk(Gvk("", "v1", "Pod"))
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
       "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                "resources": {"requests": {"cpu": "100m"}}}],
                "terminationGracePeriodSeconds": 30, "enableServiceLinks": True, "priority": 0},
       "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                      "lastProbeTime": None}]}}


def _changed(pod: dict[str, Any], shared: bool) -> dict[str, Any]:
    """A binding-like write: a new spec.nodeName, priority and grace changed, a condition replaced;
    `shared`: the parts not changed are the old object's own (a path copy), else a deep copy."""
    base = pod if shared else copy.deepcopy(pod)
    new = {**base, "metadata": dict(base["metadata"]),
           "spec": {**base["spec"], "nodeName": "n1", "terminationGracePeriodSeconds": 31, "priority": None},
           "status": {**base["status"], "conditions": [{"type": "PodScheduled", "status": "True",
                                                        "lastProbeTime": None}]}}
    return new


@pytest.mark.parametrize("case", ["identical", "path-copy", "ints-and-null", "bool-vs-int", "float-vs-int"])
def test_compare_shortcuts_give_the_long_ways_sets(case: str) -> None:
    old = copy.deepcopy(POD)
    if case == "identical":
        pairs = [(old, old), (old, copy.deepcopy(old))]
    elif case == "path-copy":
        pairs = [(old, _changed(old, shared=True)), (old, _changed(old, shared=False))]
    elif case == "ints-and-null":
        other = copy.deepcopy(old)
        other["spec"]["terminationGracePeriodSeconds"] = 30
        other["status"]["conditions"][0]["lastProbeTime"] = None
        pairs = [(old, other), (old, copy.deepcopy(old))]
    elif case == "bool-vs-int":  # 1 == True in Python, not in JSON: a modification
        other = copy.deepcopy(old)
        other["spec"]["enableServiceLinks"] = 1
        added, modified, removed = compare(old, other, POD_SCHEMA)
        assert not modified.empty and added.empty and removed.empty
        return
    else:  # 30.0 and 30 are one JSON number for Go: no modification
        other = copy.deepcopy(old)
        other["spec"]["terminationGracePeriodSeconds"] = 30.0
        added, modified, removed = compare(old, other, POD_SCHEMA)
        assert modified.empty and added.empty and removed.empty
        return
    (a, b), (c, d) = pairs
    assert compare(a, b, POD_SCHEMA) == compare(c, d, POD_SCHEMA)


def test_a_path_copied_write_records_the_same_managed_fields_as_a_deep_copied_one() -> None:
    fm = RegistryFieldManager(FakeClock())
    info = ResourceInfo("", "v1", "Pod", "pods", "pod", True)
    live = fm.update(None, copy.deepcopy(POD), info, manager="creator", subresource="")
    shared = fm.update(live, _changed(live, shared=True), info, manager="writer", subresource="status")
    deep = fm.update(live, _changed(live, shared=False), info, manager="writer", subresource="status")
    assert shared["metadata"]["managedFields"] == deep["metadata"]["managedFields"]
    assert len(shared["metadata"]["managedFields"]) == 2


async def test_the_recorders_events_pass_field_validation_unchanged() -> None:
    """What the recorder writes with Context.internal is what field validation would return."""
    clock = FakeClock()
    written: list[dict[str, Any]] = []

    class Events:
        async def update(self, namespace: str, name: str, body: Any, ctx: Any) -> Any:
            assert ctx.internal
            written.append(body)
            return body

    recorder = EventRecorder(Events(), clock, "default-scheduler", correlator=Correlator())  # type: ignore[arg-type]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u",
                                                           "resourceVersion": "7"}}
    for _ in range(3):  # the second and third are the first's count going up
        recorder.event(pod, "Warning", "FailedScheduling", "0/3 nodes are available")
    recorder.event(pod, "Normal", "Scheduled", "Successfully assigned ns/p to n1")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "v"}}
    recorder.event(node, "Normal", "NodeReady", "ready")
    task = asyncio.create_task(recorder.run())
    await recorder.flush()
    task.cancel()
    validator = SchemaFieldValidator()
    assert len(written) == 5  # the writers run one queue each: their order is not the events'
    assert max(b.get("count", 1) for b in written if b["reason"] == "FailedScheduling") == 3
    for body in written:
        check = validator.check(copy.deepcopy(body), EventStrategy.info, "Strict")
        assert check.value == body and not check.errors and not check.warnings and not check.strict_error
