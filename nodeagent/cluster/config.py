"""The scheduler's YAML config: strict keys, kube-scheduler/controller-manager names where they exist.

One immutable `SchedulerConfig` per load. Field types are shared with the agent's config
(durations, absolute paths, `authentication`), so both files read the same way; errors come as
`key.path: message` lines in a nodeagent.daemonkit.configfile.ConfigError, every problem at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from nodeagent.core.names import validate_dns1123_subdomain
from nodeagent.core.wellknown import NODEAGENT_API_VERSION
from nodeagent.daemonkit.configfile import (
    AbsolutePath,
    AuthenticationConfig,
    AuthenticationField,
    ConfigError,
    LoggingConfig,
    PositiveDuration,
    ip_address,
    pydantic_error_lines,
    read_yaml_file,
)

API_VERSION = NODEAGENT_API_VERSION
KIND = "SchedulerConfiguration"
DEFAULT_PORT = 10251  # kube-scheduler's historical insecure port


def _agent_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f'must be an http:// or https:// URL with a host, got "{value}"')
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f'must be the agent\'s base URL (no path or query), got "{value}"')
    try:
        _ = parts.port  # parsing the port is the check
    except ValueError:
        raise ValueError(f'has an invalid port: "{value}"') from None
    return value.rstrip("/")


def _node_name(value: str) -> str:
    validate_dns1123_subdomain(value)
    return value


AgentURL = Annotated[str, AfterValidator(_agent_url)]


class NodeEntry(BaseModel):
    """An agent the scheduler knows from its config (agents may also register themselves)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, AfterValidator(_node_name)]
    url: AgentURL


class SchedulerConfig(BaseModel):
    """The effective scheduler configuration. snake_case attributes, camelCase YAML keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    api_version: Literal["nodeagent.io/v1alpha1"] | None = None
    kind: Literal["SchedulerConfiguration"] | None = None
    address: Annotated[str, AfterValidator(ip_address)] = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)  # 0: any free port (tests)
    state_dir: AbsolutePath = "/var/lib/nodeagent-scheduler"
    store_sync: Literal["normal", "full"] = "normal"
    nodes: tuple[NodeEntry, ...] = ()
    agent_token_file: AbsolutePath | None = None
    agent_ca_file: AbsolutePath | None = Field(default=None, alias="agentCAFile")
    agent_request_timeout: PositiveDuration = 10.0
    authentication: AuthenticationField = None
    tls_cert_file: AbsolutePath | None = None
    tls_private_key_file: AbsolutePath | None = None
    max_request_body_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    node_poll_interval: PositiveDuration = 5.0
    node_monitor_grace_period: PositiveDuration = 40.0
    pod_eviction_timeout: PositiveDuration = 300.0
    pod_initial_backoff: PositiveDuration = 1.0
    pod_max_backoff: PositiveDuration = 10.0
    scoring: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @model_validator(mode="after")
    def _cross(self) -> SchedulerConfig:
        seen: set[str] = set()
        for i, node in enumerate(self.nodes):
            if node.name in seen:
                raise ValueError(f"nodes[{i}].name: Duplicate value: \"{node.name}\"")
            seen.add(node.name)
        if self.pod_max_backoff < self.pod_initial_backoff:
            raise ValueError("podMaxBackoff: must be at least podInitialBackoff")
        if (self.tls_cert_file is None) != (self.tls_private_key_file is None):
            raise ValueError("tlsCertFile: tlsCertFile and tlsPrivateKeyFile must be set together")
        auth = self.authentication
        if isinstance(auth, AuthenticationConfig) and auth.client_ca_file and self.tls_cert_file is None:
            raise ValueError("authentication.clientCAFile: client certificates need TLS: set "
                             "tlsCertFile and tlsPrivateKeyFile")
        return self

    @property
    def db_path(self) -> str:
        return str(Path(self.state_dir) / "scheduler.db")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def _lines(exc: ValidationError) -> list[str]:
    return [f"{path}: {message}" if path else message for path, message in pydantic_error_lines(exc, SchedulerConfig)]


def parse_scheduler_config(data: Any, source: str) -> SchedulerConfig:
    """Validate config data (camelCase keys); ConfigError lists every problem with its key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"(root): expected a mapping of configuration keys, got "
                                   f"{type(data).__name__}"])
    try:
        return SchedulerConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _lines(exc)) from None


def load_scheduler_config(path: str | Path) -> SchedulerConfig:
    return parse_scheduler_config(read_yaml_file(path), str(path))
