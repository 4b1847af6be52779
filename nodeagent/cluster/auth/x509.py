"""Client certificates as identities: CN = user name, O = groups (kube-apiserver --client-ca-file).

The TLS layer verifies the certificate against the client CA (chain, validity, the clientAuth
key usage) before any of this runs; see request.verified_peer_certificate and
pki.server_ssl_context. A certificate without a CN gives no user (upstream: not an error, the
next authenticator gets its turn); one with several UID attributes is an error.
"""

from __future__ import annotations

from nodeagent.cluster.auth.request import AuthnRequest, PeerCertificate
from nodeagent.cluster.auth.user import CREDENTIAL_ID_KEY, UserInfo, frozen_extra


class CertificateAuthenticationError(ValueError):
    pass


def user_from_certificate(cert: PeerCertificate) -> UserInfo | None:
    if not cert.common_name:
        return None
    if len(cert.uids) > 1:
        raise CertificateAuthenticationError(f"expected 1 UID, but found multiple: {list(cert.uids)}")
    if cert.uids and cert.uids[0] == "":
        raise CertificateAuthenticationError("UID cannot be an empty string")
    return UserInfo(name=cert.common_name, uid=cert.uids[0] if cert.uids else "",
                    groups=cert.organizations,
                    extra=frozen_extra({CREDENTIAL_ID_KEY: f"X509SHA256={cert.sha256}"}))


class X509Authenticator:
    """The request authenticator for verified client certificates."""

    def authenticate(self, request: AuthnRequest) -> UserInfo | None:
        if request.peer_certificate is None:
            return None
        return user_from_certificate(request.peer_certificate)
