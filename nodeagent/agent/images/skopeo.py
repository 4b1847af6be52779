"""Fetching images with skopeo (Debian's `skopeo`): the OCI distribution client the store uses.

Why skopeo and not a hand-written registry client: it is the containers project's own client
(containers/image, as in podman and CRI-O), packaged by Debian, and does everything a pull needs:
manifest lists and platform choice, schema conversion to OCI, basic auth and the bearer-token
flow, TLS and cert dirs, retries, and it checks every blob against its digest while it streams it
(a registry that lies about a blob makes it fail with "Digest did not match"). It writes into an
OCI layout whose blobs go to the store's shared blob directory (`--dest-shared-blob-dir`), so a
blob already present is not downloaded again and blobs are stored once by digest. Import from an
OCI layout (`oci:DIR[:REF]`) or a docker-archive tarball (`docker-archive:FILE[:REF]`) is the same
copy from another transport.

Every call runs with an isolated environment: its own HOME (no ~/.docker/config.json), its own
empty registries.conf (no host mirrors or short names: references are always fully qualified),
a policy accepting any image (signature policy is not part of this), its own auth file. Errors
are mapped from skopeo's message to the ImageError classes (errors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from nodeagent.agent.images.credentials import Access, auth_file
from nodeagent.agent.images.errors import (
    DigestMismatch,
    ImageNotFound,
    NoSpace,
    PullFailed,
    RegistryUnavailable,
    Unauthorized,
)
from nodeagent.core.waits import wait_for
from nodeagent.daemonkit.subprocs import kill_and_reap

log = structlog.get_logger(__name__)

POLICY = b'{"default": [{"type": "insecureAcceptAnything"}]}\n'
STDERR_LIMIT = 64 << 10
_MSG_RE = re.compile(r'msg="((?:[^"\\]|\\.)*)"')

# (pattern in skopeo's message, error class): first match wins
_ERRORS: tuple[tuple[re.Pattern[str], type[PullFailed]], ...] = tuple(
    (re.compile(p, re.IGNORECASE), cls) for p, cls in (
        (r"digest did not match|digest mismatch|does not match.*digest|computed digest", DigestMismatch),
        (r"no space left on device|disk quota exceeded", NoSpace),
        (r"unauthorized|authentication required|denied|401 unauthorized|403 forbidden|invalid username/password",
         Unauthorized),
        (r"manifest unknown|name unknown|not found|no descriptor found|no such file or directory|does not exist"
         r"|no such image"
         r"|blob unknown|no image found", ImageNotFound),
        (r"timeout|timed out|deadline exceeded|connection refused|no such host|network is unreachable|tls:|x509:"
         r"|server gave http response|connection reset|EOF|no route to host|pinging container registry",
         RegistryUnavailable),
    ))


# The OCI distribution spec's error codes that come with one HTTP status (skopeo prints the code
# lowercased, `unauthorized: authentication required`, not the status the registry answered)
_STATUS_OF_CODE = (
    (re.compile(r"\bunauthorized: |invalid username/password"), "401 Unauthorized"),
    (re.compile(r"\bdenied: "), "403 Forbidden"),
)


def classify(message: str) -> PullFailed:
    """The ImageError for a skopeo failure message; a refusal names the registry's HTTP status
    (the spec's UNAUTHORIZED is a 401, DENIED a 403), as containerd's messages do."""
    for pattern, cls in _ERRORS:
        if pattern.search(message):
            if cls is Unauthorized:
                status = next((s for p, s in _STATUS_OF_CODE if p.search(message)), None)
                if status is not None and status not in message:
                    message = f"{message} (the registry answered {status})"
            return cls(message)
    return PullFailed(message)


def failure_message(stderr: str, returncode: int | None) -> str:
    """skopeo's `level=fatal msg="..."` text, else its last stderr line."""
    found: list[str] = _MSG_RE.findall(stderr)
    if found:
        return found[-1].replace('\\"', '"')
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"skopeo exited with status {returncode}"


class Fetcher(Protocol):
    """What the manager needs to bring images in (skopeo here; a fake in unit tests)."""

    async def inspect_raw(self, source: str, access: Access | None, seconds: float) -> bytes:
        """The raw manifest (or index) the source names, as served."""
        ...

    async def copy(self, source: str, layout: str, blobs: str, access: Access | None,
                   started: Callable[[int], None] | None = None) -> None:
        """Copy one image (this node's platform) from `source` into the OCI layout `layout`, its
        blobs into `blobs`. `started(pid)` is told the process id (to kill it on no progress)."""
        ...


@dataclass
class Skopeo:
    """The Fetcher over the skopeo command; `workdir` holds the per-call private directories."""

    workdir: str
    binary: str = "skopeo"
    os_name: str = "linux"
    architecture: str = "amd64"
    retry_times: int = 0  # the manager's back-off retries; skopeo's own retries would hide a timeout

    def available(self) -> str | None:
        """The binary's path, or None when it is not installed."""
        found: str | None = shutil.which(self.binary)
        return found

    def _make_private(self, access: Access | None) -> tuple[str, list[str], dict[str, str]]:
        d = os.path.join(self.workdir, f"skopeo-{secrets.token_hex(6)}")
        os.makedirs(d, mode=0o700)
        policy = os.path.join(d, "policy.json")
        registries = os.path.join(d, "registries.conf")
        auth = os.path.join(d, "auth.json")
        for path, data in ((policy, POLICY), (registries, b""),
                           (auth, auth_file(access) if access else b'{"auths": {}}')):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": d,
               "XDG_RUNTIME_DIR": d, "CONTAINERS_REGISTRIES_CONF": registries, "REGISTRY_AUTH_FILE": auth,
               "TMPDIR": d}
        args = [self.binary, "--policy", policy, "--override-os", self.os_name,
                "--override-arch", self.architecture, "--tmpdir", d]
        return d, args, env

    @contextlib.asynccontextmanager
    async def _private(self, access: Access | None) -> AsyncIterator[tuple[list[str], dict[str, str]]]:
        """Global args and environment of one call, with its auth file; all removed afterwards
        (made and removed in a thread: nothing blocks the event loop)."""
        d, args, env = await asyncio.to_thread(self._make_private, access)
        try:
            yield args, env
        finally:
            await asyncio.to_thread(shutil.rmtree, d, True)

    @staticmethod
    def _source_args(prefix: str, access: Access | None, auth_path: str) -> list[str]:
        """`copy` names them --src-*, `inspect` without a prefix."""
        if access is None:
            return []
        p = f"{prefix}-" if prefix else ""
        args = [f"--{p}tls-verify={'true' if access.tls_verify else 'false'}", f"--{p}authfile", auth_path]
        if access.cert_dir:
            args += [f"--{p}cert-dir", access.cert_dir]
        return args

    async def _run(self, argv: Sequence[str], env: dict[str, str], seconds: float | None,
                   started: Callable[[int], None] | None = None) -> bytes:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        except FileNotFoundError:
            raise PullFailed(f"{self.binary} is not installed (apt-get install skopeo)") from None
        if started is not None:
            started(proc.pid)
        try:
            out, err = await wait_for(proc.communicate(), seconds)
        except TimeoutError:
            await kill_and_reap(proc)
            raise RegistryUnavailable(f"no answer from the registry within {seconds:g}s") from None
        except asyncio.CancelledError:
            await kill_and_reap(proc)  # bounded: a skopeo stuck in the kernel must not hang a shutdown
            raise
        if proc.returncode != 0:
            if proc.returncode is not None and proc.returncode < 0 and -proc.returncode == signal.SIGKILL:
                raise RegistryUnavailable("the pull was stopped: no progress")
            stderr = err[-STDERR_LIMIT:].decode("utf-8", "replace")
            raise classify(failure_message(stderr, proc.returncode))
        return out

    async def inspect_raw(self, source: str, access: Access | None, seconds: float) -> bytes:
        async with self._private(access) as (args, env):
            argv = [*args, "inspect", "--raw", "--retry-times", str(self.retry_times),
                    *self._source_args("", access, env["REGISTRY_AUTH_FILE"]), source]
            return await self._run(argv, env, seconds)

    async def copy(self, source: str, layout: str, blobs: str, access: Access | None,
                   started: Callable[[int], None] | None = None) -> None:
        async with self._private(access) as (args, env):
            argv = [*args, "copy", "--quiet", "--retry-times", str(self.retry_times),
                    "--dest-shared-blob-dir", blobs,
                    *self._source_args("src", access, env["REGISTRY_AUTH_FILE"]), source, f"oci:{layout}"]
            await self._run(argv, env, None, started)


__all__ = ["Fetcher", "Skopeo", "classify", "failure_message"]
