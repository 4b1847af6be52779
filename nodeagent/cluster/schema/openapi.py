"""OpenAPI v3 documents for the served resources: the `/openapi/v3` index and one document per
group-version, shaped like kube-apiserver's so kubectl uses them unchanged.

What kubectl reads from them: `kubectl explain` finds a kind by the `x-kubernetes-group-version-kind`
of a `components.schemas` entry and shows descriptions; apply/create/replace decide that the server
validates fields when the PATCH operation of the kind's path has that GVK and a `fieldValidation`
query parameter (then they send `fieldValidation=Strict`); client-side apply takes merge keys and
strategies from `components.schemas` when the PATCH accepts `application/strategic-merge-patch+json`.

Schemas come from the loaded definitions: the transitive closure of the served kinds (with their
List kinds, their subresources' kinds and the meta types the paths use), `$ref` rewritten to
`#/components/schemas/<name>` (a reference with its own description or extensions is wrapped in
`allOf`, as upstream does, since OpenAPI 3.0 ignores siblings of `$ref`), JSON-schema nullability
(`type: [T, "null"]`) turned into `type: T, nullable: true`, int-or-string as
`type: string, format: int-or-string` and quantities as `type: string`, as upstream publishes them.

`openapi_documents(resources)` builds every document once per set of served resources and caches
the serialized bytes with their hash (the `?hash=` of the index and the ETag): upstream's
uppercase hex SHA-512 of the document.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.cluster.schema.definitions import Definitions, definitions
from nodeagent.cluster.schema.loader import KUBERNETES_VERSION
from nodeagent.cluster.schema.model import Gvk, Schema, Shape

REF = "#/components/schemas/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
PATCH_CONTENT_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)
OBJECT_CONTENT_TYPES = ("application/json", "application/yaml")
META_TYPES = ("DeleteOptions", "Status", "Patch", "WatchEvent", "APIResourceList")
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True, slots=True)
class Subresource:
    """A subresource (`status`, `scale`, `binding`, `eviction`, `log`, `exec` ...). `kind` is the
    kind it reads and writes when not the resource's own (autoscaling/v1 Scale, policy/v1
    Eviction); `connect` marks streaming subresources (exec, attach, portforward, proxy); `log`
    answers text."""

    name: str
    verbs: tuple[str, ...]
    kind: Gvk | None = None
    connect: bool = False


@dataclass(frozen=True, slots=True)
class ServedResource:
    """One resource the API serves, as the API server's resource catalog describes it."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: tuple[str, ...] = VERBS
    subresources: tuple[Subresource, ...] = field(default=())

    @property
    def gvk(self) -> Gvk:
        return Gvk(self.group, self.version, self.kind)

    @property
    def group_version_path(self) -> str:
        """`api/v1` or `apis/<group>/<version>`: the key of the /openapi/v3 index."""
        return f"apis/{self.group}/{self.version}" if self.group else f"api/{self.version}"


@dataclass(frozen=True, slots=True)
class OpenAPIDocument:
    body: bytes
    hash: str

    @property
    def etag(self) -> str:
        return f'"{self.hash}"'


@dataclass(frozen=True, slots=True)
class OpenAPIDocuments:
    """The index and the documents by group-version path (`api/v1`, `apis/apps/v1`)."""

    index: OpenAPIDocument
    documents: Mapping[str, OpenAPIDocument]

    def get(self, group_version_path: str) -> OpenAPIDocument | None:
        return self.documents.get(group_version_path.strip("/"))


class OpenAPIError(ValueError):
    """A served resource the definitions do not describe (a catalog error, found at start)."""


def openapi_documents(resources: Iterable[ServedResource]) -> OpenAPIDocuments:
    """The documents for these resources, from the Kubernetes definitions; built once per set."""
    return _cached(tuple(sorted(set(resources), key=_sort_key)))


@functools.lru_cache(maxsize=4)
def _cached(resources: tuple[ServedResource, ...]) -> OpenAPIDocuments:
    return build_documents(resources, definitions())


def _sort_key(r: ServedResource) -> tuple[str, str, str]:
    return (r.group, r.version, r.plural)


def _digest(body: bytes) -> str:
    return hashlib.sha512(body).hexdigest().upper()


def _serialize(doc: Mapping[str, Any]) -> OpenAPIDocument:
    body = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return OpenAPIDocument(body, _digest(body))


