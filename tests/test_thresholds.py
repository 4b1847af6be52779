"""Eviction threshold parsing, with vectors from the kubelet's TestParseThresholdConfig
(pkg/kubelet/eviction/helpers_test.go) and GetThresholdQuantity (eviction/api/types.go)."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from nodeagent.agent.config.thresholds import (
    DEFAULT_EVICTION_HARD,
    Threshold,
    format_percentage,
    hard_thresholds,
    parse_thresholds,
)
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.quantity import parse_quantity


def f32(value: float) -> float:
    """The kubelet keeps percentages as float32."""
    return struct.unpack("f", struct.pack("f", value))[0]


def q(text: str):
    return parse_quantity(text)


def key(t: Threshold) -> tuple:
    return (t.signal, t.hard, t.grace_period, t.quantity, t.percentage, t.min_reclaim, t.min_reclaim_percentage)


def same(actual: list[Threshold], expected: list[Threshold]) -> bool:
    """Order-free comparison, as the kubelet's thresholdsEqual."""
    return sorted(map(key, actual), key=repr) == sorted(map(key, expected), key=repr)


T = Threshold
KUBELET_VALID_CASES = {
    "no values": ({}, {}, {}, {}, [], []),
    "all memory eviction values": (
        {"memory.available": "150Mi"},
        {"memory.available": "300Mi"},
        {"memory.available": "30s"},
        {"memory.available": "0"},
        ["pods"],
        [
            T("allocatableMemory.available", quantity=q("150Mi"), min_reclaim=q("0")),
            T("memory.available", quantity=q("150Mi"), min_reclaim=q("0")),
            T("memory.available", quantity=q("300Mi"), grace_period=30.0, min_reclaim=q("0"), hard=False),
        ],
    ),
    "all memory eviction values in percentages": (
        {"memory.available": "10%"},
        {"memory.available": "30%"},
        {"memory.available": "30s"},
        {"memory.available": "5%"},
        [],
        [
            T("memory.available", percentage=f32(0.1), min_reclaim_percentage=f32(0.05)),
            T("memory.available", percentage=f32(0.3), grace_period=30.0, min_reclaim_percentage=f32(0.05), hard=False),
        ],
    ),
    "disk eviction values": (
        {"imagefs.available": "150Mi", "nodefs.available": "100Mi"},
        {"imagefs.available": "300Mi", "nodefs.available": "200Mi"},
        {"imagefs.available": "30s", "nodefs.available": "30s"},
        {"imagefs.available": "2Gi", "nodefs.available": "1Gi"},
        [],
        [
            T("imagefs.available", quantity=q("150Mi"), min_reclaim=q("2Gi")),
            T("nodefs.available", quantity=q("100Mi"), min_reclaim=q("1Gi")),
            T("imagefs.available", quantity=q("300Mi"), grace_period=30.0, min_reclaim=q("2Gi"), hard=False),
            T("nodefs.available", quantity=q("200Mi"), grace_period=30.0, min_reclaim=q("1Gi"), hard=False),
        ],
    ),
    "disk eviction values in percentages": (
        {"imagefs.available": "15%", "nodefs.available": "10.5%"},
        {"imagefs.available": "30%", "nodefs.available": "20.5%"},
        {"imagefs.available": "30s", "nodefs.available": "30s"},
        {"imagefs.available": "10%", "nodefs.available": "5%"},
        [],
        [
            T("imagefs.available", percentage=f32(0.15), min_reclaim_percentage=f32(0.1)),
            T("nodefs.available", percentage=f32(0.105), min_reclaim_percentage=f32(0.05)),
            T("imagefs.available", percentage=f32(0.3), grace_period=30.0, min_reclaim_percentage=f32(0.1), hard=False),
            T("nodefs.available", percentage=f32(0.205), grace_period=30.0, min_reclaim_percentage=f32(0.05), hard=False),
        ],
    ),
    "inode eviction values": (
        {"imagefs.inodesFree": "150Mi", "nodefs.inodesFree": "100Mi"},
        {"imagefs.inodesFree": "300Mi", "nodefs.inodesFree": "200Mi"},
        {"imagefs.inodesFree": "30s", "nodefs.inodesFree": "30s"},
        {"imagefs.inodesFree": "2Gi", "nodefs.inodesFree": "1Gi"},
        [],
        [
            T("imagefs.inodesFree", quantity=q("150Mi"), min_reclaim=q("2Gi")),
            T("nodefs.inodesFree", quantity=q("100Mi"), min_reclaim=q("1Gi")),
            T("imagefs.inodesFree", quantity=q("300Mi"), grace_period=30.0, min_reclaim=q("2Gi"), hard=False),
            T("nodefs.inodesFree", quantity=q("200Mi"), grace_period=30.0, min_reclaim=q("1Gi"), hard=False),
        ],
    ),
    "disable via 0%": ({"memory.available": "0%"}, {"memory.available": "0%"}, {}, {}, [], []),
    "disable via 100%": ({"memory.available": "100%"}, {"memory.available": "100%"}, {}, {}, [], []),
}


