"""Which pods a ReplicaSet deletes first when scaling down (getPodsToDelete).

The rank of a pod is the number of active pods, among those of every ReplicaSet with the same
controlling owner (`related`), on the same node: doubled-up pods go first. Ordering is
ActivePodsWithRanks.Less (common.pods.ranked_cmp) with LogarithmicScaleDown at `now`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.controllers.common.pods import is_active, node_name, sort_ranked

Pod = Mapping[str, Any]


def ranks(pods: Sequence[Pod], related: Sequence[Pod]) -> list[int]:
    """getPodsRankedByRelatedPodsOnSameNode."""
    on_node = Counter(node_name(p) for p in related if is_active(p))
    return [on_node[node_name(p)] for p in pods]


def pods_to_delete(pods: Sequence[Pod], related: Sequence[Pod], diff: int, now: float | None) -> list[Pod]:
    """The first `diff` pods in deletion order (all of them, unsorted, when diff covers them all)."""
    if diff >= len(pods):
        return list(pods)
    return sort_ranked(pods, ranks(pods, related), now)[:diff]
