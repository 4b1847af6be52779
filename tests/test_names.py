"""Name rules: what may become a cgroup or file name, in Kubernetes' own terms."""

from __future__ import annotations

import pytest

from nodeagent.core import names
from nodeagent.core.names import (
    container_resource_name_errors,
    is_extended_resource_name,
    is_overcommit_allowed,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_qualified_name,
    validate_uid,
)

GOOD_LABELS = ["a", "0", "my-name", "123-abc", "a" * 63, "a-b-c9"]
BAD_LABELS = [
    "", "A", "my_name", "-a", "a-", "a.b", "a/b", "..", ".", "a b", "a\x00b", "ä", "a" * 64,
    "a\n", "\na",
]
GOOD_SUBDOMAINS = ["a", "example.com", "a.b.c", "web-1.default", "a" * 253, ("a" * 63 + ".") * 3 + "a"]
BAD_SUBDOMAINS = [
    "", "A", "a..b", ".a", "a.", "..", "a/b", "/", "a_b", "a\x00", "Web", "a" * 254, "a.-b", "a\n",
]


@pytest.mark.parametrize("value", GOOD_LABELS)
def test_label_accepts(value: str) -> None:
    validate_dns1123_label(value)


@pytest.mark.parametrize("value", BAD_LABELS)
def test_label_rejects(value: str) -> None:
    with pytest.raises(ValueError) as exc:
        validate_dns1123_label(value)
    message = str(exc.value)
    assert message.startswith("Invalid value: ")
    assert names.quote(value) in message


def test_label_messages_name_the_rule() -> None:
    with pytest.raises(ValueError, match="must not contain dots"):
        validate_dns1123_label("a.b")
    with pytest.raises(ValueError, match="a lowercase RFC 1123 label must consist of lower case"):
        validate_dns1123_label("Foo")
    with pytest.raises(ValueError, match="must be no more than 63 characters"):
        validate_dns1123_label("a" * 64)


@pytest.mark.parametrize("value", GOOD_SUBDOMAINS)
def test_subdomain_accepts(value: str) -> None:
    validate_dns1123_subdomain(value)


@pytest.mark.parametrize("value", BAD_SUBDOMAINS)
def test_subdomain_rejects(value: str) -> None:
    with pytest.raises(ValueError, match="RFC 1123 subdomain|no more than 253"):
        validate_dns1123_subdomain(value)


def test_nul_is_shown_escaped() -> None:
    with pytest.raises(ValueError) as exc:
        validate_dns1123_subdomain("a\x00b")
    assert '"a\\u0000b"' in str(exc.value)


@pytest.mark.parametrize(
    ("uid", "ok"),
    [
        ("0b6f6a1e-5c39-4b39-9d1e-2b7f5c1e9a10", True),
        ("abc", True),
        ("a" * 64, True),
        ("", False),
        ("a" * 65, False),
        ("ABC", False),
        ("../x", False),
        ("a/b", False),
        ("a.b", False),
        ("a\x00", False),
        ("a b", False),
    ],
)
def test_uid(uid: str, ok: bool) -> None:
    if ok:
        validate_uid(uid)
    else:
        with pytest.raises(ValueError, match="a pod uid must consist of"):
            validate_uid(uid)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("MyName", None),
        ("my.name", None),
        ("example.com/foo", None),
        ("hugepages-2Mi", None),
        ("/foo", "prefix part must be non-empty"),
        ("example.com/", "name part must be non-empty"),
        ("a/b/c", "a qualified name"),
        ("Example.com/foo", "prefix part a lowercase RFC 1123 subdomain"),
        ("-foo", "name part must consist of"),
        ("a" * 64, "name part must be no more than 63 characters"),
    ],
)
def test_qualified_name(value: str, error: str | None) -> None:
    if error is None:
        validate_qualified_name(value)
    else:
        with pytest.raises(ValueError, match=error):
            validate_qualified_name(value)


@pytest.mark.parametrize(
    ("name", "extended", "overcommit", "error"),
    [
        ("cpu", False, True, None),
        ("memory", False, True, None),
        ("ephemeral-storage", False, True, None),
        ("hugepages-2Mi", False, False, None),
        ("example.com/foo", True, False, None),
        ("nvidia.com/gpu", True, False, None),
        ("kubernetes.io/foo", False, True, None),
        ("pods", False, True, "must be a standard resource for containers"),
        ("gpu", False, True, "must be a standard resource for containers"),
        ("example.com/-x", False, False, "name part must consist of"),
    ],
)
def test_resource_names(name: str, extended: bool, overcommit: bool, error: str | None) -> None:
    assert is_extended_resource_name(name) is extended
    assert is_overcommit_allowed(name) is overcommit
    errs = container_resource_name_errors(name)
    if error is None:
        assert errs == []
    else:
        assert any(error in e for e in errs), errs
