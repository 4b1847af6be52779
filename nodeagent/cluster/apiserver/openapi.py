"""/openapi/v3 from the schema room's documents, for the resources the catalog serves.

kubectl reads them for `explain`, for client-side validation (apply/create/replace default to
`--validate=strict`) and to learn that the server validates fields itself.
"""

from __future__ import annotations

from nodeagent.cluster.registry.catalog import Catalog
from nodeagent.cluster.schema.model import Gvk
from nodeagent.cluster.schema.openapi import OpenAPIDocuments, ServedResource, Subresource, openapi_documents


def served_resources(catalog: Catalog) -> list[ServedResource]:
    out = []
    for info in catalog:
        subs = tuple(Subresource(s.name, s.verbs, Gvk(s.group, s.version or info.version, s.kind)
                                 if (s.group, s.kind) != (info.group, info.kind) else None)
                     for s in catalog.subresources(info))
        out.append(ServedResource(info.group, info.version, info.kind, info.plural, info.namespaced, info.verbs, subs))
    return out


class CatalogOpenAPI:
    """The documents of a catalog, built on first use (and again if the catalog grows)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._docs: OpenAPIDocuments | None = None
        self._built_for: int = -1

    def documents(self) -> OpenAPIDocuments:
        size = sum(1 + len(self.catalog.subresources(i)) for i in self.catalog)
        if self._docs is None or size != self._built_for:
            self._docs, self._built_for = openapi_documents(served_resources(self.catalog)), size
        return self._docs
