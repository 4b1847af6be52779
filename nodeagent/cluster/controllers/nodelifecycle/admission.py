"""The DefaultTolerationSeconds admission plugin: on pod create, add tolerations of
node.kubernetes.io/not-ready and /unreachable (Exists, NoExecute, 300 s by default:
--default-not-ready-toleration-seconds, --default-unreachable-toleration-seconds) unless the pod
already tolerates that key with NoExecute (an empty key or effect counts)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.taints import NOT_READY, UNREACHABLE

DEFAULT_SECONDS = 300


def default_tolerations(
    pod: Mapping[str, Any], not_ready: int = DEFAULT_SECONDS, unreachable: int = DEFAULT_SECONDS
) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    sp = out.setdefault("spec", {})
    tols = list(sp.get("tolerations") or [])

    def tolerates(key: str) -> bool:
        return any((t.get("key") in (key, "", None)) and (t.get("effect") in ("NoExecute", "", None)) for t in tols)

    has_nr, has_ur = tolerates(NOT_READY), tolerates(UNREACHABLE)
    if not has_nr:
        tols.append({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": not_ready})
    if not has_ur:
        tols.append({"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": unreachable})
    if tols:
        sp["tolerations"] = tols
    return out
