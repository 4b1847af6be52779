"""LimitRanger over the registry: the namespace's LimitRanges (read from the store's memory on
every pod create), the defaults and checks of cluster/admission/limitrange.py; a violation is
403 Forbidden with every message, as upstream."""

from __future__ import annotations

from typing import Any

from nodeagent.cluster.admission.limitrange import LimitItem, apply_defaults, parse_items, validate
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry


class LimitRanger:
    def __init__(self, registry: Registry) -> None:
        self.ranges = registry.resource("", "v1", "limitranges")

    async def items(self, namespace: str) -> list[LimitItem]:
        listed = await self.ranges.list(namespace, ListOptions())
        return [item for lr in listed.items for item in parse_items(lr)]

    @staticmethod
    def mutate(pod: dict[str, Any], items: list[LimitItem]) -> bool:
        return bool(items) and apply_defaults(pod, items)

    @staticmethod
    def validate(pod: dict[str, Any], items: list[LimitItem]) -> None:
        problems = validate(pod, items) if items else []
        if problems:
            why = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            raise errors.forbidden("pods", "", str(pod["metadata"].get("name") or ""), why)
