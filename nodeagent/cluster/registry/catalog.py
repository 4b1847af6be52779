"""The resource catalog: every kind the API serves, with what discovery and routing need.

A ResourceInfo says where a kind lives (group, version, plural, scope), how clients name it
(singular, short names, categories), what it allows (verbs) and its subresources (with their
response kinds). Subresources are pluggable: later work (pods/log, exec, attach, eviction,
binding, nodes/proxy) adds a Subresource to a resource with `Catalog.add_subresource` and a handler
in the HTTP layer; discovery lists whatever is registered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class Subresource:
    name: str  # "status", "binding", "log"
    kind: str  # the response kind: "Pod", "Binding", "Eviction", "Scale"
    verbs: tuple[str, ...]
    group: str = ""  # the response kind's group and version when they differ from the parent's
    version: str = ""


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    group: str  # "" for the legacy core group
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    verbs: tuple[str, ...] = ALL_VERBS
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = field(default_factory=tuple)
    storage_resource: str = ""  # the key's resource segment when storage is shared (events)
    storage_group: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> tuple[str, str]:
        return self.group, self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def qualified(self) -> str:
        """The GroupResource string used in messages: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def key_prefix(self) -> str:
        """`/registry/<group|core>/<resource>/` (namespaced keys go on with `<namespace>/<name>`)."""
        group = self.group if self.storage_group is None else self.storage_group
        return f"/registry/{group or 'core'}/{self.storage_resource or self.plural}/"

    def key(self, namespace: str | None, name: str) -> str:
        return f"{self.key_prefix}{namespace}/{name}" if self.namespaced else f"{self.key_prefix}{name}"

    def allows(self, verb: str) -> bool:
        return verb in self.verbs


class Catalog:
    """Resources by group/version/plural, in registration order (discovery keeps it)."""

    def __init__(self) -> None:
        self._by_path: dict[tuple[str, str, str], ResourceInfo] = {}
        self._extra: dict[tuple[str, str, str], dict[str, Subresource]] = {}

    def add(self, info: ResourceInfo) -> None:
        key = (info.group, info.version, info.plural)
        if key in self._by_path:
            raise ValueError(f"resource {info.qualified} {info.version} registered twice")
        self._by_path[key] = info

    def add_subresource(self, info: ResourceInfo, sub: Subresource) -> None:
        """Register a subresource of a known resource (replacing one of the same name)."""
        self._extra.setdefault((info.group, info.version, info.plural), {})[sub.name] = sub

    def subresources(self, info: ResourceInfo) -> list[Subresource]:
        """The resource's own subresources, then those added by later work."""
        extra = self._extra.get((info.group, info.version, info.plural), {})
        return [s for s in info.subresources if s.name not in extra] + list(extra.values())

    def subresource(self, info: ResourceInfo, name: str) -> Subresource | None:
        return next((s for s in self.subresources(info) if s.name == name), None)

    def get(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        return self._by_path.get((group, version, plural))

    def __iter__(self) -> Iterator[ResourceInfo]:
        return iter(self._by_path.values())

    def group_versions(self) -> list[tuple[str, str]]:
        """(group, version) pairs in registration order, the core group first."""
        seen: dict[tuple[str, str], None] = {}
        for info in self._by_path.values():
            seen.setdefault(info.group_version, None)
        return sorted(seen, key=lambda gv: gv[0] != "")

    def resources(self, group: str, version: str) -> list[ResourceInfo]:
        return [i for i in self._by_path.values() if i.group_version == (group, version)]
