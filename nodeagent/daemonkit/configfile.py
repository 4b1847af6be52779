"""What every nodeagent config file is made of: the YAML reader, field types, and the error.

The agent's and the control plane's configs read the same way: strict YAML (no duplicate keys),
Go durations ("1m30s"), absolute paths, the `authentication` key, and every problem reported at
once as `key.path: message` lines of one ConfigError naming the file.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from nodeagent.core.duration import format_go_duration, parse_go_duration
from nodeagent.core.errors import format_loc
from nodeagent.daemonkit.yamlerrors import YamlProblem


class ConfigError(ValueError):
    """A config that cannot be used; `.errors` are `key.path: message` lines, `.source` the file."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = list(errors)
        super().__init__("\n".join(f"{source}: {line}" for line in self.errors))



def _duration(value: object) -> float:
    if not isinstance(value, str):
        raise ValueError(f'expected a duration string like "10s" or "1m30s", got {value!r}')
    return parse_go_duration(value)


def non_negative_duration(seconds: float) -> float:
    if seconds < 0:
        raise ValueError(f"must not be negative, got {format_go_duration(seconds)}")
    return seconds


def positive_duration(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"must be positive, got {format_go_duration(seconds)}")
    return seconds



def absolute_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f'must be an absolute path, got "{value}"')
    return value



def ip_address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f'must be an IP address, got "{value}"') from None
    return value



GoDuration = Annotated[float, BeforeValidator(_duration), PlainSerializer(format_go_duration, return_type=str)]
"""Seconds in Python; a Go duration string ("1m30s") in YAML and JSON."""
PositiveDuration = Annotated[GoDuration, AfterValidator(positive_duration)]
AbsolutePath = Annotated[str, AfterValidator(absolute_path)]

class LoggingConfig(BaseModel):
    """Log level and output format (auto: console on a terminal, JSON otherwise)."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    level: Literal["info", "debug", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class AuthenticationConfig(BaseModel):
    """Who may call the API over TCP: a bearer token file, client certificates, or both.

    clientCAFile is the kubelet's authentication.x509.clientCAFile, one level up; tokenFile is
    ours (the kubelet checks tokens with a webhook to the API server, which a lone node has not).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    token_file: AbsolutePath | None = Field(default=None, alias="tokenFile")
    client_ca_file: AbsolutePath | None = Field(default=None, alias="clientCAFile")

    @model_validator(mode="after")
    def _one_of(self) -> AuthenticationConfig:
        if self.token_file is None and self.client_ca_file is None:
            raise ValueError('set tokenFile and/or clientCAFile, or write "authentication: none" '
                             "to serve the API without authentication on purpose")
        return self



def _authentication_tag(value: object) -> str | None:
    if value is None:
        return "unset"
    if value == "none":
        return "none"
    if isinstance(value, (Mapping, AuthenticationConfig)):
        return "config"
    return None


AUTH_TAGS = ("unset", "none", "config")
AuthenticationField = Annotated[
    Annotated[None, Tag("unset")] | Annotated[Literal["none"], Tag("none")]
    | Annotated[AuthenticationConfig, Tag("config")],
    Discriminator(_authentication_tag, custom_error_type="authentication",
                  custom_error_message='must be "none" or a mapping with tokenFile and/or clientCAFile'),
]
"""`authentication`: unset (None), the explicit string "none", or an AuthenticationConfig."""



def pydantic_error_lines(exc: ValidationError, model: type[BaseModel]) -> list[tuple[str, str]]:
    """(key path, message) per error of a config model (the agent's and the scheduler's): camelCase
    names, "unknown field (did you mean ...?)", union tags left out; a root-level error (a
    cross-key check that names its keys itself) has an empty path."""
    out = []
    aliases = {name: f.alias or name for name, f in model.model_fields.items()}
    known = list(aliases.values())
    for err in exc.errors():
        loc = [part for part in err["loc"] if part != "[key]"]
        if len(loc) > 1 and loc[0] == "authentication" and loc[1] in AUTH_TAGS:
            del loc[1]  # the union member's tag says nothing to the operator
        if loc and err["type"] != "extra_forbidden" and loc[0] in aliases:
            loc[0] = aliases[str(loc[0])]  # a default that failed validation is located by name
        path = format_loc(loc)
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
            if len(loc) == 1:
                close = difflib.get_close_matches(str(loc[0]), known, n=1, cutoff=0.7)
                if close:
                    message += f" (did you mean {close[0]}?)"
        out.append((path, message))
    return out



class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (the kubelet's strict decoding does too)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(text: str, source: str) -> Any:
    """YAML text -> plain data (strict: no duplicate keys); ConfigError with the line on a syntax error."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except (yaml.YAMLError, RecursionError) as exc:
        problem = YamlProblem.of(exc)
        where = f"{problem.where}: " if problem.where else ""
        raise ConfigError(source, [f"{where}invalid YAML: {problem.what}"]) from None


def read_yaml_file(path: str | Path) -> Any:
    """A config file's plain data (the agent's and the scheduler's); ConfigError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"cannot read config: {getattr(exc, 'strerror', None) or exc}"]) from None
    return read_yaml(text, str(path))


