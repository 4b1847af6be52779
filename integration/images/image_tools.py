"""Test tooling for images: Debian's docker-registry on a free loopback port (anonymous, htpasswd
basic auth, or bearer tokens from a token server of our own), and test images built with umoci
and skopeo from busybox-static, with no network.

Images (built once per session, `build_images`):
    small     one layer: /bin/busybox and its applet symlinks (sh, sleep, cat, ls, echo, true)
    layered   small + a layer adding /etc/app.conf and /data/old/{a,b} + a layer deleting
              /etc/app.conf (umoci writes a `.wh.` whiteout) + a layer making /data/old opaque
              (`.wh..wh..opq`) with /data/old/new
    big       small + ~50 MB of random bytes (incompressible), for the pull benchmark

Every process started here is ours and stopped by its PID.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "sleep", "cat", "ls", "echo", "true", "env", "id")
TOOLS = ("skopeo", "umoci", "docker-registry", "busybox")
BIG_MB = 50


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(*argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    # skopeo stages big blobs in /var/tmp unless told (--tmpdir): read-only in the UML guest
    if argv[0] == "skopeo":
        argv = ("skopeo", "--tmpdir", tempfile.gettempdir(), *argv[1:])
    env = {**os.environ, "TMPDIR": tempfile.gettempdir()}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p


# ---- the registry ----


@dataclass
class Registry:
    """docker-registry serving `storage` on 127.0.0.1:port; `auth` None, "htpasswd" or "token"."""

    workdir: Path
    auth: str | None = None
    users: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    token_server: TokenServer | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def storage(self) -> Path:
        return self.workdir / "storage"

    def start(self) -> Registry:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}, "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }
        if self.auth == "htpasswd":
            htpasswd = self.workdir / "htpasswd"
            htpasswd.write_text("".join(f"{u}:{bcrypt(p)}\n" for u, p in self.users.items()))
            config["auth"] = {"htpasswd": {"realm": "nodeagent-test", "path": str(htpasswd)}}
        elif self.auth == "token":
            self.token_server = TokenServer(self.workdir / "token", self.users).start()
            config["auth"] = {"token": {"realm": self.token_server.realm, "service": "nodeagent-test-registry",
                                        "issuer": TokenServer.ISSUER,
                                        "rootcertbundle": str(self.token_server.cert)}}
        path = self.workdir / "config.yml"
        path.write_text(json.dumps(config))  # JSON is YAML
        log = open(self.workdir / "registry.log", "ab")  # noqa: SIM115 - kept open for the process's life
        self.proc = subprocess.Popen(["docker-registry", "serve", str(path)], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1)
                break
            except urllib.error.HTTPError as e:  # 401 with auth on: it is up
                if e.code == 401:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not start: {(self.workdir / 'registry.log').read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.token_server is not None:
            self.token_server.stop()

    def creds_args(self) -> list[str]:
        if not self.users:
            return []
        user, password = next(iter(self.users.items()))
        return ["--dest-creds", f"{user}:{password}"]

    def push(self, source: str, name: str) -> str:
        """skopeo copy SOURCE (e.g. oci:DIR:TAG) to this registry as NAME; the manifest digest."""
        digest_file = self.workdir / f"digest-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
        run("skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false", *self.creds_args(),
            "--digestfile", str(digest_file), source, f"docker://{self.host}/{name}")
        return digest_file.read_text().strip()

    def blob_data(self, digest: str) -> Path:
        """Where the registry keeps a blob's bytes (distribution's filesystem driver layout)."""
        hexpart = digest.split(":")[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexpart[:2] / hexpart / "data"


def bcrypt(password: str) -> str:
    """A bcrypt hash for htpasswd (libxcrypt through the crypt module, deprecated but present in 3.11)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


# ---- a bearer token server (Docker's token authentication, RS256 JWTs signed with openssl) ----


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """GET /token?service=...&scope=repository:NAME:pull,push with basic auth -> {"token": JWT}.

    The registry trusts tokens signed by the key whose self-signed certificate is its
    rootcertbundle (the certificate rides in the JWT header's x5c)."""

    ISSUER = "nodeagent-test-issuer"

    def __init__(self, workdir: Path, users: dict[str, str]) -> None:
        self.workdir = workdir
        self.users = users
        self.key = workdir / "key.pem"
        self.cert = workdir / "cert.pem"
        self.port = 0
        self.issued = 0
        self.httpd: http.server.ThreadingHTTPServer | None = None

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def start(self) -> TokenServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=nodeagent-test-token",
            "-days", "2", "-keyout", str(self.key), "-out", str(self.cert))
        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], capture_output=True,
                             check=True, timeout=60).stdout
        self.x5c = base64.b64encode(der).decode()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlsplit

                q = parse_qs(urlsplit(self.path).query)
                auth = self.headers.get("Authorization", "")
                user = None
                if auth.startswith("Basic "):
                    u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
                    if server.users.get(u) == p:
                        user = u
                if user is None:
                    self.send_response(401)
                    self.end_headers()
                    return
                access = []
                for scope in q.get("scope", []):
                    for one in scope.split(" "):
                        kind, name, actions = one.split(":", 2)
                        access.append({"type": kind, "name": name, "actions": actions.split(",")})
                token = server.sign(user, q.get("service", [""])[0], access)
                body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def sign(self, user: str, service: str, access: list[dict[str, Any]]) -> str:
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "x5c": [self.x5c]}
        claims = {"iss": self.ISSUER, "sub": user, "aud": service, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": f"{now}-{self.issued}", "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing_input.encode(),
                             capture_output=True, check=True, timeout=30).stdout
        self.issued += 1
        return f"{signing_input}.{_b64url(sig)}"

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()


