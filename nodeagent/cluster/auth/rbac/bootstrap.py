"""The RBAC policy a new cluster starts with: kube-apiserver's bootstrap ClusterRoles and
ClusterRoleBindings (plugin/pkg/auth/authorizer/rbac/bootstrappolicy), the ones kubectl users
and agents expect: cluster-admin (bound to system:masters), the user-facing admin/edit/view
(aggregated from system:aggregate-to-*), system:discovery, system:basic-user,
system:public-info-viewer, system:monitoring, system:auth-delegator, system:node (the rules the
Node authorizer applies to agents for everything it does not subdivide), system:node-proxier,
system:kube-scheduler, system:kube-controller-manager, system:volume-scheduler and
system:service-account-issuer-discovery.

The rules are upstream's (the testdata the upstream tests compare against), written as data;
groups this server does not serve yet stay in, as upstream, so objects created later are covered.
The server creates these objects when they are missing (the `rbac.authorization.kubernetes.io/
autoupdate` annotation, as upstream, says they may be reconciled) and never deletes them.
"""

from __future__ import annotations

from typing import Any

from nodeagent.cluster.auth.attributes import RBAC_GROUP
from nodeagent.cluster.auth.user import (
    ALL_AUTHENTICATED,
    ALL_UNAUTHENTICATED,
    KUBE_CONTROLLER_MANAGER,
    KUBE_PROXY,
    KUBE_SCHEDULER,
    MONITORING_GROUP,
    SERVICE_ACCOUNTS_GROUP,
    SYSTEM_MASTERS,
)

AGGREGATE_TO_ADMIN = "rbac.authorization.k8s.io/aggregate-to-admin"
AGGREGATE_TO_EDIT = "rbac.authorization.k8s.io/aggregate-to-edit"
AGGREGATE_TO_VIEW = "rbac.authorization.k8s.io/aggregate-to-view"
BOOTSTRAP_LABEL = {"kubernetes.io/bootstrapping": "rbac-defaults"}
AUTOUPDATE = {"rbac.authorization.kubernetes.io/autoupdate": "true"}

READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "patch", "update"]
READ_WRITE = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
EVENTS = ["create", "patch", "update"]


