"""The server's certificates, made on first start (as k3s does) and kept across restarts.

Under the server's data dir, `tls/` (0700) holds, each key 0600 and every file written atomically:

    server-ca.crt/.key      signs the serving certificate; kubeconfigs carry it
    serving.crt/.key        the API's certificate: SANs 127.0.0.1, ::1, localhost, the host name
                            and the configured addresses (tlsSan)
    client-ca.crt/.key      signs client certificates (admin, agents); the TLS layer verifies
                            clients against it (clientCAFile)
    service-account.key     signs service-account and node tokens (its public key verifies them)

Two CAs, as k3s: a client certificate can never pass as a serving one (nor the reverse), and the
client CA can be replaced by an operator's without touching what kubeconfigs trust. Keys are
ECDSA P-256 (Go's TLS, kubectl and OpenSSL all take them; made in microseconds). The CAs last 10
years, the serving certificate a year and is re-issued on start when it lacks a wanted SAN, was
not signed by the current CA, or has less than 90 days left. A CA whose certificate or key is
missing (but not both), or whose key does not match, is an error naming the file: silently
making a new CA would break every kubeconfig and agent.

Blocking (key generation, fsync): run `ensure_pki` before the event loop serves, or in a thread.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
import socket
import ssl
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodeagent.cluster.auth.files import ensure_private_dir, write_private
from nodeagent.core.clock import Clock, SystemClock

log = structlog.get_logger(__name__)

CA_DAYS = 3650
SERVING_DAYS = 365
CLIENT_DAYS = 365
RENEW_BEFORE_DAYS = 90
BACKDATE_SECONDS = 300  # tolerate clocks a few minutes apart (agents on other hosts)

Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class PKIError(ValueError):
    """Certificates on disk that cannot be used as they are; the message names the file."""


@dataclass(frozen=True)
class CertKey:
    cert: x509.Certificate
    key: Key

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


@dataclass(frozen=True)
class PKI:
    directory: Path
    server_ca: CertKey
    client_ca: CertKey
    serving: CertKey
    service_account_key: Key

    @property
    def server_ca_file(self) -> Path:
        return self.directory / "server-ca.crt"

    @property
    def client_ca_file(self) -> Path:
        return self.directory / "client-ca.crt"

    @property
    def serving_cert_file(self) -> Path:
        return self.directory / "serving.crt"

    @property
    def serving_key_file(self) -> Path:
        return self.directory / "serving.key"

    @property
    def service_account_key_file(self) -> Path:
        return self.directory / "service-account.key"


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _when(clock: Clock, offset_seconds: float = 0) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(clock.wall() + offset_seconds, tz=datetime.UTC)


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def make_ca(common_name: str, clock: Clock | None = None, days: int = CA_DAYS) -> CertKey:
    clock = clock or SystemClock()
    key = _new_key()
    name = _name(common_name)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_when(clock, -BACKDATE_SECONDS)).not_valid_after(_when(clock, days * 86400))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
            .sign(key, hashes.SHA256()))
    return CertKey(cert, key)


def _leaf(ca: CertKey, subject: x509.Name, usage: x509.ObjectIdentifier, days: int, clock: Clock,
          sans: x509.SubjectAlternativeName | None = None) -> CertKey:
    key = _new_key()
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.cert.subject).public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(_when(clock, -BACKDATE_SECONDS)).not_valid_after(_when(clock, days * 86400))
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                      data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                      crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
         .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False))
    if sans is not None:
        b = b.add_extension(sans, critical=False)
    return CertKey(b.sign(ca.key, hashes.SHA256()), key)


def default_hosts(configured: Sequence[str] = ()) -> list[str]:
    """The serving certificate's names: loopback, localhost, this host's name and the configured
    addresses or names (duplicates dropped, order kept)."""
    hosts = ["127.0.0.1", "::1", "localhost", socket.gethostname(), *configured]
    return list(dict.fromkeys(h for h in hosts if h))


def _sans(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def issue_serving_certificate(ca: CertKey, hosts: Sequence[str], clock: Clock | None = None,
                              days: int = SERVING_DAYS) -> CertKey:
    return _leaf(ca, _name("nodeagent-server"), ExtendedKeyUsageOID.SERVER_AUTH, days, clock or SystemClock(),
                 _sans(hosts))


def issue_client_certificate(ca: CertKey, common_name: str, organizations: Sequence[str] = (),
                             clock: Clock | None = None, days: int = CLIENT_DAYS) -> CertKey:
    """A client certificate: CN the user name, O its groups (e.g. `admin` in `system:masters`, or
    `system:node:<name>` in `system:nodes` for an agent)."""
    if not common_name:
        raise ValueError("a client certificate needs a common name (the user name)")
    return _leaf(ca, _name(common_name, organizations), ExtendedKeyUsageOID.CLIENT_AUTH, days,
                 clock or SystemClock())


# ---- on disk ----


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise PKIError(f"{path}: cannot read: {e.strerror}") from None


def _load_key(path: Path, pem: bytes) -> Key:
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o600)
        log.warning("pki_key_permissions_fixed", path=str(path))
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as e:
        raise PKIError(f"{path}: not a PEM private key: {e}") from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise PKIError(f"{path}: the key must be ECDSA or RSA")
    return key


def _public_der(key: Key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def _load_pair(directory: Path, stem: str) -> CertKey | None:
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_pem, key_pem = _read(cert_path), _read(key_path)
    if cert_pem is None and key_pem is None:
        return None
    if cert_pem is None or key_pem is None:
        missing = cert_path if cert_pem is None else key_path
        raise PKIError(f"{missing}: missing, while {key_path if cert_pem is None else cert_path} exists; restore it, "
                       "or remove both to make new ones")
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as e:
        raise PKIError(f"{cert_path}: not a PEM certificate: {e}") from None
    key = _load_key(key_path, key_pem)
    cert_pub = cert.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
    if cert_pub != _public_der(key):
        raise PKIError(f"{key_path}: does not match the certificate {cert_path}")
    return CertKey(cert, key)


def _save_pair(directory: Path, stem: str, pair: CertKey) -> None:
    write_private(directory / f"{stem}.key", pair.key_pem, 0o600)
    write_private(directory / f"{stem}.crt", pair.cert_pem, 0o644)


def _ensure_ca(directory: Path, stem: str, clock: Clock) -> CertKey:
    pair = _load_pair(directory, stem)
    if pair is None:
        pair = make_ca(f"nodeagent-{stem}@{int(clock.wall())}", clock)
        _save_pair(directory, stem, pair)
        log.info("pki_ca_created", name=stem, path=str(directory / f"{stem}.crt"))
    elif pair.cert.not_valid_after_utc <= _when(clock):
        raise PKIError(f"{directory / (stem + '.crt')}: the CA expired on {pair.cert.not_valid_after_utc:%Y-%m-%d}")
    return pair


def _serving_problem(pair: CertKey, ca: CertKey, hosts: Sequence[str], clock: Clock) -> str | None:
    try:
        pair.cert.verify_directly_issued_by(ca.cert)
    except (InvalidSignature, ValueError, TypeError):
        return "not signed by the current server CA"
    if pair.cert.not_valid_after_utc - _when(clock) < datetime.timedelta(days=RENEW_BEFORE_DAYS):
        return "expires within 90 days"
    try:
        have = pair.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "has no subject alternative names"
    missing = [h for h in hosts if _sans([h])[0] not in have]
    if missing:
        return f"lacks {', '.join(missing)}"
    return None


def ensure_pki(directory: str | Path, hosts: Sequence[str], clock: Clock | None = None) -> PKI:
    """Load the server's CAs, serving certificate and token key from `directory`, creating what
    is missing and re-issuing a serving certificate that no longer fits (module docstring)."""
    clock = clock or SystemClock()
    d = Path(directory)
    ensure_private_dir(d)
    with _pki_lock(d):
        return _ensure_pki_locked(d, hosts, clock)


@contextlib.contextmanager
def _pki_lock(directory: Path) -> Iterator[None]:
    """One maker at a time: `server run` and `server kubeconfig` started together would otherwise
    each make a CA, and the kubeconfig would carry a CA the server does not serve with."""
    fd = os.open(directory / "pki.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _ensure_pki_locked(d: Path, hosts: Sequence[str], clock: Clock) -> PKI:
    server_ca = _ensure_ca(d, "server-ca", clock)
    client_ca = _ensure_ca(d, "client-ca", clock)
    serving = _load_pair(d, "serving")
    problem = "missing" if serving is None else _serving_problem(serving, server_ca, hosts, clock)
    if problem is not None:
        serving = issue_serving_certificate(server_ca, hosts, clock)
        _save_pair(d, "serving", serving)
        log.info("pki_serving_certificate_issued", reason=problem, hosts=",".join(hosts))
    assert serving is not None
    sa_path = d / "service-account.key"
    sa_pem = _read(sa_path)
    if sa_pem is None:
        sa_key: Key = _new_key()
        write_private(sa_path, sa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
        log.info("pki_service_account_key_created", path=str(sa_path))
    else:
        sa_key = _load_key(sa_path, sa_pem)
    return PKI(d, server_ca, client_ca, serving, sa_key)


def load_ca(cert_file: str | Path, key_file: str | Path) -> CertKey:
    """A CA from its files (the CLI issues client certificates with it)."""
    cert_path, key_path = Path(cert_file), Path(key_file)
    cert_pem, key_pem = _read(cert_path), _read(key_path)
    if cert_pem is None or key_pem is None:
        raise PKIError(f"{cert_path if cert_pem is None else key_path}: missing")
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as e:
        raise PKIError(f"{cert_path}: not a PEM certificate: {e}") from None
    key = _load_key(key_path, key_pem)
    if cert.public_key().public_bytes(serialization.Encoding.DER,
                                      serialization.PublicFormat.SubjectPublicKeyInfo) != _public_der(key):
        raise PKIError(f"{key_path}: does not match the certificate {cert_path}")
    return CertKey(cert, key)


def server_ssl_context(cert_file: str | Path, key_file: str | Path,
                       client_ca_file: str | Path | None = None) -> ssl.SSLContext:
    """The API's TLS context: TLS 1.2+, the serving pair, and client certificates requested
    (optional: token clients present none) and verified against the client CA when given. A
    presented certificate that does not verify fails the handshake."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    if client_ca_file is not None:
        ctx.load_verify_locations(cafile=str(client_ca_file))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
