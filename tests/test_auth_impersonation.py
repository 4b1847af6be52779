"""Impersonation (kubectl --as, --as-group, --as-uid) as kube-apiserver's filter."""

from __future__ import annotations

import pytest

from nodeagent.cluster.auth.authorizer import UnionAuthorizer, build_authorizer
from nodeagent.cluster.auth.impersonation import ImpersonationError, impersonate, is_impersonating
from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.user import UserInfo

ROOT = UserInfo("root", groups=("system:masters", "system:authenticated"))
ALICE = UserInfo("alice", groups=("system:authenticated",))


@pytest.fixture
def authz() -> UnionAuthorizer:
    idx = RBACIndex(bootstrap.cluster_roles() + bootstrap.cluster_role_bindings())
    idx.put({"kind": "ClusterRole", "metadata": {"name": "impersonate-bob"},
             "rules": [{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]}]})
    idx.put({"kind": "ClusterRoleBinding", "metadata": {"name": "alice-as-bob"},
             "roleRef": {"kind": "ClusterRole", "name": "impersonate-bob"},
             "subjects": [{"kind": "User", "name": "alice"}]})
    idx.put({"kind": "RoleBinding", "metadata": {"name": "alice-edit", "namespace": "team"},
             "roleRef": {"kind": "ClusterRole", "name": "edit"}, "subjects": [{"kind": "User", "name": "alice"}]})
    return build_authorizer(["RBAC"], idx)


def test_no_headers_no_impersonation(authz: UnionAuthorizer) -> None:
    headers = [("Authorization", "Bearer x"), ("Accept", "application/json")]
    assert not is_impersonating(headers)
    assert impersonate(ALICE, headers, authz) is None


def test_masters_may_be_anyone(authz: UnionAuthorizer) -> None:
    user = impersonate(ROOT, [("Impersonate-User", "bob"), ("Impersonate-Group", "dev"),
                              ("Impersonate-Group", "ops"), ("Impersonate-Uid", "u-9"),
                              ("Impersonate-Extra-Scopes", "a"), ("Impersonate-Extra-Scopes", "b"),
                              ("Impersonate-Extra-acme.com%2Fteam", "x")], authz)
    assert user == UserInfo("bob", "u-9", ("dev", "ops", "system:authenticated"), user.extra)  # type: ignore[union-attr]
    assert dict(user.extra) == {"scopes": ("a", "b"), "acme.com/team": ("x",)}  # type: ignore[union-attr]


def test_service_account_brings_its_groups(authz: UnionAuthorizer) -> None:
    user = impersonate(ROOT, [("Impersonate-User", "system:serviceaccount:ns1:builder")], authz)
    assert user is not None and user.groups == ("system:serviceaccounts", "system:serviceaccounts:ns1",
                                                "system:authenticated")
    only = impersonate(ROOT, [("Impersonate-User", "system:serviceaccount:ns1:builder"),
                              ("Impersonate-Group", "g")], authz)
    assert only is not None and only.groups == ("g", "system:authenticated")


def test_anonymous(authz: UnionAuthorizer) -> None:
    user = impersonate(ROOT, [("Impersonate-User", "system:anonymous")], authz)
    assert user is not None and user.groups == ("system:unauthenticated",)


def test_allowed_only_for_what_rbac_grants(authz: UnionAuthorizer) -> None:
    user = impersonate(ALICE, [("Impersonate-User", "bob")], authz)
    assert user is not None and user.name == "bob"
    with pytest.raises(ImpersonationError) as exc:
        impersonate(ALICE, [("Impersonate-User", "carol")], authz)
    assert exc.value.code == 403
    assert exc.value.body["message"] == ('users "carol" is forbidden: User "alice" cannot impersonate resource '
                                         '"users" in API group "" at the cluster scope')
    with pytest.raises(ImpersonationError) as exc:
        impersonate(ALICE, [("Impersonate-User", "bob"), ("Impersonate-Group", "system:masters")], authz)
    assert exc.value.body["message"].startswith('groups "system:masters" is forbidden: User "alice" cannot '
                                                'impersonate resource "groups"')
    # edit lets alice impersonate the service accounts of team (upstream's aggregate-to-edit rule)
    sa = impersonate(ALICE, [("Impersonate-User", "system:serviceaccount:team:ci")], authz)
    assert sa is not None and sa.name == "system:serviceaccount:team:ci"
    with pytest.raises(ImpersonationError) as exc:
        impersonate(ALICE, [("Impersonate-User", "system:serviceaccount:other:ci")], authz)
    assert 'in the namespace "other"' in exc.value.body["message"]


def test_groups_without_a_user_are_bad_requests(authz: UnionAuthorizer) -> None:
    with pytest.raises(ImpersonationError) as exc:
        impersonate(ROOT, [("Impersonate-Group", "dev"), ("Impersonate-Uid", "1")], authz)
    assert exc.value.code == 400
    assert exc.value.body["message"] == "requested [Group dev, UID 1] without impersonating a user"
