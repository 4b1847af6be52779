"""Zone states and the eviction rate for each (ComputeZoneState, setLimiterInZone, handleDisruption).

A zone (topology.kubernetes.io/region + zone) is FullDisruption when none of its nodes is Ready,
PartialDisruption when more than 2 and at least unhealthyZoneThreshold (0.55) of them are not,
Normal otherwise. Normal and FullDisruption zones taint at --node-eviction-rate (0.1/s),
PartialDisruption ones at --secondary-node-eviction-rate (0.01/s) if larger than
--large-cluster-size-threshold (50) nodes, else not at all; when every zone is fully disrupted
(the control plane, not the nodes, is probably cut off) nothing is tainted and NoExecute taints
come off every node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nodeagent.cluster.controllers.common.meta import labels

State = Literal["Initial", "Normal", "PartialDisruption", "FullDisruption"]
EXCLUDE_DISRUPTION = "node.kubernetes.io/exclude-disruption"


@dataclass(frozen=True, slots=True)
class Rates:
    eviction: float = 0.1
    secondary: float = 0.01
    unhealthy_threshold: float = 0.55
    large_cluster: int = 50


def zone_key(node: Mapping[str, Any]) -> str:
    """nodetopology.GetZoneKey (with the deprecated failure-domain labels as fallback)."""
    lb = labels(node)
    region = lb.get("topology.kubernetes.io/region") or lb.get("failure-domain.beta.kubernetes.io/region") or ""
    zone = lb.get("topology.kubernetes.io/zone") or lb.get("failure-domain.beta.kubernetes.io/zone") or ""
    return "" if not region and not zone else f"{region}:\x00:{zone}"


def zone_state(ready: Sequence[str | None], threshold: float) -> tuple[int, State]:
    """ComputeZoneState over the nodes' Ready statuses (None: no condition)."""
    n_ready = sum(1 for r in ready if r == "True")
    not_ready = len(ready) - n_ready
    if n_ready == 0 and not_ready > 0:
        return not_ready, "FullDisruption"
    if not_ready > 2 and not_ready / len(ready) >= threshold:
        return not_ready, "PartialDisruption"
    return not_ready, "Normal"


def rate(state: State, zone_size: int, r: Rates) -> float:
    if state == "PartialDisruption":
        return r.secondary if zone_size > r.large_cluster else 0.0
    return r.eviction


@dataclass(frozen=True, slots=True)
class Disruption:
    states: dict[str, State]
    rates: dict[str, float]
    all_disrupted: bool  # stop everything and take NoExecute taints off every node
    exiting: bool  # leaving full disruption: reset every node's probe time to now


def handle(
    nodes: Sequence[Mapping[str, Any]],
    ready_of: Mapping[str, str | None],
    previous: Mapping[str, State],
    r: Rates = Rates(),
) -> Disruption:
    by_zone: dict[str, list[str | None]] = {}
    for n in nodes:
        if EXCLUDE_DISRUPTION in labels(n):
            continue
        by_zone.setdefault(zone_key(n), []).append(ready_of.get(str((n.get("metadata") or {}).get("name"))))
    states = {z: zone_state(v, r.unhealthy_threshold)[1] for z, v in by_zone.items()}
    all_now = bool(states) and all(s == "FullDisruption" for s in states.values())
    was = [previous[z] for z in states if z in previous]
    all_was = bool(was) and len(was) == len(states) and all(s == "FullDisruption" for s in was)
    if all_now and not all_was:
        return Disruption(dict.fromkeys(states, "FullDisruption"), dict.fromkeys(states, 0.0), True, False)
    if all_now:
        return Disruption(dict.fromkeys(states, "FullDisruption"), dict.fromkeys(states, 0.0), True, False)
    rates = {z: rate(s, len(by_zone[z]), r) for z, s in states.items()}
    return Disruption(states, rates, False, all_was)
