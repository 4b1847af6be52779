"""The DefaultTolerationSeconds admission plugin, pure (plugin/pkg/admission/defaulttolerationseconds).

A pod created without a NoExecute toleration of `node.kubernetes.io/not-ready` (or of every key)
gets one for 300 s, and the same for `node.kubernetes.io/unreachable`: a pod on a node that goes
NotReady or unreachable is evicted after five minutes rather than at once.
"""

from __future__ import annotations

from typing import Any

from nodeagent.core.wellknown import TAINT_NOT_READY, TAINT_UNREACHABLE

DEFAULT_TOLERATION_SECONDS = 300  # --default-not-ready-toleration-seconds, --default-unreachable-...
NO_EXECUTE = "NoExecute"


def _tolerates(tolerations: list[Any], key: str) -> bool:
    return any(isinstance(t, dict) and (t.get("key") == key or not t.get("key"))
               and (t.get("effect") == NO_EXECUTE or not t.get("effect")) for t in tolerations)


def add_default_tolerations(pod: dict[str, Any], seconds: int = DEFAULT_TOLERATION_SECONDS) -> bool:
    """Add the two tolerations a pod lacks, in place; whether any was added."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    tolerations = spec.get("tolerations") or []
    if not isinstance(tolerations, list):
        return False
    added = [{"key": key, "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": seconds}
             for key in (TAINT_NOT_READY, TAINT_UNREACHABLE) if not _tolerates(tolerations, key)]
    if added:
        spec["tolerations"] = [*tolerations, *added]
    return bool(added)
