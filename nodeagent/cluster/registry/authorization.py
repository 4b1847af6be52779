"""Authorization as the registry asks for it: the auth room's Attributes, Authorizer and
AuthorizationDecision (cluster/auth/attributes.py, cluster/auth/authorizer.py).

A registry given no authorizer runs AuthorizationOff, kube-apiserver's
`--authorization-mode=AlwaysAllow` for a server without security: every request allowed, and an
access review says why in its status.reason. (With `security` set, the API server answers the
reviews with the auth room's chain before they reach the registry.)
"""

from __future__ import annotations

from nodeagent.cluster.auth.attributes import Attributes, AuthorizationDecision, Verdict
from nodeagent.cluster.auth.authorizer import Authorizer as Authorizer

OFF = AuthorizationDecision(Verdict.ALLOW, "authorization is off (AlwaysAllow)")


class AuthorizationOff:
    """Every request is allowed: the server runs without authorization (loopback, no authentication)."""

    def authorize(self, attrs: Attributes) -> AuthorizationDecision:
        return OFF
