"""PriorityClass parsing, validation, the single global default, and resolving a pod's priority."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.admission.priority import (
    PriorityClass,
    PriorityClassRegistry,
    ResolvedPriority,
    parse_priority_class,
    validate_priority_class,
)
from nodeagent.core.errors import FieldError, ValidationErrors


def manifest(**kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": "high"}, "value": 1000}
    out.update(kw)
    return out


def test_parse_a_full_priority_class() -> None:
    pc = parse_priority_class(manifest(globalDefault=True, preemptionPolicy="Never",
                                       description="batch"))
    assert pc == PriorityClass("high", 1000, True, "Never", "batch")
    assert parse_priority_class(pc.to_dict()) == pc


@pytest.mark.parametrize("changes, message", [
    ({"value": None}, "value: Required value"),
    ({"value": "10"}, "value: Invalid value: \"10\": must be a 32-bit integer"),
    ({"value": 2**31}, "must be a 32-bit integer"),
    ({"value": 1_000_000_001},
     "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"),
    ({"metadata": {"name": "system-mine"}},
     "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system "
     "use only. error: system-mine is not a known system priority class"),
    ({"metadata": {"name": "system-node-critical"}},
     "error: value of system-node-critical PriorityClass must be 2000001000"),
    ({"preemptionPolicy": "Sometimes"}, "preemptionPolicy: Unsupported value: 'Sometimes'"),
    ({"metadata": {"name": "Bad_Name"}}, "metadata.name: Invalid value: \"Bad_Name\""),
    ({"weight": 3}, "weight: unknown field"),
    ({"kind": "Pod"}, "kind: Unsupported value: 'Pod'"),
])
def test_invalid_priority_classes_name_the_field(changes: dict[str, Any], message: str) -> None:
    m = manifest(**changes)
    if m["value"] is None:
        del m["value"]
    with pytest.raises(ValidationErrors) as exc:
        parse_priority_class(m)
    assert message in str(exc.value)


def test_negative_user_values_and_the_ceiling_are_fine() -> None:
    assert validate_priority_class(PriorityClass("low", -2**31)) == []
    assert validate_priority_class(PriorityClass("top", 1_000_000_000)) == []
    assert validate_priority_class(PriorityClass("system-cluster-critical", 2_000_000_000)) == []


def test_builtin_classes_and_resolution() -> None:
    reg = PriorityClassRegistry([PriorityClass("high", 1000, preemption_policy="Never")])
    assert reg.resolve("system-cluster-critical").value == 2_000_000_000
    assert reg.resolve("system-node-critical").value == 2_000_001_000
    assert reg.resolve("high") == ResolvedPriority(1000, "high", "Never")
    assert reg.resolve(None) == ResolvedPriority(0, None, "PreemptLowerPriority")
    with pytest.raises(FieldError) as exc:
        reg.resolve("missing")
    assert str(exc.value) == ("spec.priorityClassName: Forbidden: no PriorityClass with name "
                              "missing was found")


def test_the_global_default_applies_to_pods_without_a_class() -> None:
    reg = PriorityClassRegistry()
    reg.add(PriorityClass("normal", 100, global_default=True))
    assert reg.resolve("") == ResolvedPriority(100, "normal", "PreemptLowerPriority")
    assert reg.resolve("system-node-critical").value == 2_000_001_000


def test_only_one_global_default() -> None:
    reg = PriorityClassRegistry([PriorityClass("first", 10, global_default=True)])
    with pytest.raises(FieldError) as exc:
        reg.add(PriorityClass("second", 20, global_default=True))
    assert str(exc.value) == ("globalDefault: Forbidden: PriorityClass first is already marked as "
                              "default. Only one default can exist")
    reg.add(PriorityClass("first", 10, global_default=True, description="again"))  # same class
    reg.add(PriorityClass("first", 10, global_default=False))
    reg.add(PriorityClass("second", 20, global_default=True))
    assert reg.default() == PriorityClass("second", 20, True)


def test_updates_keep_value_and_policy_and_system_classes_stay() -> None:
    reg = PriorityClassRegistry([PriorityClass("high", 1000)])
    with pytest.raises(FieldError, match="value: Forbidden: may not be changed"):
        reg.add(PriorityClass("high", 2000))
    with pytest.raises(FieldError, match="preemptionPolicy"):
        reg.add(PriorityClass("high", 1000, preemption_policy="Never"))
    with pytest.raises(FieldError, match="system priority class"):
        reg.remove("system-node-critical")
    with pytest.raises(FieldError, match="system priority class"):
        reg.add(PriorityClass("system-node-critical", 2_000_001_000, description="mine"))
    assert reg.remove("high").value == 1000
    assert [pc.name for pc in reg] == ["system-cluster-critical", "system-node-critical"]
