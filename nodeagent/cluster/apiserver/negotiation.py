"""Content negotiation: what the client accepts (Table, aggregated discovery, JSON) and sends.

kubectl asks `application/json;as=Table;v=v1;g=meta.k8s.io,application/json` for `get`, and
`application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json` for
discovery; the first acceptable media range wins. Protobuf is never offered: clients fall back to
JSON when it is not the response's type (kubectl lists protobuf first for some calls).
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.cluster.registry import errors

TABLE_VERSIONS = ("v1", "v1beta1")
DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
DISCOVERY_V2_BETA = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
JSON = "application/json"
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


@dataclass(frozen=True, slots=True)
class MediaRange:
    type: str
    params: dict[str, str]


def parse_accept(header: str | None) -> list[MediaRange]:
    if not header:
        return [MediaRange("*/*", {})]
    out = []
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        if not fields[0]:
            continue
        params = {}
        for f in fields[1:]:
            if "=" in f:
                k, v = f.split("=", 1)
                params[k.strip().lower()] = v.strip().strip('"')
        out.append(MediaRange(fields[0].lower(), params))
    return out


def _json_like(m: MediaRange) -> bool:
    return m.type in (JSON, "application/*", "*/*")


@dataclass(frozen=True, slots=True)
class Output:
    table: bool = False
    table_version: str = "v1"


def choose_output(accept: str | None) -> Output:
    """Table or the object as JSON; 406 NotAcceptable when nothing we serve is accepted."""
    for m in parse_accept(accept):
        if m.params.get("as") == "Table" and m.params.get("g") == "meta.k8s.io" and _json_like(m):
            if m.params.get("v", "v1") in TABLE_VERSIONS:
                return Output(True, m.params.get("v", "v1"))
            continue
        if "as" in m.params:
            continue  # PartialObjectMetadata(List) and other conversions are not served
        if _json_like(m) or m.type in YAML_TYPES:
            return Output()
    raise errors.not_acceptable([JSON, "application/json;as=Table;v=v1;g=meta.k8s.io"])


def wants_aggregated_discovery(accept: str | None) -> str | None:
    """The aggregated discovery version asked for (v2 or v2beta1), or None for the legacy form."""
    for m in parse_accept(accept):
        if m.params.get("g") == "apidiscovery.k8s.io" and m.params.get("as") == "APIGroupDiscoveryList":
            if m.params.get("v") in ("v2", "v2beta1"):
                return m.params["v"]
            continue
        if _json_like(m):
            return None
    return None


def body_type(content_type: str) -> str:
    """`json` or `yaml` for a create/update body; 415 otherwise."""
    ct = content_type.split(";")[0].strip().lower()
    if ct in ("", JSON, "*/*"):
        return "json"
    if ct in YAML_TYPES:
        return "yaml"
    raise errors.unsupported_media_type(ct, [JSON, "application/yaml"])