def build_documents(resources: Sequence[ServedResource], defs: Definitions) -> OpenAPIDocuments:
    """Build (uncached) the index and every group-version document."""
    by_gv: dict[str, list[ServedResource]] = {}
    for r in resources:
        by_gv.setdefault(r.group_version_path, []).append(r)
    documents = {gv: _serialize(_document(gv, rs, defs)) for gv, rs in sorted(by_gv.items())}
    index = {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={doc.hash}"} for gv, doc in documents.items()}}
    return OpenAPIDocuments(_serialize(index), documents)


# ---- components.schemas ----


def _definition(defs: Definitions, gvk: Gvk) -> Schema:
    node = defs.by_gvk(gvk)
    if node is None or node.name is None:
        raise OpenAPIError(f"no schema for {gvk}")
    return node


def _list_kind(defs: Definitions, gvk: Gvk) -> Schema | None:
    return defs.by_gvk(Gvk(gvk.group, gvk.version, gvk.kind + "List"))


def _schemas(roots: Sequence[Schema], defs: Definitions) -> dict[str, Any]:
    return {name: schema_json(node) for name in defs.closure(roots) if (node := defs.by_ref(name)) is not None}


def schema_json(node: Schema) -> dict[str, Any]:
    """One node as an OpenAPI 3.0 schema."""
    if node.ref is not None:
        ref = {"$ref": REF + (node.ref.name or "")}
        extra = _annotations(node)
        if node.own_format:
            extra["format"] = node.own_format
        return {"allOf": [ref], **extra} if extra else ref
    out: dict[str, Any] = {}
    shape = node.shape
    if shape == Shape.STRUCT:
        out["type"] = "object"
        if node.properties:
            out["properties"] = {k: schema_json(v) for k, v in node.properties.items()}
            for k in ("apiVersion", "kind"):  # the JSON-schema converter's enums, not upstream's
                if node.gvks and k in out["properties"]:
                    out["properties"][k].pop("enum", None)
        if node.required:
            out["required"] = list(node.required)
    elif shape == Shape.MAP:
        out["type"] = "object"
        if node.additional is not None:
            out["additionalProperties"] = schema_json(node.additional)
    elif shape == Shape.LIST:
        out["type"] = "array"
        if node.items is not None:
            out["items"] = schema_json(node.items)
    elif shape == Shape.INT_OR_STRING:
        out.update(type="string", format="int-or-string")
    elif shape == Shape.QUANTITY:
        out["type"] = "string"
    elif shape == Shape.ANY:
        if node.name is not None and node.name.startswith(("io.k8s.apimachinery", "io.k8s.api.")):
            out["type"] = "object"  # RawExtension, FieldsV1, Patch: objects upstream
    else:
        out["type"] = shape.value
    if node.own_format and shape != Shape.INT_OR_STRING:
        out["format"] = node.own_format
    if node.nullable and "type" in out:
        out["nullable"] = True
    if node.enum is not None:
        out["enum"] = list(node.enum)
    out.update(_annotations(node))
    return out


def _annotations(node: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if node.description:
        out["description"] = node.description
    out.update(node.own_extensions)
    return out


# ---- paths ----


def _camel_group(group: str) -> str:
    if not group:
        return "Core"
    return "".join(part[:1].upper() + part[1:] for part in group.removesuffix(".k8s.io").split("."))


def _tag(r: ServedResource) -> str:
    return f"{(r.group.removesuffix('.k8s.io').replace('.', '_') or 'core')}_{r.version}"


def _gvk_ext(gvk: Gvk) -> dict[str, str]:
    return {"group": gvk.group, "kind": gvk.kind, "version": gvk.version}


def _query(name: str, description: str, kind: str = "string", unique: bool = True) -> dict[str, Any]:
    param: dict[str, Any] = {"name": name, "in": "query", "description": description, "schema": {"type": kind}}
    if unique:
        param["schema"]["uniqueItems"] = True
    return param


_DRY_RUN = _query("dryRun", "When present, indicates that modifications should not be persisted. Valid values: All")
_FIELD_MANAGER = _query(
    "fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."
)
_FIELD_VALIDATION = _query(
    "fieldValidation",
    "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate "
    "fields. Valid values are: Ignore, Warn (the default), Strict.",
)
_FORCE = _query(
    "force", 'Force is going to "force" Apply requests. It must be unset for non-apply patch requests.', "boolean"
)
_LIST_PARAMS = [
    _query("allowWatchBookmarks", 'allowWatchBookmarks requests watch events with type "BOOKMARK".', "boolean"),
    _query("continue", "The continue option should be set when retrieving more results from the server."),
    _query("fieldSelector", "A selector to restrict the list of returned objects by their fields."),
    _query("labelSelector", "A selector to restrict the list of returned objects by their labels."),
    _query("limit", "limit is a maximum number of responses to return for a list call.", "integer"),
    _query(
        "resourceVersion", "resourceVersion sets a constraint on what resource versions a request may be served from."
    ),
    _query("resourceVersionMatch", "resourceVersionMatch determines how resourceVersion is applied to list calls."),
    _query("sendInitialEvents", "`sendInitialEvents=true` may be set together with `watch=true`.", "boolean"),
    _query("timeoutSeconds", "Timeout for the list/watch call.", "integer"),
    _query("watch", "Watch for changes to the described resources and return them as a stream.", "boolean"),
]
_DELETE_PARAMS = [
    _DRY_RUN,
    _query("gracePeriodSeconds", "The duration in seconds before the object should be deleted.", "integer"),
    _query("orphanDependents", "Deprecated: please use the PropagationPolicy.", "boolean"),
    _query(
        "propagationPolicy", "Whether and how garbage collection will be performed: Orphan, Background, Foreground."
    ),
]
_PRETTY = _query("pretty", "If 'true', then the output is pretty printed.")


def _content(ref: str, types: Sequence[str] = OBJECT_CONTENT_TYPES) -> dict[str, Any]:
    return {t: {"schema": {"$ref": REF + ref}} for t in types}


def _responses(ref: str, codes: Sequence[str], stream: bool = False) -> dict[str, Any]:
    types = (*OBJECT_CONTENT_TYPES, "application/json;stream=watch") if stream else OBJECT_CONTENT_TYPES
    out = {code: {"description": _CODE_TEXT[code], "content": _content(ref, types)} for code in codes}
    out["401"] = {"description": "Unauthorized"}
    return out


_CODE_TEXT = {"200": "OK", "201": "Created", "202": "Accepted"}


def _operation(
    r: ServedResource,
    action: str,
    op_id: str,
    gvk: Gvk,
    description: str,
    parameters: list[dict[str, Any]],
    responses: dict[str, Any],
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "description": description,
        "operationId": op_id,
        "tags": [_tag(r)],
        "responses": responses,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk_ext(gvk),
    }
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = body
    return op


def _path_params(namespaced: bool, named: bool) -> list[dict[str, Any]]:
    params = []
    if named:
        params.append(
            {
                "name": "name",
                "in": "path",
                "required": True,
                "description": "name of the object",
                "schema": {"type": "string", "uniqueItems": True},
            }
        )
    if namespaced:
        params.append(
            {
                "name": "namespace",
                "in": "path",
                "required": True,
                "description": "object name and auth scope, such as for teams and projects",
                "schema": {"type": "string", "uniqueItems": True},
            }
        )
    return [*params, _PRETTY]


def _resource_paths(r: ServedResource, defs: Definitions) -> tuple[dict[str, Any], list[Schema]]:
    gvk = r.gvk
    kind_schema = _definition(defs, gvk)
    list_schema = _list_kind(defs, gvk)
    roots = [kind_schema] + ([list_schema] if list_schema is not None else [])
    kind_ref = kind_schema.name or ""
    list_ref = list_schema.name if list_schema is not None and list_schema.name else kind_ref
    status_ref = META + "Status"
    prefix = f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"
    collection = f"{prefix}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{prefix}/{r.plural}"
    item = f"{collection}/{{name}}"
    camel = _camel_group(r.group) + r.version[:1].upper() + r.version[1:]
    scope = "Namespaced" if r.namespaced else ""
    verbs = set(r.verbs)
    paths: dict[str, Any] = {}

    ops: dict[str, Any] = {}
    if "list" in verbs:
        ops["get"] = _operation(
            r,
            "list",
            f"list{camel}{scope}{r.kind}",
            gvk,
            f"list or watch objects of kind {r.kind}",
            _LIST_PARAMS,
            _responses(list_ref, ["200"], stream=True),
        )
    if "create" in verbs:
        ops["post"] = _operation(
            r,
            "post",
            f"create{camel}{scope}{r.kind}",
            gvk,
            f"create a {r.kind}",
            [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION],
            _responses(kind_ref, ["200", "201", "202"]),
            {"content": _content(kind_ref, ("*/*",)), "required": True},
        )
    if "deletecollection" in verbs:
        ops["delete"] = _operation(
            r,
            "deletecollection",
            f"delete{camel}Collection{scope}{r.kind}",
            gvk,
            f"delete collection of {r.kind}",
            _DELETE_PARAMS + _LIST_PARAMS,
            _responses(status_ref, ["200"]),
            {"content": _content(META + "DeleteOptions", ("*/*",))},
        )
    if ops:
        paths[collection] = {**ops, "parameters": _path_params(r.namespaced, False)}

    ops = {}
    if "get" in verbs:
        ops["get"] = _operation(
            r,
            "get",
            f"read{camel}{scope}{r.kind}",
            gvk,
            f"read the specified {r.kind}",
            [],
            _responses(kind_ref, ["200"]),
        )
    ops.update(_write_ops(r, gvk, kind_ref, f"{camel}{scope}{r.kind}", r.kind, verbs))
    if "delete" in verbs:
        ops["delete"] = _operation(
            r,
            "delete",
            f"delete{camel}{scope}{r.kind}",
            gvk,
            f"delete a {r.kind}",
            _DELETE_PARAMS,
            _responses(status_ref, ["200", "202"]),
            {"content": _content(META + "DeleteOptions", ("*/*",))},
        )
    if ops:
        paths[item] = {**ops, "parameters": _path_params(r.namespaced, True)}

    if r.namespaced and "list" in verbs:
        all_ns = f"{prefix}/{r.plural}"
        paths[all_ns] = {
            "get": _operation(
                r,
                "list",
                f"list{camel}{r.kind}ForAllNamespaces",
                gvk,
                f"list or watch objects of kind {r.kind}",
                _LIST_PARAMS,
                _responses(list_ref, ["200"], stream=True),
            ),
            "parameters": [_PRETTY],
        }

    for sub in r.subresources:
        sub_paths, sub_roots = _subresource_paths(r, sub, item, camel, scope, defs)
        paths.update(sub_paths)
        roots.extend(sub_roots)
    return paths, roots


def _write_ops(r: ServedResource, gvk: Gvk, ref: str, name: str, kind: str, verbs: set[str]) -> dict[str, Any]:
    ops: dict[str, Any] = {}
    if "update" in verbs:
        ops["put"] = _operation(
            r,
            "put",
            f"replace{name}",
            gvk,
            f"replace the specified {kind}",
            [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION],
            _responses(ref, ["200", "201"]),
            {"content": _content(ref, ("*/*",)), "required": True},
        )
    if "patch" in verbs:
        ops["patch"] = _operation(
            r,
            "patch",
            f"patch{name}",
            gvk,
            f"partially update the specified {kind}",
            [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _FORCE],
            _responses(ref, ["200", "201"]),
            {"content": _content(META + "Patch", PATCH_CONTENT_TYPES), "required": True},
        )
    return ops


def _subresource_paths(
    r: ServedResource, sub: Subresource, item: str, camel: str, scope: str, defs: Definitions
) -> tuple[dict[str, Any], list[Schema]]:
    gvk = sub.kind or r.gvk
    node = defs.by_gvk(gvk)
    roots = [node] if node is not None else []
    ref = node.name if node is not None and node.name else _definition(defs, r.gvk).name or ""
    title = sub.name[:1].upper() + sub.name[1:]
    name = f"{camel}{scope}{r.kind}{title}"
    path = f"{item}/{sub.name}"
    verbs = set(sub.verbs)
    ops: dict[str, Any] = {}
    if sub.connect:
        for method, verb in (("get", "get"), ("post", "create")):
            if verb in verbs:
                ops[method] = _operation(
                    r,
                    "connect",
                    f"connect{method.capitalize()}{name}",
                    gvk,
                    f"connect {method.upper()} requests to {sub.name} of {r.kind}",
                    [],
                    {
                        "200": {"description": "OK", "content": {"*/*": {"schema": {"type": "string"}}}},
                        "401": {"description": "Unauthorized"},
                    },
                )
    elif sub.name == "log":
        if "get" in verbs:
            ops["get"] = _operation(
                r,
                "get",
                f"read{name}",
                gvk,
                f"read log of the specified {r.kind}",
                [
                    _query(p, f"the log's {p}")
                    for p in (
                        "container",
                        "follow",
                        "limitBytes",
                        "previous",
                        "sinceSeconds",
                        "tailLines",
                        "timestamps",
                    )
                ],
                {
                    "200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}},
                    "401": {"description": "Unauthorized"},
                },
            )
    else:
        if "get" in verbs:
            ops["get"] = _operation(
                r, "get", f"read{name}", gvk, f"read {sub.name} of the specified {r.kind}", [], _responses(ref, ["200"])
            )
        if "create" in verbs:
            ops["post"] = _operation(
                r,
                "post",
                f"create{name}",
                gvk,
                f"create {sub.name} of a {r.kind}",
                [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION],
                _responses(ref, ["200", "201", "202"]),
                {"content": _content(ref, ("*/*",)), "required": True},
            )
        ops.update(_write_ops(r, gvk, ref, name, r.kind if sub.kind is None else gvk.kind, verbs))
    if not ops:
        return {}, roots
    return {path: {**ops, "parameters": _path_params(r.namespaced, True)}}, roots


def _document(gv: str, resources: Sequence[ServedResource], defs: Definitions) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    roots: list[Schema] = []
    for r in sorted(resources, key=_sort_key):
        p, rs = _resource_paths(r, defs)
        paths.update(p)
        roots.extend(rs)
    roots.extend(node for name in META_TYPES if (node := defs.by_ref(META + name)) is not None)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v{KUBERNETES_VERSION}"},
        "paths": paths,
        "components": {
            "schemas": _schemas(roots, defs),
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "name": "authorization",
                    "in": "header",
                    "description": "Bearer Token authentication",
                }
            },
        },
        "security": [{"BearerToken": []}],
    }
