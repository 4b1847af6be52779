"""The NodeRestriction admission plugin over the registry: the pure rule (auth/noderestriction.py)
fed with what only the store knows (the requesting node's uid, for mirror pods); a refusal is
403 Forbidden with upstream's wording (404 when the object it hinges on is gone)."""

from __future__ import annotations

from typing import Any

import structlog

from nodeagent.cluster.auth.noderestriction import NodeRequest, node_restriction
from nodeagent.cluster.auth.user import UserInfo, node_identity
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.plugins import Operation
from nodeagent.cluster.registry.registry import Registry

log = structlog.get_logger(__name__)

_MIRROR_POD_CREATE = ("", "pods", "")  # (group, resource, subresource) whose rule needs the node's uid


class NodeRestrictionAdmission:
    """Only requests from nodes are looked at; everyone else passes untouched."""

    def __init__(self, registry: Registry) -> None:
        self.nodes = registry.resource("", "v1", "nodes")

    async def admit(self, operation: Operation, info: ResourceInfo, obj: dict[str, Any],
                    old: dict[str, Any] | None, *, subresource: str, ctx: Context) -> None:
        user = ctx.principal
        if not isinstance(user, UserInfo):
            return
        node = node_identity(user)
        if node is None:
            return
        raw = obj.get("metadata")
        meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
        name = str(meta.get("name") or "")
        node_uid = None
        if node and operation == "CREATE" and (info.group, info.plural, subresource) == _MIRROR_POD_CREATE:
            node_uid = await self._node_uid(node)
        req = NodeRequest(operation=operation, group=info.group, resource=info.plural, subresource=subresource,
                          namespace=str(meta.get("namespace") or ""),
                          name=name, obj=obj, old=old, node_uid=node_uid)
        refusal = node_restriction(user, req)
        if refusal is None:
            return
        log.info("node_restriction_refused", node=node, operation=operation, resource=info.plural,
                 subresource=subresource, name=name, reason=refusal.message)
        if refusal.not_found:
            raise errors.StatusError(404, "NotFound", refusal.message)
        raise errors.forbidden(info.plural, info.group, name, refusal.message)

    async def _node_uid(self, node: str) -> str | None:
        try:
            found = await self.nodes.get(None, node)
        except errors.StatusError as e:
            if e.code == 404:
                return None
            raise
        return str(found["metadata"].get("uid") or "")
