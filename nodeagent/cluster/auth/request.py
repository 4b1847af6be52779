"""What a request offers to authenticate with: its headers and the peer certificate the TLS
layer verified. Built once per request by the API server; the authenticators only read it."""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from cryptography import x509
from cryptography.x509.oid import NameOID

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class CertificateError(ValueError):
    """A peer certificate this server cannot take an identity from."""


@dataclass(frozen=True, slots=True)
class PeerCertificate:
    """The parts of a verified client certificate that make an identity (upstream x509
    CommonNameUserConversion): the subject's CN, its O values, its UID attributes, and the
    SHA-256 of the DER (the credential id)."""

    common_name: str
    organizations: tuple[str, ...] = ()
    uids: tuple[str, ...] = ()
    sha256: str = ""

    @classmethod
    def from_der(cls, der: bytes) -> PeerCertificate:
        try:
            cert = x509.load_der_x509_certificate(der)
        except ValueError as e:
            raise CertificateError(f"cannot parse the peer certificate: {e}") from None
        subject = cert.subject

        def values(oid: x509.ObjectIdentifier) -> tuple[str, ...]:
            return tuple(str(a.value) for a in subject.get_attributes_for_oid(oid))

        cns = values(NameOID.COMMON_NAME)
        return cls(common_name=cns[0] if cns else "", organizations=values(NameOID.ORGANIZATION_NAME),
                   uids=values(NameOID.USER_ID), sha256=hashlib.sha256(der).hexdigest())


def verified_peer_certificate(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> PeerCertificate | None:
    """The client certificate of a TLS connection, if the handshake verified one.

    The server's context requests certificates with CERT_OPTIONAL against the client CA: a
    presented certificate that does not verify fails the handshake, and `getpeercert()` (the
    dict form) is empty unless the certificate was validated; only then is the DER used."""
    if ssl_object is None or not ssl_object.getpeercert():
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return PeerCertificate.from_der(der) if der else None


@dataclass(frozen=True, slots=True)
class AuthnRequest:
    """The facts of one request: its path, its headers (any Mapping; aiohttp's are
    case-insensitive, a plain dict is searched without case too) and the verified peer cert."""

    path: str = "/"
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS)
    peer_certificate: PeerCertificate | None = None

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        if value is not None:
            return value
        lname = name.lower()
        for k, v in self.headers.items():
            if k.lower() == lname:
                return v
        return None