def _r(verbs: list[str], groups: list[str], resources: list[str], names: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"verbs": list(verbs), "apiGroups": list(groups), "resources": list(resources)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


def _urls(verbs: list[str], urls: list[str]) -> dict[str, Any]:
    return {"verbs": list(verbs), "nonResourceURLs": list(urls)}


_ROLES: list[tuple[str, dict[str, str], list[dict[str, Any]] | None, str | None]] = [
    # name, extra labels, rules, aggregation label (for aggregated roles, rules is None)
    ("cluster-admin", {}, [_r(["*"], ["*"], ["*"]), _urls(["*"], ["*"])], None),
    ("admin", {}, None, AGGREGATE_TO_ADMIN),
    ("edit", {AGGREGATE_TO_ADMIN: "true"}, None, AGGREGATE_TO_EDIT),
    ("view", {AGGREGATE_TO_EDIT: "true"}, None, AGGREGATE_TO_VIEW),
    ("system:aggregate-to-admin", {AGGREGATE_TO_ADMIN: "true"}, [
        _r(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
        _r(READ_WRITE, [RBAC_GROUP], ["rolebindings", "roles"]),
    ], None),
    ("system:aggregate-to-edit", {AGGREGATE_TO_EDIT: "true"}, [
        _r(READ, [""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"]),
        _r(["impersonate"], [""], ["serviceaccounts"]),
        _r(WRITE, [""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
        _r(["create"], [""], ["pods/eviction"]),
        _r(WRITE, [""], ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
                         "replicationcontrollers/scale", "secrets", "serviceaccounts", "services",
                         "services/proxy"]),
        _r(["create"], [""], ["serviceaccounts/token"]),
        _r(WRITE, ["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                             "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"]),
        _r(WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
        _r(WRITE, ["batch"], ["cronjobs", "jobs"]),
        _r(WRITE, ["extensions"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                                   "ingresses", "networkpolicies", "replicasets", "replicasets/scale",
                                   "replicationcontrollers/scale"]),
        _r(WRITE, ["policy"], ["poddisruptionbudgets"]),
        _r(WRITE, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
        _r(READ_WRITE, ["coordination.k8s.io"], ["leases"]),
    ], None),
    ("system:aggregate-to-view", {AGGREGATE_TO_VIEW: "true"}, [
        _r(READ, [""], ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
                        "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
                        "services/status"]),
        _r(READ, [""], ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
                        "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"]),
        _r(READ, [""], ["namespaces"]),
        _r(READ, ["discovery.k8s.io"], ["endpointslices"]),
        _r(READ, ["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments",
                            "deployments/scale", "deployments/status", "replicasets", "replicasets/scale",
                            "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"]),
        _r(READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        _r(READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
        _r(READ, ["extensions"], ["daemonsets", "daemonsets/status", "deployments", "deployments/scale",
                                  "deployments/status", "ingresses", "ingresses/status", "networkpolicies",
                                  "replicasets", "replicasets/scale", "replicasets/status",
                                  "replicationcontrollers/scale"]),
        _r(READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        _r(READ, ["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"]),
    ], None),
    ("system:auth-delegator", {}, [
        _r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        _r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
    ], None),
    ("system:basic-user", {}, [
        _r(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
        _r(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]),
    ], None),
    ("system:discovery", {}, [
        _urls(["get"], ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
                        "/readyz", "/version", "/version/"]),
    ], None),
    ("system:public-info-viewer", {}, [
        _urls(["get"], ["/healthz", "/livez", "/readyz", "/version", "/version/"]),
    ], None),
    ("system:monitoring", {}, [
        _urls(["get"], ["/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz",
                        "/readyz/*"]),
    ], None),
    ("system:service-account-issuer-discovery", {}, [
        _urls(["get"], ["/.well-known/openid-configuration", "/openid/v1/jwks"]),
    ], None),
    ("system:node", {}, [
        _r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        _r(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews", "subjectaccessreviews"]),
        _r(READ, [""], ["services"]),
        _r(["create", "get", "list", "watch"], [""], ["nodes"]),
        _r(["patch", "update"], [""], ["nodes/status"]),
        _r(["patch", "update"], [""], ["nodes"]),
        _r(EVENTS, [""], ["events"]),
        _r(READ, [""], ["pods"]),
        _r(["create", "delete"], [""], ["pods"]),
        _r(["patch", "update"], [""], ["pods/status"]),
        _r(["create"], [""], ["pods/eviction"]),
        _r(READ, [""], ["configmaps", "secrets"]),
        _r(["get"], [""], ["persistentvolumeclaims", "persistentvolumes"]),
        _r(["get"], [""], ["endpoints"]),
        _r(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"]),
        _r(["create", "delete", "get", "patch", "update"], ["coordination.k8s.io"], ["leases"]),
        _r(["get"], ["storage.k8s.io"], ["volumeattachments"]),
        _r(["create"], [""], ["serviceaccounts/token"]),
        _r(["get", "patch", "update"], [""], ["persistentvolumeclaims/status"]),
        _r(READ, ["storage.k8s.io"], ["csidrivers"]),
        _r(["create", "delete", "get", "patch", "update"], ["storage.k8s.io"], ["csinodes"]),
        _r(READ, ["node.k8s.io"], ["runtimeclasses"]),
    ], None),
    ("system:node-proxier", {}, [
        _r(["list", "watch"], [""], ["endpoints", "services"]),
        _r(READ, [""], ["nodes"]),
        _r(EVENTS, ["", "events.k8s.io"], ["events"]),
        _r(["list", "watch"], ["discovery.k8s.io"], ["endpointslices"]),
    ], None),
    ("system:kube-scheduler", {}, [
        _r(EVENTS, ["", "events.k8s.io"], ["events"]),
        _r(["create"], ["coordination.k8s.io"], ["leases"]),
        _r(["get", "update"], ["coordination.k8s.io"], ["leases"], ["kube-scheduler"]),
        _r(READ, [""], ["nodes"]),
        _r(["delete", "get", "list", "watch"], [""], ["pods"]),
        _r(["create"], [""], ["bindings", "pods/binding"]),
        _r(["patch", "update"], [""], ["pods/status"]),
        _r(READ, [""], ["replicationcontrollers", "services"]),
        _r(READ, ["apps", "extensions"], ["replicasets"]),
        _r(READ, ["apps"], ["statefulsets"]),
        _r(READ, ["policy"], ["poddisruptionbudgets"]),
        _r(READ, [""], ["persistentvolumeclaims", "persistentvolumes"]),
        _r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        _r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
        _r(READ, ["storage.k8s.io"], ["csinodes"]),
        _r(READ, [""], ["namespaces"]),
        _r(READ, ["storage.k8s.io"], ["csidrivers"]),
        _r(READ, ["storage.k8s.io"], ["csistoragecapacities"]),
    ], None),
    ("system:volume-scheduler", {}, [
        _r(["get", "list", "patch", "update", "watch"], [""], ["persistentvolumes"]),
        _r(READ, ["storage.k8s.io"], ["storageclasses"]),
        _r(["get", "list", "patch", "update", "watch"], [""], ["persistentvolumeclaims"]),
    ], None),
    ("system:kube-controller-manager", {}, [
        _r(EVENTS, ["", "events.k8s.io"], ["events"]),
        _r(["create"], ["coordination.k8s.io"], ["leases"]),
        _r(["get", "update"], ["coordination.k8s.io"], ["leases"], ["kube-controller-manager"]),
        _r(["create"], [""], ["secrets", "serviceaccounts"]),
        _r(["delete"], [""], ["secrets"]),
        _r(["get"], [""], ["configmaps", "namespaces", "secrets", "serviceaccounts"]),
        _r(["update"], [""], ["secrets", "serviceaccounts"]),
        _r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        _r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
        _r(["list", "watch"], ["*"], ["*"]),
        _r(["create"], [""], ["serviceaccounts/token"]),
    ], None),
]

# name (of both the binding and its ClusterRole), subjects as (kind, name[, namespace])
_BINDINGS: list[tuple[str, list[tuple[str, ...]]]] = [
    ("cluster-admin", [("Group", SYSTEM_MASTERS)]),
    ("system:discovery", [("Group", ALL_AUTHENTICATED)]),
    ("system:basic-user", [("Group", ALL_AUTHENTICATED)]),
    ("system:public-info-viewer", [("Group", ALL_AUTHENTICATED), ("Group", ALL_UNAUTHENTICATED)]),
    ("system:monitoring", [("Group", MONITORING_GROUP)]),
    ("system:service-account-issuer-discovery", [("Group", SERVICE_ACCOUNTS_GROUP)]),
    ("system:node-proxier", [("User", KUBE_PROXY)]),
    ("system:kube-controller-manager", [("User", KUBE_CONTROLLER_MANAGER)]),
    ("system:kube-scheduler", [("User", KUBE_SCHEDULER)]),
    ("system:volume-scheduler", [("User", KUBE_SCHEDULER)]),
    # upstream keeps this binding without subjects since the Node authorizer (1.8): agents get
    # the system:node rules through the Node authorizer, which also limits them to their node
    ("system:node", []),
]


def _metadata(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "labels": {**BOOTSTRAP_LABEL, **labels}, "annotations": dict(AUTOUPDATE)}


def cluster_roles() -> list[dict[str, Any]]:
    """The bootstrap ClusterRoles (fresh dicts, the caller may keep them)."""
    out = []
    for name, labels, rules, aggregate in _ROLES:
        role: dict[str, Any] = {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
                                "metadata": _metadata(name, labels)}
        if aggregate is not None:
            role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {aggregate: "true"}}]}
            role["rules"] = []
        else:
            role["rules"] = [dict(r) for r in rules or []]
        out.append(role)
    return out


def cluster_role_bindings() -> list[dict[str, Any]]:
    out = []
    for name, subjects in _BINDINGS:
        subs = []
        for s in subjects:
            sub: dict[str, str] = {"kind": s[0], "name": s[1]}
            if s[0] == "ServiceAccount":
                sub["namespace"] = s[2]
            else:
                sub["apiGroup"] = RBAC_GROUP
            subs.append(sub)
        binding: dict[str, Any] = {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding",
                                   "metadata": _metadata(name, {}),
                                   "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name}}
        if subs:
            binding["subjects"] = subs
        out.append(binding)
    return out


def node_rules() -> list[dict[str, Any]]:
    """The rules of system:node: what the Node authorizer allows an agent outside the resources
    it subdivides (upstream NodeRules)."""
    for name, _labels, rules, _agg in _ROLES:
        if name == "system:node":
            return [dict(r) for r in rules or []]
    raise AssertionError("system:node is in the bootstrap policy")
