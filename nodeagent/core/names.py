"""Name rules as Kubernetes enforces them (apimachinery util/validation).

Pod names, namespaces, container names and uids become cgroup directory and file names here, so
they are checked strictly: only lower-case ASCII letters, digits, '-' (and '.' between labels of a
subdomain). Nothing like '..', '/', NUL, white space or upper case can pass. Each validator raises
ValueError whose message names the value and the rule, in the Kubernetes wording
(`Invalid value: "Foo": a lowercase RFC 1123 label must ...`); callers add the field path.
"""

from __future__ import annotations

import json
import re

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
QUALIFIED_NAME_MAX_LENGTH = 63
LABEL_VALUE_MAX_LENGTH = 63
UID_MAX_LENGTH = 64

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_ENV_VAR_NAME_FMT = "[-._a-zA-Z][-._a-zA-Z0-9]*"

_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_ENV_VAR_NAME_RE = re.compile(_ENV_VAR_NAME_FMT)
_UID_RE = re.compile(f"[a-z0-9-]{{1,{UID_MAX_LENGTH}}}")

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)

STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
HUGEPAGES_PREFIX = "hugepages-"


def quote(value: object) -> str:
    """Show a value the way Go's %q would: double quotes, control characters escaped."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def invalid(value: object, detail: str) -> str:
    """The body of a Kubernetes `field.Invalid` error."""
    return f"Invalid value: {quote(value)}: {detail}"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    shown = " or ".join(f"'{e}'" for e in examples)
    return f"{msg} (e.g. {shown}, regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def dns1123_label_errors(value: str) -> list[str]:
    """Problems with `value` as an RFC 1123 label (namespaces, container names); [] when valid."""
    errs: list[str] = []
    if len(value) > DNS1123_LABEL_MAX_LENGTH:
        errs.append(_max_len(DNS1123_LABEL_MAX_LENGTH))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Problems with `value` as an RFC 1123 subdomain (pod and node names); [] when valid."""
    errs: list[str] = []
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(_max_len(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(
            _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
        )
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """Problems with `value` as a qualified name `[prefix/]name` (label keys, resource names)."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errs.append("name part " + _max_len(QUALIFIED_NAME_MAX_LENGTH))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    """Problems with `value` as a label value (may be empty)."""
    errs: list[str] = []
    if len(value) > LABEL_VALUE_MAX_LENGTH:
        errs.append(_max_len(LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def env_var_name_errors(value: str) -> list[str]:
    """Problems with `value` as an environment variable name (no '=', NUL, spaces, digits first)."""
    if _ENV_VAR_NAME_RE.fullmatch(value):
        return []
    return [
        _regex_error(
            "a valid environment variable name must consist of alphabetic characters, digits, "
            "'_', '-', or '.', and must not start with a digit",
            _ENV_VAR_NAME_FMT,
            "my.env-name",
            "MY_ENV.NAME",
            "MyEnvName1",
        )
    ]


def _raise(value: str, errs: list[str]) -> None:
    if errs:
        raise ValueError(invalid(value, "; ".join(errs)))


def validate_dns1123_label(value: str) -> None:
    """Raise ValueError unless `value` is an RFC 1123 label (<= 63 chars, [a-z0-9-], no dots)."""
    _raise(value, dns1123_label_errors(value))


def validate_dns1123_subdomain(value: str) -> None:
    """Raise ValueError unless `value` is an RFC 1123 subdomain (<= 253 chars, labels and dots)."""
    _raise(value, dns1123_subdomain_errors(value))


def validate_qualified_name(value: str) -> None:
    """Raise ValueError unless `value` is a qualified name such as `example.com/foo`."""
    _raise(value, qualified_name_errors(value))


def validate_uid(uid: str) -> None:
    """Raise ValueError unless `uid` is safe as the cgroup directory name `pod<uid>`."""
    if not _UID_RE.fullmatch(uid):
        raise ValueError(
            invalid(
                uid,
                "a pod uid must consist of lower case alphanumeric characters or '-' and be "
                f"1 to {UID_MAX_LENGTH} characters long",
            )
        )


# ---- resource names (pkg/apis/core/helper, validation.validateContainerResourceName) ----


def is_hugepage_resource_name(name: str) -> bool:
    return name.startswith(HUGEPAGES_PREFIX)


def is_native_resource_name(name: str) -> bool:
    """Native resources have no domain or live in the kubernetes.io domain."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended_resource_name(name: str) -> bool:
    """A fully qualified name outside kubernetes.io (e.g. example.com/gpu): whole units, no overcommit."""
    if is_native_resource_name(name) or name.startswith("requests."):
        return False
    return not qualified_name_errors("requests." + name)


def is_overcommit_allowed(name: str) -> bool:
    """Requests may be below limits only for native, non-hugepage resources."""
    return is_native_resource_name(name) and not is_hugepage_resource_name(name)


def container_resource_name_errors(name: str) -> list[str]:
    """Problems with `name` as a container resource name (cpu, memory, hugepages-2Mi, x.io/y)."""
    errs = qualified_name_errors(name)
    if errs:
        return errs
    if "/" not in name:
        if name not in STANDARD_CONTAINER_RESOURCES and not is_hugepage_resource_name(name):
            return ["must be a standard resource for containers"]
    elif not is_native_resource_name(name) and not is_extended_resource_name(name):
        return ["doesn't follow extended resource name standard"]
    return []