# ---- images ----


@dataclass
class BuiltImages:
    layout: Path  # an OCI layout holding every image by tag
    docker_archive: Path  # `small` as a docker-archive tarball
    tags: tuple[str, ...] = ("small", "layered", "big")


def _umoci_bundle(layout: Path, tag: str, bundle: Path) -> Path:
    if bundle.exists():
        shutil.rmtree(bundle)
    run("umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle))
    return bundle / "rootfs"


def _repack(layout: Path, tag: str, bundle: Path) -> None:
    run("umoci", "repack", "--image", f"{layout}:{tag}", str(bundle))
    shutil.rmtree(bundle)


def _add_layer(layout: Path, tag: str, entries: list[tuple[str, bytes | None]], work: Path) -> None:
    """`umoci raw add-layer` of a tar made here: (name, data) files, (name, None) directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.mtime = int(time.time())
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    path = work / f"layer-{tag}-{len(entries)}.tar"
    path.write_bytes(buf.getvalue())
    run("umoci", "raw", "add-layer", "--image", f"{layout}:{tag}", str(path))
    path.unlink()


def build_images(work: Path, big_mb: int = BIG_MB) -> BuiltImages:
    """Build the test images (see the module docstring) into work/layout."""
    work.mkdir(parents=True, exist_ok=True)
    layout = work / "layout"
    bundle = work / "bundle"
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:small")
    rootfs = _umoci_bundle(layout, "small", bundle)
    (rootfs / "bin").mkdir(exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin/busybox")
    for applet in APPLETS:
        os.symlink("busybox", rootfs / "bin" / applet)
    _repack(layout, "small", bundle)
    run("umoci", "config", "--image", f"{layout}:small", "--config.entrypoint", "/bin/sh",
        "--config.cmd", "-c", "--config.cmd", "echo hello from small", "--config.env", "PATH=/bin",
        "--config.workingdir", "/", "--config.user", "0:0")
    # layered: two more layers through unpack/repack (umoci writes the whiteout), one crafted opaque layer
    run("umoci", "tag", "--image", f"{layout}:small", "layered")
    rootfs = _umoci_bundle(layout, "layered", bundle)
    (rootfs / "etc").mkdir(exist_ok=True)
    (rootfs / "etc/app.conf").write_text("old config\n")
    (rootfs / "data/old").mkdir(parents=True)
    (rootfs / "data/old/a").write_text("a\n")
    (rootfs / "data/old/b").write_text("b\n")
    _repack(layout, "layered", bundle)
    rootfs = _umoci_bundle(layout, "layered", bundle)
    (rootfs / "etc/app.conf").unlink()
    _repack(layout, "layered", bundle)
    _add_layer(layout, "layered", [("data", None), ("data/old", None), ("data/old/.wh..wh..opq", b""),
                                   ("data/old/new", b"new\n")], work)
    # big: small + random bytes
    run("umoci", "tag", "--image", f"{layout}:small", "big")
    rootfs = _umoci_bundle(layout, "big", bundle)
    with open(rootfs / "random.bin", "wb") as out:
        for _ in range(big_mb):
            out.write(os.urandom(1 << 20))
    _repack(layout, "big", bundle)
    run("umoci", "gc", "--layout", str(layout))
    archive = work / "small-docker-archive.tar"
    run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{layout}:small",
        f"docker-archive:{archive}:test/small:archived")
    return BuiltImages(layout, archive)


def layout_with_layers(work: Path, name: str, layers: list[bytes]) -> Path:
    """An OCI layout (tag `latest`) of raw uncompressed tars built in the test, e.g. hostile ones."""
    import gzip

    layout = work / name
    blobs = layout / "blobs/sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return "sha256:" + digest

    descs = []
    for tar in layers:
        gz = gzip.compress(tar, mtime=0)
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(gz), "size": len(gz)})
    cfg = json.dumps({"architecture": "amd64", "os": "linux",
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(t).hexdigest() for t in layers]},
                      "config": {}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(cfg),
                                      "size": len(cfg)}, "layers": descs}).encode()
    mdigest = put(manifest)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdigest, "size": len(manifest),
         "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}))
    return layout
