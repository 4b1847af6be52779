"""Service-account tokens served: `POST .../serviceaccounts/<name>/token` (the TokenRequest API,
what `kubectl create token` calls) over the auth room's TokenIssuer and token_request, and the
token authenticator that accepts them back (TokenVerifier), revoking a token whose service
account (or bound pod) is gone or was recreated, as kube-apiserver's --service-account-lookup.

The signing key is `serviceAccountSigningKeyFile` or the one the PKI made on first start; the
verifier also takes the public keys of `serviceAccountKeyFile`. The lookups read an index kept
by watches of serviceaccounts and pods (the server's in-memory objects, no store read per request).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from nodeagent.cluster.apiserver.encoding import json_response
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.apiserver.resources import ApiSettings, read_body
from nodeagent.cluster.auth.config import SecurityConfig
from nodeagent.cluster.auth.noderestriction import NodeRequest, node_restriction
from nodeagent.cluster.auth.pki import PKI
from nodeagent.cluster.auth.serviceaccount import (
    PublicKey,
    TokenIssuer,
    TokenVerifier,
    load_private_key,
    load_public_keys,
)
from nodeagent.cluster.auth.tokenrequest import BoundObjectError, token_request
from nodeagent.cluster.auth.user import UserInfo
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import Subresource
from nodeagent.cluster.registry.kinds.configuration import ServiceAccountStrategy
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.core.clock import Clock
from nodeagent.core.errors import ValidationErrors


class AccountIndex:
    """uids of the service accounts and pods, by (namespace, name): the verifier's lookups."""

    def __init__(self) -> None:
        self._uids: dict[tuple[str, str, str], str] = {}

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        """A watch event of a ServiceAccount or a Pod."""
        raw = obj.get("metadata")
        meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
        key = (str(obj.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if event_type == "DELETED":
            self._uids.pop(key, None)
        else:
            self._uids[key] = str(meta.get("uid") or "")

    def service_account_uid(self, namespace: str, name: str) -> str | None:
        return self._uids.get(("ServiceAccount", namespace, name))

    def pod_uid(self, namespace: str, name: str) -> str | None:
        return self._uids.get(("Pod", namespace, name))


class ServiceAccountTokens:
    """The issuer, the verifier and the settings the TokenRequest handler needs."""

    def __init__(self, config: SecurityConfig, pki: PKI, clock: Clock) -> None:
        if config.service_account_signing_key_file:
            path = config.service_account_signing_key_file
            key = load_private_key(Path(path).read_bytes(), path)
        else:
            key = pki.service_account_key
        public: list[PublicKey] = [key.public_key()]
        for path in config.service_account_key_file:
            public.extend(load_public_keys(Path(path).read_bytes(), path))
        issuers = config.service_account_issuer
        self.audiences = config.api_audiences or issuers
        self.max_expiration = config.service_account_max_token_expiration
        self.index = AccountIndex()
        self.issuer = TokenIssuer(key, issuers[0], clock)
        self.verifier = TokenVerifier(public, issuers=issuers, audiences=self.audiences,
                                      lookup=self.index if config.service_account_lookup else None, clock=clock)


def add_token_request(registry: Registry, settings: ApiSettings, tokens: ServiceAccountTokens) -> None:
    """Serve serviceaccounts/token (create only; authentication.k8s.io/v1 TokenRequest in discovery)."""
    pods = registry.resource("", "v1", "pods")

    async def handler(request: web.Request, accounts: GenericStore, ri: RequestInfo, ctx: Context) -> web.Response:
        if ri.verb != "create":
            raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                              "requested resource")
        body = (await read_body(request)).value
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a TokenRequest object")
        account = await accounts.get(ri.namespace, ri.name)  # 404 serviceaccounts "x" not found
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        ref = spec.get("boundObjectRef") if isinstance(spec, dict) else None
        bound: dict[str, Any] | None = None
        if isinstance(ref, dict) and ref.get("kind") == "Pod" and isinstance(ref.get("name"), str) and ref["name"]:
            try:
                bound = await pods.get(ri.namespace, ref["name"])
            except errors.StatusError as e:
                if e.code != 404:
                    raise
        user = ctx.principal
        if isinstance(user, UserInfo):  # NodeRestriction: a node's token must be bound to its own pod
            refusal = node_restriction(user, NodeRequest("CREATE", "", "serviceaccounts", "token", ri.namespace,
                                                         ri.name, body, bound))
            if refusal is not None:
                if refusal.not_found:
                    raise errors.StatusError(404, "NotFound", refusal.message)
                raise errors.forbidden("serviceaccounts", "", ri.name, refusal.message)
        try:
            out = token_request(body, account, tokens.issuer, api_audiences=tokens.audiences,
                                get_pod=lambda _ns, _name: bound, max_expiration_seconds=tokens.max_expiration)
        except ValidationErrors as e:
            raise errors.invalid("TokenRequest", "authentication.k8s.io", ri.name, e.errors) from None
        except BoundObjectError as e:
            if e.code == 404:
                raise errors.StatusError(404, "NotFound", str(e)) from None
            raise errors.bad_request(str(e)) from None
        return json_response(out, 201, ctx.warnings)

    registry.catalog.add_subresource(ServiceAccountStrategy.info,
                                     Subresource("token", "TokenRequest", ("create",), "authentication.k8s.io", "v1"))
    settings.add_subresource("", "serviceaccounts", "token", handler)
