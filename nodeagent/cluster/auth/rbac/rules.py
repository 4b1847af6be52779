"""One RBAC PolicyRule and how it matches a request (upstream rbac/v1 evaluation_helpers).

- verbs and apiGroups: `*` or an exact value;
- resources: `*` (every resource and subresource), `res` (the resource alone), `res/sub`, or
  `*/sub` (that subresource of every resource);
- resourceNames: empty allows every name; otherwise the request's name must be listed (so a
  rule with names never allows list, watch or create, which carry no name);
- nonResourceURLs: `*`, an exact path, or a prefix ending in `*` (`/apis/*`).

A rule is compiled once into frozensets, so matching is a few set look-ups.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.auth.attributes import Attributes
from nodeagent.core.errors import FieldError

ALL = "*"


def _strings(rule: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = rule.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FieldError(f"{path}.{key}", "must be a list of strings")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class PolicyRule:
    verbs: frozenset[str]
    api_groups: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    resource_names: frozenset[str] = frozenset()
    non_resource_urls: tuple[str, ...] = ()
    # compiled
    _url_exact: frozenset[str] = frozenset()
    _url_prefixes: tuple[str, ...] = ()

    @classmethod
    def make(cls, verbs: Any = (), api_groups: Any = (), resources: Any = (), resource_names: Any = (),
             non_resource_urls: Any = ()) -> PolicyRule:
        urls = tuple(non_resource_urls)
        return cls(frozenset(verbs), frozenset(api_groups), frozenset(resources), frozenset(resource_names), urls,
                   frozenset(u for u in urls if not u.endswith(ALL)),
                   tuple(u.rstrip(ALL) for u in urls if u.endswith(ALL)))

    @classmethod
    def from_api(cls, rule: object, path: str = "rules[0]") -> PolicyRule:
        """A rule from its API form; FieldError naming the field when it is malformed."""
        if not isinstance(rule, Mapping):
            raise FieldError(path, "must be an object")
        return cls.make(_strings(rule, "verbs", path), _strings(rule, "apiGroups", path),
                        _strings(rule, "resources", path), _strings(rule, "resourceNames", path),
                        _strings(rule, "nonResourceURLs", path))

    def to_api(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {"verbs": sorted(self.verbs)}
        if self.api_groups:
            out["apiGroups"] = sorted(self.api_groups)
        if self.resources:
            out["resources"] = sorted(self.resources)
        if self.resource_names:
            out["resourceNames"] = sorted(self.resource_names)
        if self.non_resource_urls:
            out["nonResourceURLs"] = list(self.non_resource_urls)
        return out

    def verb_matches(self, verb: str) -> bool:
        return ALL in self.verbs or verb in self.verbs

    def group_matches(self, group: str) -> bool:
        return ALL in self.api_groups or group in self.api_groups

    def resource_matches(self, resource: str, subresource: str) -> bool:
        res = self.resources
        if ALL in res:
            return True
        if subresource:
            return f"{resource}/{subresource}" in res or f"*/{subresource}" in res
        return resource in res

    def name_matches(self, name: str) -> bool:
        return not self.resource_names or name in self.resource_names

    def url_matches(self, path: str) -> bool:
        if path in self._url_exact or "" in self._url_prefixes:
            return True
        return any(path.startswith(p) for p in self._url_prefixes)

    def allows(self, attrs: Attributes) -> bool:
        if not self.verb_matches(attrs.verb):
            return False
        if attrs.resource_request:
            return (self.group_matches(attrs.api_group) and self.resource_matches(attrs.resource, attrs.subresource)
                    and self.name_matches(attrs.name))
        return self.url_matches(attrs.path)


def rules_allow(attrs: Attributes, rules: tuple[PolicyRule, ...] | list[PolicyRule]) -> bool:
    return any(r.allows(attrs) for r in rules)


def parse_rules(value: object, path: str = "rules") -> tuple[PolicyRule, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise FieldError(path, "must be a list of rules")
    return tuple(PolicyRule.from_api(r, f"{path}[{i}]") for i, r in enumerate(value))
