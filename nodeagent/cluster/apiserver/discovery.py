"""Discovery: /api, /apis (legacy and aggregated apidiscovery.k8s.io/v2), /api/v1, /apis/<g>[/<v>].

Built from the catalog once per catalog change (the documents are cached as bytes: kubectl asks
for them at every start without a warm cache). The aggregated form is served when the Accept
header asks for it, with the matching Content-Type (clients pick the parser by it).
"""

from __future__ import annotations

from typing import Any

import orjson

from nodeagent.cluster.apiserver.negotiation import DISCOVERY_V2, DISCOVERY_V2_BETA
from nodeagent.cluster.registry.catalog import Catalog, ResourceInfo


def _resource_entry(info: ResourceInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": info.plural, "singularName": info.singular, "namespaced": info.namespaced,
                             "kind": info.kind, "verbs": list(info.verbs)}
    if info.short_names:
        entry["shortNames"] = list(info.short_names)
    if info.categories:
        entry["categories"] = list(info.categories)
    return entry


def resource_list(catalog: Catalog, group: str, version: str) -> dict[str, Any] | None:
    infos = catalog.resources(group, version)
    if not infos:
        return None
    resources = []
    for info in infos:
        resources.append(_resource_entry(info))
        for sub in catalog.subresources(info):
            entry: dict[str, Any] = {"name": f"{info.plural}/{sub.name}", "singularName": "",
                                     "namespaced": info.namespaced, "kind": sub.kind, "verbs": list(sub.verbs)}
            if sub.group or sub.version:
                entry["group"], entry["version"] = sub.group, sub.version or version
            resources.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources}


def _groups(catalog: Catalog) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for group, version in catalog.group_versions():
        out.setdefault(group, []).append(version)
    return out


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def api_group(name: str, versions: list[str]) -> dict[str, Any]:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": vs, "preferredVersion": vs[0]}


def api_group_list(catalog: Catalog) -> dict[str, Any]:
    groups = [api_group(g, vs) for g, vs in _groups(catalog).items() if g]
    for g in groups:
        g.pop("kind")
        g.pop("apiVersion")
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _aggregated_resource(catalog: Catalog, info: ResourceInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {"resource": info.plural,
                             "responseKind": {"group": info.group, "version": info.version, "kind": info.kind},
                             "scope": "Namespaced" if info.namespaced else "Cluster",
                             "singularResource": info.singular, "verbs": list(info.verbs)}
    if info.short_names:
        entry["shortNames"] = list(info.short_names)
    if info.categories:
        entry["categories"] = list(info.categories)
    subs = catalog.subresources(info)
    if subs:
        entry["subresources"] = [{"subresource": s.name,
                                  "responseKind": {"group": s.group if s.group or s.version else info.group,
                                                   "version": s.version or info.version, "kind": s.kind},
                                  "verbs": list(s.verbs)} for s in subs]
    return entry


def aggregated(catalog: Catalog, *, legacy: bool, version: str = "v2") -> dict[str, Any]:
    """The APIGroupDiscoveryList of the core group (/api) or of the named groups (/apis)."""
    items = []
    for group, versions in _groups(catalog).items():
        if (group == "") != legacy:
            continue
        items.append({"metadata": {"name": group, "creationTimestamp": None},
                      "versions": [{"version": v, "freshness": "Current",
                                    "resources": [_aggregated_resource(catalog, i)
                                                  for i in catalog.resources(group, v)]} for v in versions]})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": f"apidiscovery.k8s.io/{version}", "metadata": {},
            "items": items}


class Discovery:
    """The discovery documents of one catalog, encoded once."""

    def __init__(self, catalog: Catalog, server_address: str = "127.0.0.1") -> None:
        self.catalog, self.server_address = catalog, server_address
        self._cache: dict[tuple[str, ...], bytes | None] = {}

    def _get(self, key: tuple[str, ...], build: Any) -> bytes | None:
        if key not in self._cache:
            doc = build()
            self._cache[key] = orjson.dumps(doc) if doc is not None else None
        return self._cache[key]

    def api(self, aggregated_version: str | None) -> tuple[bytes, str]:
        if aggregated_version:
            body = self._get(("api", aggregated_version),
                             lambda: aggregated(self.catalog, legacy=True, version=aggregated_version))
            return body or b"", DISCOVERY_V2 if aggregated_version == "v2" else DISCOVERY_V2_BETA
        return self._get(("api",), lambda: api_versions(self.server_address)) or b"", "application/json"

    def apis(self, aggregated_version: str | None) -> tuple[bytes, str]:
        if aggregated_version:
            body = self._get(("apis", aggregated_version),
                             lambda: aggregated(self.catalog, legacy=False, version=aggregated_version))
            return body or b"", DISCOVERY_V2 if aggregated_version == "v2" else DISCOVERY_V2_BETA
        return self._get(("apis",), lambda: api_group_list(self.catalog)) or b"", "application/json"

    def group(self, name: str) -> bytes | None:
        versions = _groups(self.catalog).get(name)
        return self._get(("group", name), lambda: api_group(name, versions)) if versions and name else None

    def resources(self, group: str, version: str) -> bytes | None:
        return self._get(("resources", group, version), lambda: resource_list(self.catalog, group, version))

    def invalidate(self) -> None:
        """The catalog changed (a kind or subresource was added)."""
        self._cache.clear()
