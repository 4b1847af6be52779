"""The RBAC authorizer over an index of Roles, ClusterRoles, RoleBindings and ClusterRoleBindings.

kube-apiserver's RBAC authorizer lists every ClusterRoleBinding (and every RoleBinding of the
namespace) per request and checks each subject. A server taking 10,000 requests a second cannot
do that, so the index keeps, for cluster and for each namespace, the bindings by User name, by
Group name and by ServiceAccount; a request looks up only the bindings that name its user, its
groups or its service account. What a user may do in a namespace (the resolved rules, with the
text saying which binding grants each) is cached per (user, groups, namespace) and the cache is
dropped on any change, so between changes a request costs a dict look-up and a few set tests.

ClusterRoles with an aggregationRule get the rules of every other ClusterRole whose labels match
one of its selectors, resolved through nested aggregations (admin <- edit <- view), as the
upstream aggregation controller converges to (its own rules are replaced, as upstream; a cycle of
aggregations ends where it closes); `aggregated_rules` gives them to whoever writes
them back into the object (the controller of issue 14), so `kubectl get clusterrole admin`
shows them.

The index is fed by the server from the store's watch (`apply(event_type, object)`), all on the
event loop: no locks. A malformed object (it could only come from an older server) is logged
and left out, never fatal. Semantics are upstream's: a RoleBinding's ServiceAccount subject
without a namespace means the binding's namespace; a binding to a missing role grants nothing
and its error becomes the denial's reason (`RBAC: clusterrole.rbac.authorization.k8s.io "x" not
found`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from nodeagent.cluster.auth.attributes import ALLOW, NO_OPINION, Attributes, AuthorizationDecision, Verdict
from nodeagent.cluster.auth.rbac.rules import PolicyRule, parse_rules
from nodeagent.cluster.auth.user import UserInfo, split_service_account_username
from nodeagent.core.errors import FieldError

log = structlog.get_logger(__name__)

KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
CACHE_LIMIT = 20_000


def _go_q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---- label selectors (metav1.LabelSelector), for aggregation ----


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _check_selector(sel: object, path: str) -> Mapping[str, Any]:
    if not isinstance(sel, Mapping):
        raise FieldError(path, "must be a label selector")
    ml = sel.get("matchLabels") or {}
    if not isinstance(ml, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in ml.items()):
        raise FieldError(f"{path}.matchLabels", "must map strings to strings")
    for i, e in enumerate(sel.get("matchExpressions") or []):
        p = f"{path}.matchExpressions[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str):
            raise FieldError(p, "must have a key")
        if e.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise FieldError(f"{p}.operator", f'not a valid selector operator: "{e.get("operator")}"')
    return sel


# ---- parsed objects ----


@dataclass(frozen=True, slots=True)
class Subject:
    kind: str  # User | Group | ServiceAccount
    name: str
    namespace: str = ""

    def describe(self, binding_namespace: str) -> str:
        if self.kind == "ServiceAccount":
            return f"{self.kind} {_go_q(self.name + '/' + (self.namespace or binding_namespace))}"
        return f"{self.kind} {_go_q(self.name)}"


@dataclass(frozen=True, slots=True)
class Binding:
    name: str
    namespace: str  # "" for a ClusterRoleBinding
    role_kind: str
    role_name: str
    subjects: tuple[Subject, ...]

    def applies(self, user: UserInfo, sa: tuple[str, str] | None) -> Subject | None:
        """The first subject that names the user (upstream appliesTo), or None."""
        for s in self.subjects:
            if s.kind == "User" and s.name == user.name:
                return s
            if s.kind == "Group" and s.name in user.groups:
                return s
            if s.kind == "ServiceAccount" and sa is not None:
                ns = s.namespace or self.namespace
                if ns and (ns, s.name) == sa:
                    return s
        return None

    def source(self, subject: Subject) -> str:
        if self.namespace:
            return (f"RoleBinding {_go_q(self.name + '/' + self.namespace)} of {self.role_kind} "
                    f"{_go_q(self.role_name)} to {subject.describe(self.namespace)}")
        return (f"ClusterRoleBinding {_go_q(self.name)} of {self.role_kind} {_go_q(self.role_name)} "
                f"to {subject.describe('')}")


@dataclass(frozen=True, slots=True)
class ClusterRole:
    name: str
    rules: tuple[PolicyRule, ...]
    labels: Mapping[str, str]
    selectors: tuple[Mapping[str, Any], ...] | None  # None: not aggregated


def _meta(obj: Mapping[str, Any], namespaced: bool) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise FieldError("metadata", "Required value")
    name, ns = meta.get("name"), meta.get("namespace") or ""
    if not isinstance(name, str) or not name:
        raise FieldError("metadata.name", "Required value")
    if namespaced and (not isinstance(ns, str) or not ns):
        raise FieldError("metadata.namespace", "Required value")
    return name, ns if namespaced else ""


def parse_binding(obj: Mapping[str, Any]) -> Binding:
    namespaced = obj.get("kind") == "RoleBinding"
    name, ns = _meta(obj, namespaced)
    ref = obj.get("roleRef")
    if not isinstance(ref, Mapping):
        raise FieldError("roleRef", "Required value")
    allowed_kinds = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    if ref.get("kind") not in allowed_kinds:
        raise FieldError("roleRef.kind", f"Unsupported value: {_go_q(str(ref.get('kind')))}: supported values: "
                         + ", ".join(_go_q(k) for k in allowed_kinds))
    if not isinstance(ref.get("name"), str) or not ref["name"]:
        raise FieldError("roleRef.name", "Required value")
    subjects = []
    raw = obj.get("subjects") or []
    if not isinstance(raw, list):
        raise FieldError("subjects", "must be a list")
    for i, s in enumerate(raw):
        if not isinstance(s, Mapping) or s.get("kind") not in ("User", "Group", "ServiceAccount"):
            raise FieldError(f"subjects[{i}].kind", 'Unsupported value: supported values: "ServiceAccount", '
                                                    '"User", "Group"')
        if not isinstance(s.get("name"), str) or not s["name"]:
            raise FieldError(f"subjects[{i}].name", "Required value")
        sns = s.get("namespace") or ""
        subjects.append(Subject(s["kind"], s["name"], sns if isinstance(sns, str) else ""))
    return Binding(name, ns, ref["kind"], ref["name"], tuple(subjects))


def parse_cluster_role(obj: Mapping[str, Any]) -> ClusterRole:
    name, _ = _meta(obj, False)
    labels = obj["metadata"].get("labels") or {}
    if not isinstance(labels, Mapping):
        raise FieldError("metadata.labels", "must map strings to strings")
    agg = obj.get("aggregationRule")
    selectors: tuple[Mapping[str, Any], ...] | None = None
    if agg is not None:
        if not isinstance(agg, Mapping) or not isinstance(agg.get("clusterRoleSelectors") or [], list):
            raise FieldError("aggregationRule.clusterRoleSelectors", "must be a list of label selectors")
        selectors = tuple(_check_selector(s, f"aggregationRule.clusterRoleSelectors[{i}]")
                          for i, s in enumerate(agg.get("clusterRoleSelectors") or []))
    return ClusterRole(name, parse_rules(obj.get("rules")), dict(labels), selectors)


# ---- the index ----


@dataclass
class _SubjectIndex:
    users: dict[str, set[str]] = field(default_factory=dict)
    groups: dict[str, set[str]] = field(default_factory=dict)
    service_accounts: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def _slots(self, b: Binding) -> list[tuple[dict[Any, set[str]], Any]]:
        out: list[tuple[dict[Any, set[str]], Any]] = []
        for s in b.subjects:
            if s.kind == "User":
                out.append((self.users, s.name))
            elif s.kind == "Group":
                out.append((self.groups, s.name))
            elif s.namespace or b.namespace:
                out.append((self.service_accounts, (s.namespace or b.namespace, s.name)))
        return out

    def add(self, b: Binding) -> None:
        for table, key in self._slots(b):
            table.setdefault(key, set()).add(b.name)

    def remove(self, b: Binding) -> None:
        for table, key in self._slots(b):
            names = table.get(key)
            if names is not None:
                names.discard(b.name)
                if not names:
                    del table[key]

    def lookup(self, user: UserInfo, sa: tuple[str, str] | None) -> set[str]:
        found: set[str] = set()
        if user.name in self.users:
            found |= self.users[user.name]
        for g in user.groups:
            if g in self.groups:
                found |= self.groups[g]
        if sa is not None and sa in self.service_accounts:
            found |= self.service_accounts[sa]
        return found

    def empty(self) -> bool:
        return not (self.users or self.groups or self.service_accounts)


@dataclass
class ResolvedRules:
    """What one user may do in one namespace: rules with the source that grants each, and the
    errors met resolving them (bindings to missing roles)."""

    rules: list[tuple[PolicyRule, str]]
    errors: list[str]
    _by_verb_group: dict[tuple[str, str], list[tuple[PolicyRule, str]]] = field(default_factory=dict)
    _by_verb: dict[str, list[tuple[PolicyRule, str]]] = field(default_factory=dict)

    def resource_candidates(self, verb: str, group: str) -> list[tuple[PolicyRule, str]]:
        key = (verb, group)
        found = self._by_verb_group.get(key)
        if found is None:
            found = [(r, s) for r, s in self.rules if r.resources and r.verb_matches(verb) and r.group_matches(group)]
            self._by_verb_group[key] = found
        return found

    def url_candidates(self, verb: str) -> list[tuple[PolicyRule, str]]:
        found = self._by_verb.get(verb)
        if found is None:
            found = [(r, s) for r, s in self.rules if r.non_resource_urls and r.verb_matches(verb)]
            self._by_verb[verb] = found
        return found


class RBACIndex:
    """Every RBAC object, indexed by subject; the RBAC authorizer (`authorize`)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        self._roles: dict[tuple[str, str], tuple[PolicyRule, ...]] = {}
        self._cluster_roles: dict[str, ClusterRole] = {}
        self._effective: dict[str, tuple[PolicyRule, ...]] = {}
        self._crbs: dict[str, Binding] = {}
        self._rbs: dict[str, dict[str, Binding]] = {}  # namespace -> name -> binding
        self._cluster_subjects = _SubjectIndex()
        self._ns_subjects: dict[str, _SubjectIndex] = {}
        self._cache: dict[tuple[str, tuple[str, ...], str], ResolvedRules] = {}
        self.generation = 0
        for obj in objects:
            self.put(obj, _resolve=False)
        self._resolve_aggregation()

    # -- changes --

    def put(self, obj: Mapping[str, Any], *, _resolve: bool = True) -> None:
        """Add or replace one object; FieldError (naming the field) when it is malformed."""
        kind = obj.get("kind")
        if kind == "Role":
            name, ns = _meta(obj, True)
            self._roles[(ns, name)] = parse_rules(obj.get("rules"))
        elif kind == "ClusterRole":
            role = parse_cluster_role(obj)
            self._cluster_roles[role.name] = role
            if _resolve:
                self._resolve_aggregation()
        elif kind == "ClusterRoleBinding":
            b = parse_binding(obj)
            old = self._crbs.get(b.name)
            if old is not None:
                self._cluster_subjects.remove(old)
            self._crbs[b.name] = b
            self._cluster_subjects.add(b)
        elif kind == "RoleBinding":
            b = parse_binding(obj)
            table = self._rbs.setdefault(b.namespace, {})
            idx = self._ns_subjects.setdefault(b.namespace, _SubjectIndex())
            old = table.get(b.name)
            if old is not None:
                idx.remove(old)
            table[b.name] = b
            idx.add(b)
        else:
            raise FieldError("kind", f"not an RBAC kind: {kind!r}")
        self._changed()

    def delete(self, kind: str, namespace: str, name: str) -> None:
        if kind == "Role":
            self._roles.pop((namespace, name), None)
        elif kind == "ClusterRole":
            if self._cluster_roles.pop(name, None) is not None:
                self._resolve_aggregation()
        elif kind == "ClusterRoleBinding":
            old = self._crbs.pop(name, None)
            if old is not None:
                self._cluster_subjects.remove(old)
        elif kind == "RoleBinding":
            old = self._rbs.get(namespace, {}).pop(name, None)
            if old is not None:
                idx = self._ns_subjects[namespace]
                idx.remove(old)
                if idx.empty():
                    del self._ns_subjects[namespace]
                if not self._rbs[namespace]:
                    del self._rbs[namespace]
        else:
            raise FieldError("kind", f"not an RBAC kind: {kind!r}")
        self._changed()

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of an RBAC object; malformed ones are logged."""
        meta = obj.get("metadata")
        where: Mapping[str, Any] = meta if isinstance(meta, Mapping) else {}
        try:
            if event_type == "DELETED":
                self.delete(str(obj.get("kind")), str(where.get("namespace") or ""), str(where.get("name")))
            elif event_type in ("ADDED", "MODIFIED"):
                self.put(obj)
        except FieldError as e:
            log.warning("rbac_object_ignored", kind=obj.get("kind"), name=where.get("name"),
                        namespace=where.get("namespace"), error=str(e))

    def _changed(self) -> None:
        self._cache.clear()
        self.generation += 1

    def _resolve_aggregation(self) -> None:
        effective: dict[str, tuple[PolicyRule, ...]] = {}
        roles = self._cluster_roles

        def resolve(name: str, visiting: frozenset[str]) -> tuple[PolicyRule, ...]:
            if name in effective:
                return effective[name]
            role = roles[name]
            if role.selectors is None:
                return role.rules
            if name in visiting:
                return ()  # a cycle: an aggregated role's own rules never count (upstream overwrites them)
            out: list[PolicyRule] = []
            seen: set[PolicyRule] = set()
            for sel in role.selectors:
                for other in sorted(roles):
                    if other == name or not _selector_matches(sel, roles[other].labels):
                        continue
                    for rule in resolve(other, visiting | {name}):
                        if rule not in seen:
                            seen.add(rule)
                            out.append(rule)
            result = tuple(out)
            if not visiting:
                effective[name] = result
            return result

        for name in roles:
            effective[name] = resolve(name, frozenset())
        self._effective = effective

    # -- queries --

    def aggregated_rules(self, name: str) -> list[dict[str, list[str]]] | None:
        """The rules an aggregated ClusterRole resolves to (API form), None if not aggregated."""
        role = self._cluster_roles.get(name)
        if role is None or role.selectors is None:
            return None
        return [r.to_api() for r in self._effective.get(name, ())]

    def role_rules(self, kind: str, namespace: str, name: str) -> tuple[PolicyRule, ...] | None:
        """The (aggregated) rules of a Role in `namespace` or of a ClusterRole; None if absent."""
        if kind == "ClusterRole":
            return self._effective.get(name)
        return self._roles.get((namespace, name))

    def _role_rules(self, b: Binding) -> tuple[PolicyRule, ...] | str:
        if b.role_kind == "ClusterRole":
            rules = self._effective.get(b.role_name)
            if rules is None:
                return f"clusterrole.rbac.authorization.k8s.io {_go_q(b.role_name)} not found"
            return rules
        rules = self._roles.get((b.namespace, b.role_name))
        if rules is None:
            return f"role.rbac.authorization.k8s.io {_go_q(b.role_name)} not found"
        return rules

    def resolve(self, user: UserInfo, namespace: str) -> ResolvedRules:
        """The rules that apply to `user` in `namespace` ("" for cluster scope), cached."""
        key = (user.name, user.groups, namespace)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        sa = split_service_account_username(user.name)
        rules: list[tuple[PolicyRule, str]] = []
        errors: list[str] = []
        bindings = [self._crbs[name] for name in sorted(self._cluster_subjects.lookup(user, sa))]
        if namespace and namespace in self._ns_subjects:
            table = self._rbs[namespace]
            bindings.extend(table[name] for name in sorted(self._ns_subjects[namespace].lookup(user, sa)))
        for binding in bindings:
            subject = binding.applies(user, sa)
            if subject is None:
                continue
            resolved = self._role_rules(binding)
            if isinstance(resolved, str):
                errors.append(resolved)
                continue
            source = binding.source(subject)
            rules.extend((r, source) for r in resolved)
        result = ResolvedRules(rules, errors)
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = result
        return result

    def authorize(self, attrs: Attributes) -> AuthorizationDecision:
        resolved = self.resolve(attrs.user, attrs.namespace)
        if attrs.resource_request:
            for rule, source in resolved.resource_candidates(attrs.verb, attrs.api_group):
                if rule.resource_matches(attrs.resource, attrs.subresource) and rule.name_matches(attrs.name):
                    return AuthorizationDecision(Verdict.ALLOW, f"RBAC: allowed by {source}")
        else:
            for rule, source in resolved.url_candidates(attrs.verb):
                if rule.url_matches(attrs.path):
                    return AuthorizationDecision(Verdict.ALLOW, f"RBAC: allowed by {source}")
        if resolved.errors:
            errs = list(dict.fromkeys(resolved.errors))
            text = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
            return AuthorizationDecision(Verdict.NO_OPINION, f"RBAC: {text}")
        return NO_OPINION

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[PolicyRule], list[str]]:
        """Every rule that applies (SelfSubjectRulesReview), and resolution errors."""
        resolved = self.resolve(user, namespace)
        return [r for r, _ in resolved.rules], list(resolved.errors)


__all__ = ["ALLOW", "KINDS", "Binding", "ClusterRole", "RBACIndex", "ResolvedRules", "Subject",
           "parse_binding", "parse_cluster_role"]
