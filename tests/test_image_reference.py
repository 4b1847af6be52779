"""Image references: normalization as distribution's ParseNormalizedNamed, errors naming the field."""

from __future__ import annotations

import pytest

from nodeagent.agent.images.reference import ImageRef, is_loopback_registry, parse_reference
from nodeagent.core.errors import FieldError

D = "sha256:" + "a" * 64


@pytest.mark.parametrize("image, expected", [
    ("busybox", "docker.io/library/busybox:latest"),
    ("busybox:1.36", "docker.io/library/busybox:1.36"),
    ("library/busybox", "docker.io/library/busybox:latest"),
    ("user/app:v1", "docker.io/user/app:v1"),
    ("docker.io/busybox", "docker.io/library/busybox:latest"),
    ("index.docker.io/busybox:1", "docker.io/library/busybox:1"),
    ("quay.io/coreos/etcd:v3.5", "quay.io/coreos/etcd:v3.5"),
    ("localhost/app", "localhost/app:latest"),
    ("localhost:5000/app:1", "localhost:5000/app:1"),
    ("127.0.0.1:5000/a/b/c:x", "127.0.0.1:5000/a/b/c:x"),
    ("[::1]:5000/app", "[::1]:5000/app:latest"),
    ("Registry.Example/app", "Registry.Example/app:latest"),  # upper case: a registry, not a repository
    (f"busybox@{D}", f"docker.io/library/busybox@{D}"),
    (f"busybox:1.36@{D}", f"docker.io/library/busybox:1.36@{D}"),
    ("a__b/c-----d.e_f:T_a.g-1", "docker.io/a__b/c-----d.e_f:T_a.g-1"),
])
def test_normalized(image: str, expected: str) -> None:
    assert str(parse_reference(image)) == expected


def test_parts() -> None:
    ref = parse_reference("127.0.0.1:5000/team/app:1")
    assert ref == ImageRef("127.0.0.1:5000", "team/app", "1", None)
    assert ref.name == "127.0.0.1:5000/team/app"
    assert ref.tagged == "127.0.0.1:5000/team/app:1"
    assert ref.with_digest(D) == f"127.0.0.1:5000/team/app@{D}"
    digest_only = parse_reference(f"app@{D}")
    assert digest_only.tag is None and digest_only.digest == D and digest_only.tagged is None


@pytest.mark.parametrize("image, why", [
    ("", "Required value"),
    ("Busybox", "must be lowercase"),
    ("user/App", "must be lowercase"),
    ("busybox:", "invalid tag format"),
    ("busybox:-x", "invalid tag format"),
    ("busybox:" + "t" * 129, "invalid tag format"),
    ("busybox@sha256:abc", "invalid digest format"),
    ("busybox@sha256:" + "A" * 64, "lower-case hex"),
    ("busybox@md5:" + "a" * 32, "unsupported digest algorithm"),
    ("busybox@sha256:" + "a" * 63, "sha256 needs 64"),
    ("a" * 64, "64-byte hexadecimal"),
    ("bad name", "invalid reference format"),
    (" busybox", "invalid reference format"),
    ("busybox\n", "invalid reference format"),
    ("a//b", "invalid reference format"),
    ("/busybox", "invalid reference format"),
    ("busybox/", "invalid reference format"),
    ("-a/b", "invalid reference format"),
    ("a/b..c", "invalid reference format"),
    ("reg.io:port/app", "invalid reference format"),
    ("x/" + "a" * 260, "not be more than 255"),
])
def test_invalid_names_field(image: str, why: str) -> None:
    with pytest.raises(FieldError) as info:
        parse_reference(image, "spec.containers[0].image")
    assert info.value.path == "spec.containers[0].image"
    assert why in info.value.message


def test_not_a_string() -> None:
    with pytest.raises(FieldError, match="must be a string"):
        parse_reference(5, "spec.containers[1].image")


@pytest.mark.parametrize("registry, loopback", [
    ("localhost", True), ("localhost:5000", True), ("127.0.0.1:5000", True), ("127.9.8.7", True),
    ("[::1]:5000", True), ("[::1]", True), ("docker.io", False), ("10.0.0.1:5000", False),
    ("127.0.0.1.example.com", False), ("localhost.example", False), ("127.0.0.256", False),
])
def test_loopback(registry: str, loopback: bool) -> None:
    assert is_loopback_registry(registry) is loopback
