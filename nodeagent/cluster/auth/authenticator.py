"""The request authenticator chain, in kube-apiserver's order and with its rules:

1. a verified client certificate (x509), then bearer tokens: the `Authorization: Bearer` header,
   or for WebSocket clients the `base64url.bearer.authorization.k8s.io.<token>` subprotocol;
   each token authenticator (token file, signed tokens) is asked in turn; the first user wins;
2. a bearer token that none of them knows is 401 ("invalid bearer token"), and so is one that an
   authenticator rejects (expired, revoked): FailOnError, so a wrong token is 401 even where
   anonymous requests are allowed, and a misconfigured client fails loudly;
3. without credentials: `system:anonymous` in `system:unauthenticated` when anonymous access is
   configured (optionally only for some paths, as AuthenticationConfiguration's anonymous
   conditions), else 401;
4. every authenticated user gets the group `system:authenticated` (not anonymous ones).

`authenticate` never raises: an AuthnResult has the user, or the reason for the 401 (for the
server's log, never shown to the client and never holding the credential). Pure and fast: the
authenticators look only at memory, so it runs on the event loop.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from nodeagent.cluster.auth.redact import WEBSOCKET_PROTOCOL_PREFIX
from nodeagent.cluster.auth.request import AuthnRequest
from nodeagent.cluster.auth.user import ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, UserInfo

INVALID_TOKEN = "invalid bearer token"


class AuthenticationError(Exception):
    """Credentials were presented and are wrong: 401, whatever else the request carries."""


class RequestAuthenticator(Protocol):
    """Authenticates from request facts: a user, None (no credentials of its kind), or raises
    AuthenticationError (credentials of its kind that are wrong)."""

    def authenticate(self, request: AuthnRequest) -> UserInfo | None: ...


class TokenAuthenticator(Protocol):
    """Authenticates a bearer token: a user, None (not a token it knows), or raises ValueError
    (a token it knows that is not valid, e.g. expired)."""

    def authenticate_token(self, token: str) -> UserInfo | None: ...


@dataclass(frozen=True, slots=True)
class AuthnResult:
    user: UserInfo | None
    error: str = ""

    @property
    def authenticated(self) -> bool:
        return self.user is not None


def bearer_token(request: AuthnRequest) -> str | None:
    """The bearer token of a request, or None: from `Authorization: Bearer <t>` (upstream's
    parsing: trimmed, the scheme case-insensitive, an empty token is no token), else from a
    WebSocket subprotocol."""
    auth = (request.header("Authorization") or "").strip()
    if auth:
        parts = auth.split(" ", 2)
        if len(parts) >= 2 and parts[0].lower() == "bearer" and parts[1]:
            return parts[1]
        return None
    protocols = request.header("Sec-WebSocket-Protocol")
    if protocols:
        for proto in (p.strip() for p in protocols.split(",")):
            if proto.startswith(WEBSOCKET_PROTOCOL_PREFIX):
                encoded = proto[len(WEBSOCKET_PROTOCOL_PREFIX):]
                try:
                    token = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
                except (binascii.Error, UnicodeDecodeError):
                    raise AuthenticationError(INVALID_TOKEN) from None
                if token:
                    return token
    return None


class BearerTokenAuthenticator:
    """Bearer tokens asked of each token authenticator in turn (kube-apiserver's token union)."""

    def __init__(self, authenticators: Sequence[TokenAuthenticator]) -> None:
        self.authenticators = tuple(authenticators)

    def authenticate(self, request: AuthnRequest) -> UserInfo | None:
        token = bearer_token(request)
        if token is None:
            return None
        errors: list[str] = []
        for a in self.authenticators:
            try:
                user = a.authenticate_token(token)
            except ValueError as e:
                errors.append(str(e))
                continue
            if user is not None:
                return user
        raise AuthenticationError("; ".join(errors) if errors else INVALID_TOKEN)


class Anonymous:
    """system:anonymous for requests without credentials; `paths` limits it (empty: every path)."""

    def __init__(self, paths: Collection[str] = ()) -> None:
        self.paths = frozenset(paths)

    def authenticate(self, request: AuthnRequest) -> UserInfo | None:
        if self.paths and request.path not in self.paths:
            return None
        return UserInfo(name=ANONYMOUS, groups=(ALL_UNAUTHENTICATED,))


def _with_authenticated_group(user: UserInfo) -> UserInfo:
    if user.name == ANONYMOUS or ALL_AUTHENTICATED in user.groups or ALL_UNAUTHENTICATED in user.groups:
        return user
    return user.with_group(ALL_AUTHENTICATED)


class Authenticator:
    """The chain the API server asks once per request (see the module docstring)."""

    def __init__(self, authenticators: Sequence[RequestAuthenticator], anonymous: Anonymous | None = None) -> None:
        self.authenticators = tuple(authenticators)
        self.anonymous = anonymous

    def authenticate(self, request: AuthnRequest) -> AuthnResult:
        errors: list[str] = []
        for a in self.authenticators:
            try:
                user = a.authenticate(request)
            except (AuthenticationError, ValueError) as e:
                errors.append(str(e) or INVALID_TOKEN)
                continue
            if user is not None:
                return AuthnResult(_with_authenticated_group(user))
        if errors:
            return AuthnResult(None, "; ".join(errors))
        if self.anonymous is not None:
            user = self.anonymous.authenticate(request)
            if user is not None:
                return AuthnResult(user)
        return AuthnResult(None, "no credentials (anonymous requests are not allowed)")
