"""The actions a probe or a lifecycle hook runs: exec, httpGet, tcpSocket, grpc, sleep.

Each model holds the shape; `*_errors(path, ...)` hold Kubernetes' checks that pydantic cannot
express (port numbers or IANA names, header names, the supported schemes), with its messages.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from nodeagent.core.errors import FieldError
from nodeagent.core.model.base import Int64, IntOrString, KubeModel, Text, one_of
from nodeagent.core.names import invalid

PORT_NAME_MAX_LENGTH = 15
_PORT_NAME_CHARS = re.compile(r"[-a-z0-9]+")
_PORT_NAME_LETTER = re.compile(r"[a-z]")
_HTTP_HEADER_NAME = re.compile(r"[-A-Za-z0-9]+")
_HTTP_HEADER_MSG = (
    "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', "
    "regex used for validation is '[-A-Za-z0-9]+')"
)


Scheme = Annotated[Literal["HTTP", "HTTPS"], one_of("HTTP", "HTTPS")]


class ExecAction(KubeModel):
    command: list[Text] = []


class HTTPHeader(KubeModel):
    name: str
    value: Text


class HTTPGetAction(KubeModel):
    """Kubernetes defaults path to "/" and scheme to HTTP."""

    _written_when_set: ClassVar[frozenset[str]] = frozenset({"path", "scheme"})

    path: Text = "/"
    port: IntOrString
    host: Text | None = None
    scheme: Scheme = "HTTP"
    http_headers: list[HTTPHeader] = []


class TCPSocketAction(KubeModel):
    port: IntOrString
    host: Text | None = None


class GRPCAction(KubeModel):
    port: Annotated[int, Field(strict=True)]
    service: Text | None = None


class SleepAction(KubeModel):
    seconds: Int64


def port_number_errors(port: int) -> list[str]:
    """validation.IsValidPortNum."""
    return [] if 1 <= port <= 65535 else ["must be between 1 and 65535, inclusive"]


def port_name_errors(name: str) -> list[str]:
    """validation.IsValidPortName: an IANA_SVC_NAME."""
    errs = []
    if len(name) > PORT_NAME_MAX_LENGTH:
        errs.append(f"must be no more than {PORT_NAME_MAX_LENGTH} characters")
    if not _PORT_NAME_CHARS.fullmatch(name):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in name:
        errs.append("must not contain consecutive hyphens")
    if not _PORT_NAME_LETTER.search(name):
        errs.append("must contain at least one letter (a-z)")
    if name.startswith("-") or name.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def port_errors(path: str, port: int | str) -> list[FieldError]:
    """ValidatePortNumOrName."""
    msgs = port_number_errors(port) if isinstance(port, int) else port_name_errors(port)
    return [FieldError(path, invalid(port, m)) for m in msgs]


def exec_errors(path: str, action: ExecAction) -> list[FieldError]:
    return [] if action.command else [FieldError(f"{path}.command", "Required value")]


def http_get_errors(path: str, action: HTTPGetAction) -> list[FieldError]:
    errs = [] if action.path else [FieldError(f"{path}.path", "Required value")]
    errs += port_errors(f"{path}.port", action.port)
    for header in action.http_headers:
        if not _HTTP_HEADER_NAME.fullmatch(header.name):
            errs.append(FieldError(f"{path}.httpHeaders", invalid(header.name, _HTTP_HEADER_MSG)))
    return errs


def tcp_socket_errors(path: str, action: TCPSocketAction) -> list[FieldError]:
    return port_errors(f"{path}.port", action.port)


def grpc_errors(path: str, action: GRPCAction) -> list[FieldError]:
    return [FieldError(f"{path}.port", invalid(action.port, m)) for m in port_number_errors(action.port)]


def sleep_errors(path: str, action: SleepAction, grace_period: int | None) -> list[FieldError]:
    """PodLifecycleSleepActionAllowZero (GA): 0 <= seconds <= the pod's grace period."""
    if grace_period is not None and not 0 <= action.seconds <= grace_period:
        detail = f"must be non-negative and less than terminationGracePeriodSeconds ({grace_period})"
        return [FieldError(f"{path}.seconds", invalid(action.seconds, detail))]
    return []


def handler_errors(path: str, handler: object, kinds: tuple[str, ...], grace_period: int | None) -> list[FieldError]:
    """validateHandler: exactly one of `kinds` (attribute names, in Kubernetes' order) is set."""
    errs: list[FieldError] = []
    seen = 0
    for kind in kinds:
        action = getattr(handler, kind)
        if action is None:
            continue
        alias = type(handler).model_fields[kind].alias or kind  # type: ignore[attr-defined]
        if seen:
            errs.append(FieldError(f"{path}.{alias}", "Forbidden: may not specify more than 1 handler type"))
            continue
        seen += 1
        where = f"{path}.{alias}"
        if isinstance(action, ExecAction):
            errs += exec_errors(where, action)
        elif isinstance(action, HTTPGetAction):
            errs += http_get_errors(where, action)
        elif isinstance(action, TCPSocketAction):
            errs += tcp_socket_errors(where, action)
        elif isinstance(action, GRPCAction):
            errs += grpc_errors(where, action)
        elif isinstance(action, SleepAction):
            errs += sleep_errors(where, action, grace_period)
    if not seen:
        errs.append(FieldError(path, "Required value: must specify a handler type"))
    return errs
