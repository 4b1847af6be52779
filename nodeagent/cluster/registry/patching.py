"""The registry's Patcher and FieldManager, backed by the patch room (cluster/patch/).

JSON patch, merge patch, strategic merge patch (merge keys and strategies from the kind's
schema) and server-side apply; managedFields for every write. A write through the main resource
leaves `status` out of field ownership when the kind has a status subresource (its strategy resets
it), and a status write leaves `spec` out, as kube-apiserver's field manager does.
"""

from __future__ import annotations

from typing import Any

from nodeagent.cluster.patch import apply as ssa
from nodeagent.cluster.patch.errors import BAD_REQUEST
from nodeagent.cluster.patch.errors import PatchError as EngineError
from nodeagent.cluster.patch.jsonpatch import json_patch
from nodeagent.cluster.patch.merge import merge_patch
from nodeagent.cluster.patch.strategic import strategic_merge_patch
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.plugins import ApplyConflict, PatchError, PatchType
from nodeagent.cluster.schema.definitions import Definitions, definitions
from nodeagent.cluster.schema.model import Gvk, Schema
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.core.errors import FieldError
from nodeagent.core.timefmt import rfc3339


class _Schemas:
    def __init__(self, defs: Definitions | None) -> None:
        self.defs = defs or definitions()
        self._cache: dict[tuple[str, str, str], Schema | None] = {}

    def of(self, info: ResourceInfo) -> Schema | None:
        key = (info.group, info.version, info.kind)
        if key not in self._cache:
            self._cache[key] = self.defs.by_gvk(Gvk(*key))
        return self._cache[key]


def _ignored(has_status: bool, subresource: str) -> tuple[str, ...]:
    if subresource == "status":
        return ("spec",)
    return ("status",) if has_status else ()


def _has_status(info: ResourceInfo) -> bool:
    return any(s.name == "status" for s in info.subresources)


class RegistryPatcher:
    def __init__(self, clock: Clock | None = None, defs: Definitions | None = None) -> None:
        self.clock = clock or SystemClock()
        self.schemas = _Schemas(defs)

    def patch(self, patch_type: PatchType, current: dict[str, Any] | None, patch: Any, info: ResourceInfo, *,
              field_manager: str, force: bool, subresource: str = "") -> dict[str, Any]:
        try:
            if patch_type == "json":
                out: Any = json_patch(current, patch)
            elif patch_type == "merge":
                out = merge_patch(current, patch)
            elif patch_type == "strategic":
                out = strategic_merge_patch(current, patch, self.schemas.of(info))
            else:
                if not isinstance(patch, dict):
                    raise PatchError("an apply configuration must be a JSON object", malformed=True)
                out = ssa.apply(current, patch, self.schemas.of(info), manager=field_manager,
                                api_version=info.api_version, now=rfc3339(self.clock.wall()), force=force,
                                subresource=subresource, ignored=_ignored(_has_status(info), subresource))
        except ssa.ApplyConflict as e:
            raise ApplyConflict(e.message, e.causes()) from None
        except EngineError as e:
            raise PatchError(e.message, malformed=e.code == BAD_REQUEST) from None
        except FieldError as e:
            raise PatchError(str(e)) from None
        if not isinstance(out, dict):
            raise PatchError(f"the patched document is not an object of kind {info.kind}")
        return out


class RegistryFieldManager:
    def __init__(self, clock: Clock | None = None, defs: Definitions | None = None) -> None:
        self.clock = clock or SystemClock()
        self.schemas = _Schemas(defs)

    def update(self, old: dict[str, Any] | None, new: dict[str, Any], info: ResourceInfo, *, manager: str,
               subresource: str) -> dict[str, Any]:
        return ssa.update(old, new, self.schemas.of(info), manager=manager, api_version=info.api_version,
                          now=rfc3339(self.clock.wall()), subresource=subresource,
                          ignored=_ignored(_has_status(info), subresource))
