"""The server config keys of the security pieces, named as kube-apiserver's flags in camelCase
(the lead merges this model into the server's config; keys without an upstream flag say whose
name they borrow). Strict: unknown keys are errors, paths are absolute, durations Go strings.

    tokenAuthFile                  --token-auth-file: the static token CSV
    clientCAFile                   --client-ca-file (default: the generated client CA)
    anonymousAuth                  --anonymous-auth (default false here; upstream true)
    anonymousAuthPaths             AuthenticationConfiguration anonymous.conditions[].path: if set,
                                   anonymous requests are taken only on these paths
    authorizationMode              --authorization-mode (default Node,RBAC, as kubeadm and k3s)
    serviceAccountIssuer           --service-account-issuer (signs with the first, accepts all)
    serviceAccountKeyFile          --service-account-key-file: extra public keys that verify tokens
    serviceAccountSigningKeyFile   --service-account-signing-key-file (default: the generated key)
    serviceAccountMaxTokenExpiration  --service-account-max-token-expiration
    serviceAccountLookup           --service-account-lookup: revoke tokens of deleted accounts
    apiAudiences                   --api-audiences (default: the issuers)
    encryptionProviderConfig       --encryption-provider-config
    tlsCertFile, tlsPrivateKeyFile --tls-cert-file, --tls-private-key-file (default: generated)
    tlsSan                         k3s's --tls-san: more names and addresses for the serving cert
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from nodeagent.cluster.auth.serviceaccount import DEFAULT_ISSUER, MIN_EXPIRATION_SECONDS
from nodeagent.daemonkit.configfile import AbsolutePath, GoDuration

AuthorizationMode = Literal["Node", "RBAC", "AlwaysAllow", "AlwaysDeny"]


class SecurityConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    token_auth_file: AbsolutePath | None = None
    client_ca_file: AbsolutePath | None = Field(default=None, alias="clientCAFile")
    anonymous_auth: bool = False
    anonymous_auth_paths: tuple[str, ...] = ()
    authorization_mode: tuple[AuthorizationMode, ...] = ("Node", "RBAC")
    service_account_issuer: tuple[str, ...] = (DEFAULT_ISSUER,)
    service_account_key_file: tuple[AbsolutePath, ...] = ()
    service_account_signing_key_file: AbsolutePath | None = None
    service_account_max_token_expiration: GoDuration | None = None
    service_account_lookup: bool = True
    api_audiences: tuple[str, ...] = ()
    encryption_provider_config: AbsolutePath | None = None
    tls_cert_file: AbsolutePath | None = None
    tls_private_key_file: AbsolutePath | None = None
    tls_san: tuple[str, ...] = ()

    @field_validator("service_account_issuer", mode="before")
    @classmethod
    def _one_or_more(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("anonymous_auth_paths")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for p in value:
            if not p.startswith("/"):
                raise ValueError(f'each path must start with "/", got "{p}"')
        return value

    @model_validator(mode="after")
    def _cross(self) -> SecurityConfig:
        seen: set[str] = set()
        for m in self.authorization_mode:
            if m in seen:
                raise ValueError(f'authorizationMode: "{m}" is specified more than once')
            seen.add(m)
        if not self.authorization_mode:
            raise ValueError("authorizationMode: at least one authorization mode must be given")
        if not self.service_account_issuer or not all(self.service_account_issuer):
            raise ValueError("serviceAccountIssuer: must not be empty")
        if (self.tls_cert_file is None) != (self.tls_private_key_file is None):
            raise ValueError("tlsCertFile: tlsCertFile and tlsPrivateKeyFile must be set together")
        if self.anonymous_auth_paths and not self.anonymous_auth:
            raise ValueError("anonymousAuthPaths: needs anonymousAuth: true")
        exp = self.service_account_max_token_expiration
        if exp is not None and exp < MIN_EXPIRATION_SECONDS:
            raise ValueError("serviceAccountMaxTokenExpiration: must be at least 10m")
        return self

    @property
    def audiences(self) -> tuple[str, ...]:
        return self.api_audiences or self.service_account_issuer
