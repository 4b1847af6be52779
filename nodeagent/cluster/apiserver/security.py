"""Authentication and authorization of every request, in kube-apiserver's filter order, with the
auth room's pieces (cluster/auth/): authenticate (client certificate, static token file,
anonymous when configured) -> impersonation (`kubectl --as`) -> the request's attributes ->
authorize (system:masters, Node, RBAC per `authorizationMode`) -> the handler. A request without
a user is 401, one the authorizers refuse is 403, both with kube-apiserver's Status text.

The access reviews (`kubectl auth can-i`) are answered here too, by the auth room's reviews with
the same authorizer chain; kubectl posts them as protobuf, decoded by the auth room.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from nodeagent.cluster.apiserver.encoding import json_response
from nodeagent.cluster.auth import protobuf
from nodeagent.cluster.auth import reviews as auth_reviews
from nodeagent.cluster.auth.attributes import RBAC_GROUP, Attributes, forbidden_status, unauthorized_status
from nodeagent.cluster.auth.authenticator import Anonymous, Authenticator, BearerTokenAuthenticator, TokenAuthenticator
from nodeagent.cluster.auth.authorizer import Authorizer, build_authorizer
from nodeagent.cluster.auth.escalation import EscalationCheck
from nodeagent.cluster.auth.impersonation import ImpersonationError, impersonate
from nodeagent.cluster.auth.node import NodeGraph
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.request import AuthnRequest, CertificateError, verified_peer_certificate
from nodeagent.cluster.auth.requestinfo import RequestInfoError, request_attributes
from nodeagent.cluster.auth.tokenfile import TokenFile
from nodeagent.cluster.auth.user import UserInfo
from nodeagent.cluster.auth.x509 import X509Authenticator
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.options import Context
from nodeagent.core.errors import ValidationErrors

log = structlog.get_logger(__name__)

STREAMING_SUBRESOURCES = frozenset({"exec", "attach", "portforward"})
USER_KEY = "nodeagent.user"  # where the request's (impersonated) user is kept for the handlers
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Security:
    authenticator: Authenticator
    authorizer: Authorizer
    rbac: RBACIndex | None
    graph: NodeGraph | None


def build_security(*, token_file: str | None, anonymous: bool, anonymous_paths: tuple[str, ...],
                   modes: tuple[str, ...], token_authenticators: Sequence[TokenAuthenticator] = ()) -> Security:
    """`token_authenticators`: more bearer-token authenticators after the token file (the
    service-account token verifier)."""
    chain: list[Any] = [X509Authenticator()]
    tokens: list[TokenAuthenticator] = [TokenFile.load(token_file)] if token_file else []
    tokens.extend(token_authenticators)
    if tokens:
        chain.append(BearerTokenAuthenticator(tokens))
    authenticator = Authenticator(chain, Anonymous(anonymous_paths) if anonymous else None)
    rbac = RBACIndex() if "RBAC" in modes else None
    graph = NodeGraph() if "Node" in modes else None
    return Security(authenticator, build_authorizer(modes, rbac, graph), rbac, graph)


def request_user(request: web.Request) -> UserInfo | None:
    user = request.get(USER_KEY)
    return user if isinstance(user, UserInfo) else None


def security_middleware(security: Security) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
        try:
            peer = verified_peer_certificate(ssl_object if isinstance(ssl_object, ssl.SSLObject) else None)
        except CertificateError as e:
            log.info("authentication_failed", path=request.path, error=str(e))
            return json_response(unauthorized_status(), 401)
        result = security.authenticator.authenticate(AuthnRequest(request.path, request.headers, peer))
        if result.user is None:
            if result.error:
                log.info("authentication_failed", path=request.path, error=result.error)
            return json_response(unauthorized_status(), 401)
        try:
            user = impersonate(result.user, request.headers.items(), security.authorizer) or result.user
        except ImpersonationError as e:
            return json_response(e.body, e.code)
        try:
            attrs = request_attributes(user, request.method, request.path, dict(request.query))
        except RequestInfoError:
            raise errors.path_not_found() from None
        decision = security.authorizer.authorize(attrs)
        if decision.allowed and attrs.verb == "get" and _streaming_upgrade(request, attrs):
            attrs = dataclasses.replace(attrs, verb="create")
            decision = security.authorizer.authorize(attrs)
        if not decision.allowed:
            return json_response(forbidden_status(attrs, decision.reason), 403)
        request[USER_KEY] = user
        return await handler(request)

    return middleware


def _streaming_upgrade(request: web.Request, attrs: Attributes) -> bool:
    """A WebSocket GET that starts a pod's stream (exec, attach, portforward) needs `create` as well,
    as SPDY's POST does (kube 1.35's AuthorizePodWebsocketUpgradeCreatePermission, on by default)."""
    return (attrs.resource_request and attrs.api_group == "" and attrs.resource == "pods"
            and attrs.subresource in STREAMING_SUBRESOURCES
            and request.headers.get("Upgrade", "").lower() == "websocket")


async def review(request: web.Request, security: Security, kind: str) -> web.Response:
    """POST of an access review: the auth room's answer (201), never stored."""
    raw = await request.read()
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    try:
        if ctype == protobuf.CONTENT_TYPE:
            body: Any = protobuf.decode(raw)
        else:
            from nodeagent.cluster.schema.decode import DecodeError, decode
            try:
                body = decode(raw, ctype or "application/json").value
            except DecodeError as e:
                raise errors.bad_request(f"error decoding the request body: {e}") from None
    except protobuf.ProtobufError as e:
        raise errors.bad_request(f"error decoding the request body: {e}") from None
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of the request must be a {kind} object")
    user = request_user(request)
    try:
        if kind == "SelfSubjectAccessReview":
            if user is None:
                raise errors.bad_request("no user to review")
            out = auth_reviews.self_subject_access_review(body, user, security.authorizer)
        else:
            out = auth_reviews.subject_access_review(body, security.authorizer)
    except ValidationErrors as e:
        raise errors.invalid(kind, "authorization.k8s.io", "", e.errors) from None
    except auth_reviews.NamespaceMismatch as e:
        raise errors.bad_request(str(e)) from None
    return json_response(out, 201)


class EscalationAdmission:
    """RBAC's escalation prevention before every create and update of the four RBAC kinds: nobody
    grants through a role or binding what they do not hold (the auth room's EscalationCheck)."""

    def __init__(self, security: Security) -> None:
        assert security.rbac is not None
        self.check = EscalationCheck(security.rbac, security.authorizer)

    async def admit(self, operation: str, info: ResourceInfo, obj: dict[str, Any], old: dict[str, Any] | None, *,
                    subresource: str, ctx: Context) -> None:
        if info.group != RBAC_GROUP or operation not in ("CREATE", "UPDATE") or not isinstance(ctx.principal, UserInfo):
            return
        message = self.check.check(ctx.principal, obj, old)
        if message is not None:
            name = str((obj.get("metadata") or {}).get("name") or "")
            details = {"name": name, "group": info.group, "kind": info.plural} if name else \
                {"group": info.group, "kind": info.plural}
            raise errors.StatusError(403, "Forbidden", message, details)
