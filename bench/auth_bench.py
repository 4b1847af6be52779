"""Security pieces per request, in process: what each costs the API server at 10,000 requests/s.

Cases (each prints requests/s and the mean cost in µs; nothing is asserted):
  rbac-hit      authorize against the bootstrap policy plus N namespaces, each with its own
                RoleBinding of `edit` to a user and a group binding of `view`, and 200
                ClusterRoleBindings to other users: users spread over the namespaces, verbs and
                resources varied; resolved rules cached (the steady state between RBAC changes)
  rbac-cold     the same requests with the cache dropped before each (the cost after a change)
  rbac-denied   requests no rule allows (the whole candidate list is scanned)
  rbac-rescan   the allowed requests the way upstream resolves them, every ClusterRoleBinding and
                every RoleBinding of the namespace checked per request (the baseline the index beats)
  node          the Node authorizer: an agent reading its pods' secrets and writing pod status
  chain         the full chain (system:masters, Node, RBAC) as the server builds it
  tokenfile     bearer token from a 1,000-line token file (the whole authenticator chain)
  sa-cached     a signed (ES256) service-account token seen before (verified once, then cached)
  sa-verify     the same with the cache off: one ECDSA verification per request
  aesgcm/secretbox  encrypt + decrypt of a 1 KiB Secret value

    .venv/bin/python bench/auth_bench.py [--namespaces 1000] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import time
from collections.abc import Callable

from nodeagent.cluster.auth.attributes import Attributes
from nodeagent.cluster.auth.authenticator import Authenticator, BearerTokenAuthenticator
from nodeagent.cluster.auth.authorizer import build_authorizer
from nodeagent.cluster.auth.encryption import parse_encryption_config
from nodeagent.cluster.auth.node import NodeAuthorizer, NodeGraph
from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.request import AuthnRequest
from nodeagent.cluster.auth.serviceaccount import DEFAULT_ISSUER, TokenIssuer, TokenVerifier, generate_signing_key
from nodeagent.cluster.auth.tokenfile import TokenFile, parse_token_file
from nodeagent.cluster.auth.user import UserInfo, split_service_account_username
from nodeagent.cluster.auth.x509 import X509Authenticator

RESOURCES = [("", "pods"), ("apps", "deployments"), ("", "configmaps"), ("", "secrets"), ("", "services")]
KEY_PATH = "/registry/core/secrets/ns/s"
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]


def run(name: str, fn: Callable[[int], object], n_inputs: int, seconds: float) -> None:
    fn(0)  # warm up
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i in range(1000):
            fn(i % n_inputs)
        done += 1000
    elapsed = time.perf_counter() - start
    print(f"{name:12s} {done / elapsed:>12,.0f} req/s  {elapsed / done * 1e6:8.2f} µs/req")


def policy(namespaces: int) -> tuple[RBACIndex, list[UserInfo]]:
    objs = bootstrap.cluster_roles() + bootstrap.cluster_role_bindings()
    users = []
    for i in range(namespaces):
        ns = f"ns-{i}"
        objs.append({"kind": "RoleBinding", "metadata": {"name": "editors", "namespace": ns},
                     "roleRef": {"kind": "ClusterRole", "name": "edit"},
                     "subjects": [{"kind": "User", "name": f"user-{i}"}]})
        objs.append({"kind": "RoleBinding", "metadata": {"name": "viewers", "namespace": ns},
                     "roleRef": {"kind": "ClusterRole", "name": "view"},
                     "subjects": [{"kind": "Group", "name": f"team-{i % 50}"}]})
        users.append(UserInfo(f"user-{i}", groups=(f"team-{i % 50}", "system:authenticated")))
    for i in range(200):
        objs.append({"kind": "ClusterRoleBinding", "metadata": {"name": f"other-{i}"},
                     "roleRef": {"kind": "ClusterRole", "name": "view"},
                     "subjects": [{"kind": "User", "name": f"operator-{i}"}]})
    return RBACIndex(objs), users


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--namespaces", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    rng = random.Random(1)
    idx, users = policy(args.namespaces)
    n_bindings = args.namespaces * 2 + 200 + len(bootstrap.cluster_role_bindings())
    print(f"policy: {args.namespaces} namespaces, {n_bindings} bindings, {len(users)} users")

    allowed = []
    for _ in range(5000):
        i = rng.randrange(len(users))
        group, resource = rng.choice(RESOURCES)
        allowed.append(Attributes(users[i], rng.choice(VERBS), api_group=group, resource=resource,
                                  namespace=f"ns-{i}", name="x"))
    denied = [Attributes(a.user, "update", resource="resourcequotas", namespace=a.namespace, name="q")
              for a in allowed]
    assert all(idx.authorize(a).allowed for a in allowed)
    run("rbac-hit", lambda i: idx.authorize(allowed[i]), len(allowed), args.seconds)

    def cold(i: int) -> object:
        idx._cache.clear()
        return idx.authorize(allowed[i])

    run("rbac-cold", cold, len(allowed), args.seconds)
    run("rbac-denied", lambda i: idx.authorize(denied[i]), len(denied), args.seconds)

    def rescan(i: int) -> bool:
        # what upstream's resolver does per request: every ClusterRoleBinding, then every
        # RoleBinding of the namespace, subjects checked one by one (the rules are already parsed)
        a = allowed[i]
        sa = split_service_account_username(a.user.name)
        bindings = [*idx._crbs.values(), *idx._rbs.get(a.namespace, {}).values()]
        for b in bindings:
            if b.applies(a.user, sa) is None:
                continue
            for rule in idx._effective.get(b.role_name, ()):
                if rule.allows(a):
                    return True
        return False

    run("rbac-rescan", rescan, len(allowed), args.seconds)

    graph = NodeGraph()
    for p in range(110):
        graph.put_pod({"kind": "Pod", "metadata": {"name": f"p{p}", "namespace": "ns-0"},
                       "spec": {"nodeName": "n1", "volumes": [{"name": "v", "secret": {"secretName": f"s{p}"}}]}})
    node_user = UserInfo("system:node:n1", groups=("system:nodes", "system:authenticated"))
    node_reqs = [Attributes(node_user, "get", resource="secrets", namespace="ns-0", name=f"s{p}") for p in range(110)]
    node_reqs += [Attributes(node_user, "patch", resource="pods", subresource="status", namespace="ns-0",
                             name=f"p{p}") for p in range(110)]
    node = NodeAuthorizer(graph)
    run("node", lambda i: node.authorize(node_reqs[i]), len(node_reqs), args.seconds)
    chain = build_authorizer(["Node", "RBAC"], idx, graph)
    mixed = allowed[:2000] + node_reqs
    run("chain", lambda i: chain.authorize(mixed[i]), len(mixed), args.seconds)

    lines = "".join(f"token-{i:04d}-{os.urandom(8).hex()},user-{i},uid-{i},team\n" for i in range(1000))
    entries, _ = parse_token_file(lines, "bench")
    tokens = TokenFile(entries)
    key = generate_signing_key()
    verifier = TokenVerifier([key.public_key()])
    authn = Authenticator([X509Authenticator(), BearerTokenAuthenticator([tokens, verifier])])
    reqs = [AuthnRequest("/api/v1/pods", {"Authorization": f"Bearer {e.token}"}) for e in entries]
    run("tokenfile", lambda i: authn.authenticate(reqs[i]), len(reqs), args.seconds)
    issuer = TokenIssuer(key)
    sa_tokens = [issuer.service_account_token("ns-0", f"sa-{i}", f"u{i}", audiences=[DEFAULT_ISSUER])
                 for i in range(100)]
    sa_reqs = [AuthnRequest("/api/v1/pods", {"Authorization": f"Bearer {t}"}) for t in sa_tokens]
    run("sa-cached", lambda i: authn.authenticate(sa_reqs[i]), len(sa_reqs), args.seconds)
    uncached = TokenVerifier([key.public_key()], cache_size=0)
    run("sa-verify", lambda i: uncached.authenticate_token(sa_tokens[i]), len(sa_tokens), args.seconds)

    value = os.urandom(1024)
    secret = base64.b64encode(os.urandom(32)).decode()
    for provider in ("aesgcm", "secretbox"):
        conf = parse_encryption_config({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
                                        "resources": [{"resources": ["secrets"], "providers": [
                                            {provider: {"keys": [{"name": "k", "secret": secret}]}}]}]}, "bench")
        run(provider, lambda i, c=conf: c.decrypt(KEY_PATH, c.encrypt(KEY_PATH, value)), 1, args.seconds)


if __name__ == "__main__":
    main()