@pytest.mark.parametrize("name", list(KUBELET_VALID_CASES))
def test_kubelet_valid_vectors(name: str) -> None:
    hard, soft, grace, reclaim, enforce, expected = KUBELET_VALID_CASES[name]
    actual = parse_thresholds(hard, soft, grace, reclaim, enforce_node_allocatable=enforce)
    assert same(actual, expected), actual


KUBELET_INVALID_CASES = {
    "invalid-signal": ({"mem.available": "150Mi"}, {}, {}, {}, "evictionHard.mem.available"),
    "hard-signal-negative": ({"memory.available": "-150Mi"}, {}, {}, {}, "evictionHard.memory.available"),
    "hard-signal-negative-percentage": ({"memory.available": "-15%"}, {}, {}, {}, "evictionHard.memory.available"),
    "hard-signal-percentage-greater-than-100%": ({"memory.available": "150%"}, {}, {}, {}, "evictionHard.memory.available"),
    "soft-signal-negative": ({}, {"memory.available": "-150Mi"}, {}, {}, "evictionSoft.memory.available"),
    "valid-and-invalid-signal": (
        {"memory.available": "150Mi", "invalid.foo": "150Mi"}, {}, {}, {}, "evictionHard.invalid.foo"),
    "soft-no-grace-period": ({}, {"memory.available": "150Mi"}, {}, {}, "evictionSoftGracePeriod.memory.available"),
    "soft-negative-grace-period": (
        {}, {"memory.available": "150Mi"}, {"memory.available": "-30s"}, {}, "evictionSoftGracePeriod.memory.available"),
    "negative-reclaim": ({}, {}, {}, {"memory.available": "-300Mi"}, "evictionMinimumReclaim.memory.available"),
    # beyond the kubelet's table, same rules
    "zero quantity": ({"memory.available": "0"}, {}, {}, {}, "evictionHard.memory.available"),
    "garbage quantity": ({"memory.available": "lots"}, {}, {}, {}, "evictionHard.memory.available"),
    "garbage percentage": ({"nodefs.available": "ten%"}, {}, {}, {}, "evictionHard.nodefs.available"),
    "bad grace duration": ({}, {"memory.available": "1Gi"}, {"memory.available": "30"}, {}, "evictionSoftGracePeriod.memory.available"),
    "grace for unknown signal": ({}, {}, {"memory.avail": "30s"}, {}, "evictionSoftGracePeriod.memory.avail"),
    "zero percent reclaim": ({}, {}, {}, {"memory.available": "0%"}, "evictionMinimumReclaim.memory.available"),
    "over 100% reclaim": ({}, {}, {}, {"memory.available": "101%"}, "evictionMinimumReclaim.memory.available"),
    "non-string value": ({"memory.available": 5}, {}, {}, {}, "evictionHard.memory.available"),
}


@pytest.mark.parametrize("name", list(KUBELET_INVALID_CASES))
def test_kubelet_invalid_vectors_name_the_key(name: str) -> None:
    hard, soft, grace, reclaim, path = KUBELET_INVALID_CASES[name]
    with pytest.raises(ValidationErrors) as info:
        parse_thresholds(hard, soft, grace, reclaim)
    assert [e.path for e in info.value.errors] == [path]
    assert str(info.value).startswith(path + ": ")


