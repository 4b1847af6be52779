"""A shared informer's cache and handlers (client-go's SharedIndexInformer, in process).

The control plane feeds `apply(event_type, obj)` from a list+watch of one resource (its Feed:
list, watch, relist when the watch ends); the cache keeps the objects by `namespace/name` with a
namespace index, an index of dependents by their controller's uid and one of pods by spec.nodeName
(upstream's node lifecycle controller indexes pods by node too), and calls the handlers of
every controller that registered. Objects are shared read-only: a controller copies before it
changes one (the pure cores work on copies).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.controllers.common.meta import controller_ref, key, namespace, spec

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Handlers:
    on_add: Callable[[Obj], None] | None = None
    on_update: Callable[[Obj, Obj], None] | None = None
    on_delete: Callable[[Obj], None] | None = None


class Informer:
    def __init__(self, api_version: str, kind: str) -> None:
        self.api_version, self.kind = api_version, kind
        self._objects: dict[str, Obj] = {}
        self._by_namespace: dict[str, dict[str, Obj]] = {}
        self._by_controller: dict[str, dict[str, Obj]] = {}
        self._by_node: dict[str, dict[str, Obj]] = {}
        self._handlers: list[Handlers] = []

    def add_handlers(self, handlers: Handlers) -> None:
        self._handlers.append(handlers)

    # ---- fed by the watch ----
    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        if not obj.get("apiVersion"):  # served objects carry them; the graph needs them
            obj = {**obj, "apiVersion": self.api_version, "kind": self.kind}
        k = key(obj)
        old = self._objects.get(k)
        if old is not None:
            self._unindex(k, old)
        if event_type == "DELETED":
            self._objects.pop(k, None)
            for h in self._handlers:
                if h.on_delete is not None:
                    h.on_delete(obj)
            return
        self._objects[k] = obj
        self._index(k, obj)
        for h in self._handlers:
            if old is None:
                if h.on_add is not None:
                    h.on_add(obj)
            elif h.on_update is not None:
                h.on_update(old, obj)

    def _index(self, k: str, obj: Obj) -> None:
        self._by_namespace.setdefault(namespace(obj), {})[k] = obj
        ref = controller_ref(obj)
        if ref is not None:
            self._by_controller.setdefault(str(ref.get("uid") or ""), {})[k] = obj
        node = _node_name(obj)
        if node:
            self._by_node.setdefault(node, {})[k] = obj

    def _unindex(self, k: str, obj: Obj) -> None:
        ns = self._by_namespace.get(namespace(obj))
        if ns is not None:
            ns.pop(k, None)
            if not ns:
                del self._by_namespace[namespace(obj)]
        ref = controller_ref(obj)
        if ref is not None:
            owned = self._by_controller.get(str(ref.get("uid") or ""))
            if owned is not None:
                owned.pop(k, None)
                if not owned:
                    del self._by_controller[str(ref.get("uid") or "")]
        node = _node_name(obj)
        on_node = self._by_node.get(node) if node else None
        if on_node is not None:
            on_node.pop(k, None)
            if not on_node:
                del self._by_node[node]

    # ---- reads ----
    def get(self, k: str) -> Obj | None:
        return self._objects.get(k)

    def items(self) -> list[Obj]:
        return list(self._objects.values())

    def in_namespace(self, ns: str) -> list[Obj]:
        return list((self._by_namespace.get(ns) or {}).values())

    def controlled_by(self, owner_uid: str) -> list[Obj]:
        return list((self._by_controller.get(owner_uid) or {}).values())

    def on_node(self, node_name: str) -> list[Obj]:
        """The objects whose spec.nodeName is `node_name` (pods bound to that node)."""
        return list((self._by_node.get(node_name) or {}).values())

    def object_keys(self) -> list[str]:
        return list(self._objects)

    def __len__(self) -> int:
        return len(self._objects)


def _node_name(obj: Obj) -> str:
    node = spec(obj).get("nodeName")
    return node if isinstance(node, str) else ""
