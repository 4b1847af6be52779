"""RBAC's escalation prevention: nobody grants, through a Role, ClusterRole or binding they create
or update, a permission they do not hold themselves (kube-apiserver's rbac registry).

- A Role or ClusterRole may be written if the user is in system:masters, or may `escalate` that
  role (RBAC verb on roles/clusterroles), or already holds every rule it contains (covers, below);
  a ClusterRole with an aggregationRule may gather anything, so it needs full authority.
- A RoleBinding or ClusterRoleBinding may be written if the user is in system:masters, or may
  `bind` the role it refers to, or holds every rule of that role (in the binding's namespace;
  cluster-wide for a ClusterRoleBinding). A binding to a role that does not exist yet grants
  nothing and is allowed, as upstream.
- An update that only changes ownerReferences or finalizers (what the garbage collector does)
  is always allowed.

"Holds" means by the user's own RBAC rules (upstream's rule resolver), compared with upstream's
`Covers`: each rule broken into one verb, group, resource (and name) at a time, each piece
covered by some rule of the user's (`*` covers all; `*/sub` covers that subresource of every
resource; rules with resourceNames cover only those names). The denial is kube-apiserver's 403
text, listing what is missing. The API server calls `check` before create and update of the
four RBAC kinds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.auth.attributes import RBAC_GROUP, Attributes
from nodeagent.cluster.auth.authorizer import Authorizer
from nodeagent.cluster.auth.rbac.index import RBACIndex, parse_binding, parse_cluster_role
from nodeagent.cluster.auth.rbac.rules import ALL, PolicyRule, parse_rules
from nodeagent.cluster.auth.user import SYSTEM_MASTERS, UserInfo
from nodeagent.core.errors import FieldError

_RESOURCES = {"Role": "roles", "ClusterRole": "clusterroles", "RoleBinding": "rolebindings",
              "ClusterRoleBinding": "clusterrolebindings"}
FULL_AUTHORITY = (PolicyRule.make(["*"], ["*"], ["*"]), PolicyRule.make(["*"], non_resource_urls=["*"]))


def _q(values: Sequence[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "]"


def breakdown(rule: PolicyRule) -> list[PolicyRule]:
    """One verb, group, resource (and name) at a time; URLs one verb at a time (upstream BreakdownRule)."""
    out: list[PolicyRule] = []
    verbs = sorted(rule.verbs)
    for group in sorted(rule.api_groups):
        for resource in sorted(rule.resources):
            for verb in verbs:
                if rule.resource_names:
                    out.extend(PolicyRule.make([verb], [group], [resource], [n]) for n in sorted(rule.resource_names))
                else:
                    out.append(PolicyRule.make([verb], [group], [resource]))
    for url in rule.non_resource_urls:
        out.extend(PolicyRule.make([verb], non_resource_urls=[url]) for verb in verbs)
    return out


def _resources_cover(owner: frozenset[str], wanted: frozenset[str]) -> bool:
    if ALL in owner or wanted <= owner:
        return True
    for path in wanted:
        if path in owner:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in owner:
            return False
    return True


def _url_covers(owner: str, path: str) -> bool:
    return owner == path or (owner.endswith(ALL) and path.startswith(owner.rstrip(ALL)))


def rule_covers(owner: PolicyRule, sub: PolicyRule) -> bool:
    """upstream ruleCovers"""
    if not (ALL in owner.verbs or sub.verbs <= owner.verbs):
        return False
    if not (ALL in owner.api_groups or sub.api_groups <= owner.api_groups):
        return False
    if not _resources_cover(owner.resources, sub.resources):
        return False
    if not all(any(_url_covers(o, p) for o in owner.non_resource_urls) for p in sub.non_resource_urls):
        return False
    if not sub.resource_names:
        return not owner.resource_names
    return not owner.resource_names or sub.resource_names <= owner.resource_names


def covers(owner: Sequence[PolicyRule], servant: Sequence[PolicyRule]) -> list[PolicyRule]:
    """The pieces of `servant` that no rule of `owner` covers ([]: all covered)."""
    return [sub for rule in servant for sub in breakdown(rule) if not any(rule_covers(o, sub) for o in owner)]


def compact_string(rule: PolicyRule) -> str:
    parts = []
    if rule.api_groups:
        parts.append(f"APIGroups:{_q(sorted(rule.api_groups))}")
    if rule.resources:
        parts.append(f"Resources:{_q(sorted(rule.resources))}")
    if rule.non_resource_urls:
        parts.append(f"NonResourceURLs:{_q(list(rule.non_resource_urls))}")
    if rule.resource_names:
        parts.append(f"ResourceNames:{_q(sorted(rule.resource_names))}")
    if rule.verbs:
        parts.append(f"Verbs:{_q(sorted(rule.verbs))}")
    return "{" + ", ".join(parts) + "}"


def _compact(missing: list[PolicyRule]) -> list[str]:
    """Pieces that differ only in their verb merged (upstream CompactRules), one line each, sorted."""
    merged: dict[tuple[Any, ...], set[str]] = {}
    for r in missing:
        key = (r.api_groups, r.resources, r.resource_names, r.non_resource_urls)
        merged.setdefault(key, set()).update(r.verbs)
    lines = {compact_string(PolicyRule.make(sorted(v), k[0], k[1], k[2], k[3])) for k, v in merged.items()}
    return sorted(lines)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _only_gc_fields(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    def strip(o: Mapping[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in _meta(o).items()
                if k not in ("ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation")}
        return {**{k: v for k, v in o.items() if k != "metadata"}, "metadata": meta}
    return strip(new) == strip(old)


class EscalationCheck:
    """`check(user, obj, old)`: None if the write may go on, else the 403 message."""

    def __init__(self, rbac: RBACIndex, authorizer: Authorizer) -> None:
        self.rbac = rbac
        self.authorizer = authorizer

    def _may(self, user: UserInfo, verb: str, resource: str, namespace: str, name: str) -> bool:
        attrs = Attributes(user=user, verb=verb, api_group=RBAC_GROUP, api_version="v1", resource=resource,
                           namespace=namespace, name=name)
        return self.authorizer.authorize(attrs).allowed

    def _missing(self, user: UserInfo, namespace: str, rules: Sequence[PolicyRule]) -> str | None:
        owned, errors = self.rbac.rules_for(user, namespace)
        missing = covers(owned, rules)
        if not missing:
            return None
        msg = (f"user \"{user.name}\" (groups={_q(list(user.groups))}) is attempting to grant RBAC permissions not "
               "currently held:\n" + "\n".join(_compact(missing)))
        if errors:
            msg += f"; resolution errors: [{', '.join(errors)}]"
        return msg

    def check(self, user: UserInfo, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> str | None:
        kind = obj.get("kind")
        resource = _RESOURCES.get(str(kind))
        if resource is None:
            return None
        if SYSTEM_MASTERS in user.groups:
            return None
        if old is not None and _only_gc_fields(obj, old):
            return None
        meta = _meta(obj)
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        if kind == "ClusterRoleBinding":
            namespace = ""
        try:
            problem = self._problem(user, str(kind), resource, namespace, name, obj)
        except FieldError:
            return None  # malformed: validation answers 422 with the field
        if problem is None:
            return None
        qualified = f"{resource}.{RBAC_GROUP}"
        return f'{qualified} "{name}" is forbidden: {problem}' if name else f"{qualified} is forbidden: {problem}"

    def _problem(self, user: UserInfo, kind: str, resource: str, namespace: str, name: str,
                 obj: Mapping[str, Any]) -> str | None:
        if kind in ("Role", "ClusterRole"):
            if self._may(user, "escalate", resource, namespace, name):
                return None
            if kind == "ClusterRole" and parse_cluster_role(obj).selectors is not None:
                if self._missing(user, "", FULL_AUTHORITY) is not None:
                    return "must have cluster-admin privileges to use the aggregationRule"
                return None
            return self._missing(user, namespace, parse_rules(obj.get("rules")))
        binding = parse_binding(obj)
        ref_resource = "roles" if binding.role_kind == "Role" else "clusterroles"
        if self._may(user, "bind", ref_resource, namespace, binding.role_name):
            return None
        rules = self.rbac.role_rules(binding.role_kind, namespace, binding.role_name)
        if rules is None:
            return None  # the role does not exist (yet): the binding grants nothing
        return self._missing(user, namespace, rules)
