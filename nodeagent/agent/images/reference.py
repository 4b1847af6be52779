"""Image references as Kubernetes and the container runtimes read them (pure).

`parse_reference("busybox")` is `docker.io/library/busybox:latest`, as the distribution
project's ParseNormalizedNamed + TagNameOnly make it: a first path component is a registry only
if it holds a `.` or a `:`, is `localhost`, or has upper-case letters; Docker Hub names with one
component get `library/`; `index.docker.io` is `docker.io`; no tag and no digest means `:latest`.
The grammar is the distribution project's (repository components `[a-z0-9]+` joined by `.`, `_`,
`__` or dashes; tags `[\\w][\\w.-]{0,127}`; a name of at most 255 characters). Digests must be
`sha256:` + 64 or `sha512:` + 128 lower-case hex digits: those are the only ones the store can
check, so anything else is refused here rather than failing after a download.

Errors are FieldErrors naming the field the caller passes (e.g. `spec.containers[0].image`),
worded like the runtime's `couldn't parse image name`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeagent.core.errors import FieldError
from nodeagent.core.names import quote

DEFAULT_REGISTRY = "docker.io"
LEGACY_DEFAULT_REGISTRY = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
DEFAULT_TAG = "latest"
NAME_TOTAL_LENGTH_MAX = 255
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha512": 128}

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = f"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_REMOTE_NAME = f"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

_DOMAIN_RE = re.compile(_DOMAIN)
_REMOTE_NAME_RE = re.compile(_REMOTE_NAME)
_TAG_RE = re.compile(_TAG, re.ASCII)
_DIGEST_RE = re.compile(_DIGEST)
_HEX64_RE = re.compile(r"[a-f0-9]{64}")


@dataclass(frozen=True, order=True)
class ImageRef:
    """A normalized reference: registry, repository, and a tag and/or a digest."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """`registry/repository`, the name without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def tagged(self) -> str | None:
        """`registry/repository:tag` (a repoTag), or None without a tag."""
        return f"{self.name}:{self.tag}" if self.tag else None

    def with_digest(self, digest: str) -> str:
        """`registry/repository@digest` (a repoDigest)."""
        return f"{self.name}@{digest}"

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out

    @property
    def is_loopback(self) -> bool:
        """The registry is `localhost`, 127.x.y.z or [::1] (any port): plain HTTP is allowed there."""
        return is_loopback_registry(self.registry)


def is_loopback_registry(registry: str) -> bool:
    host = registry
    if host.startswith("["):
        host = host[1:host.find("]")] if "]" in host else host
    else:
        host = host.split(":", 1)[0]
    if host == "localhost" or host == "::1":
        return True
    parts = host.split(".")
    return len(parts) == 4 and parts[0] == "127" and all(p.isdigit() and int(p) < 256 for p in parts)


def _fail(field: str, image: str, why: str) -> FieldError:
    return FieldError(field, f"Invalid value: {quote(image)}: couldn't parse image name: {why}")


def validate_digest(digest: str, field: str = "digest") -> str:
    """`sha256:<64 hex>` or `sha512:<128 hex>`; FieldError otherwise."""
    algorithm, sep, hexpart = digest.partition(":")
    want = DIGEST_HEX_LENGTHS.get(algorithm)
    if not sep or want is None:
        raise FieldError(field, f"Invalid value: {quote(digest)}: unsupported digest algorithm "
                                f"(supported: {', '.join(sorted(DIGEST_HEX_LENGTHS))})")
    if len(hexpart) != want or not all(c in "0123456789abcdef" for c in hexpart):
        raise FieldError(field, f"Invalid value: {quote(digest)}: invalid checksum digest length or "
                                f"characters: {algorithm} needs {want} lower-case hex digits")
    return digest


def parse_reference(image: object, field: str = "image") -> ImageRef:
    """Parse and normalize an image reference; FieldError naming `field` when it is not one."""
    if not isinstance(image, str):
        raise FieldError(field, f"Invalid value: {quote(image)}: an image reference must be a string")
    if image == "":
        raise FieldError(field, "Required value: an image reference is required")
    if image != image.strip() or any(c.isspace() or not c.isprintable() for c in image):
        raise _fail(field, image, "invalid reference format")
    if _HEX64_RE.fullmatch(image):
        raise _fail(field, image, "cannot specify 64-byte hexadecimal strings as a repository name")
    rest, digest = image, None
    if "@" in rest:
        rest, _, digest = rest.partition("@")
        if not _DIGEST_RE.fullmatch(digest):
            raise _fail(field, image, "invalid digest format")
        validate_digest(digest, field)
    name, tag = rest, None
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:  # a colon after the last slash starts the tag (before it: a registry port)
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG_RE.fullmatch(tag):
            raise _fail(field, image, "invalid tag format")
    if not name:
        raise _fail(field, image, "repository name must have at least one component")
    registry, remote = _split_registry(name)
    if not _DOMAIN_RE.fullmatch(registry):
        raise _fail(field, image, "invalid reference format")
    if remote.lower() != remote:
        raise _fail(field, image, f"invalid reference format: repository name ({remote}) must be lowercase")
    if not _REMOTE_NAME_RE.fullmatch(remote):
        raise _fail(field, image, "invalid reference format")
    if len(f"{registry}/{remote}") > NAME_TOTAL_LENGTH_MAX:
        raise _fail(field, image, f"repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters")
    if tag is None and digest is None:
        tag = DEFAULT_TAG
    return ImageRef(registry, remote, tag, digest)


def _split_registry(name: str) -> tuple[str, str]:
    """distribution's splitDockerDomain: where the registry ends and the repository begins."""
    first, sep, remainder = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost" and first.lower() == first):
        registry, remote = DEFAULT_REGISTRY, name
    else:
        registry, remote = first, remainder
    if registry == LEGACY_DEFAULT_REGISTRY:
        registry = DEFAULT_REGISTRY
    if registry == DEFAULT_REGISTRY and "/" not in remote:
        remote = OFFICIAL_REPO_PREFIX + remote
    return registry, remote


__all__ = ["DEFAULT_REGISTRY", "DEFAULT_TAG", "ImageRef", "is_loopback_registry", "parse_reference",
           "validate_digest"]