def test_all_errors_reported_at_once() -> None:
    with pytest.raises(ValidationErrors) as info:
        parse_thresholds({"memory.available": "-1"}, {"nodefs.available": "1Gi"}, {}, {"pid.available": "-5"})
    assert {e.path for e in info.value.errors} == {
        "evictionHard.memory.available",
        "evictionSoftGracePeriod.nodefs.available",
        "evictionMinimumReclaim.pid.available",
    }


def test_soft_threshold_error_message_names_both_keys() -> None:
    with pytest.raises(ValidationErrors) as info:
        parse_thresholds({}, {"memory.available": "150Mi"}, {}, {})
    assert "evictionSoft.memory.available" in info.value.errors[0].message


def test_grace_period_without_soft_threshold_is_accepted_like_the_kubelet() -> None:
    assert parse_thresholds({}, {}, {"memory.available": "30s"}, {}) == []


def test_disabled_soft_threshold_needs_no_grace_period() -> None:
    assert parse_thresholds({}, {"nodefs.available": "0%"}, {}, {}) == []


def test_zero_and_hundred_written_differently_also_disable() -> None:
    assert parse_thresholds({"memory.available": "0.0%", "nodefs.available": "100.00%"}, {}, {}, {}) == []


def test_containerfs_signals_accepted_but_not_effective() -> None:
    result = parse_thresholds({"containerfs.available": "10%", "memory.available": "1Gi"}, {}, {}, {})
    assert [t.signal for t in result] == ["memory.available"]


def test_order_hard_then_soft_then_allocatable_copy() -> None:
    result = parse_thresholds(
        {"memory.available": "100Mi", "nodefs.available": "10%"},
        {"memory.available": "1Gi"},
        {"memory.available": "1m30s"},
        {},
        enforce_node_allocatable=["pods"],
    )
    assert [(t.signal, t.hard) for t in result] == [
        ("memory.available", True),
        ("nodefs.available", True),
        ("memory.available", False),
        ("allocatableMemory.available", True),
    ]
    assert result[2].grace_period == 90.0


def test_no_allocatable_copy_without_pods_enforcement() -> None:
    result = parse_thresholds({"memory.available": "100Mi"}, {}, {}, {}, enforce_node_allocatable=["none"])
    assert [t.signal for t in result] == ["memory.available"]


def test_defaults_parse_to_five_hard_thresholds() -> None:
    result = parse_thresholds(DEFAULT_EVICTION_HARD, {}, {}, {})
    assert [t.signal for t in result] == list(DEFAULT_EVICTION_HARD)
    assert all(t.hard and t.grace_period == 0 and t.operator == "LessThan" for t in result)
    assert hard_thresholds(result) == result


# GetThresholdQuantity: int64(float64(capacity) * float64(float32 percentage))
@pytest.mark.parametrize(
    ("threshold", "capacity", "expected"),
    [
        (T("memory.available", quantity=q("100Mi")), 10 * 2**30, 104857600),
        (T("memory.available", percentage=f32(0.05)), 10 * 2**30, 536870920),  # float32 0.05 > 0.05
        (T("nodefs.available", percentage=f32(0.1)), 100 * 2**30, 10737418400),
        (T("nodefs.inodesFree", percentage=f32(0.05)), 1000, 50),
        (T("pid.available", percentage=f32(0.333)), 10, 3),  # truncated, not rounded
    ],
)
def test_value_for(threshold: Threshold, capacity: int, expected: int) -> None:
    assert threshold.value_for(capacity) == expected


def test_min_reclaim_for() -> None:
    assert T("memory.available", quantity=q("1Gi"), min_reclaim=q("500Mi")).min_reclaim_for(10**12) == 500 * 2**20
    assert T("nodefs.available", percentage=f32(0.1), min_reclaim_percentage=f32(0.05)).min_reclaim_for(1000) == 50
    assert T("memory.available", quantity=q("1Gi")).min_reclaim_for(10**12) == 0


@pytest.mark.parametrize("text", ["10%", "10.5%", "5%", "15%", "0.5%", "99.9%", "33.333%"])
def test_percentage_text_round_trips(text: str) -> None:
    (threshold,) = parse_thresholds({"nodefs.available": text}, {}, {}, {})
    assert format_percentage(threshold.percentage) == text
    assert threshold.value_text() == text


def test_threshold_is_frozen() -> None:
    threshold = T("memory.available", quantity=q("1Gi"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        threshold.signal = "nodefs.available"  # type: ignore[misc]
