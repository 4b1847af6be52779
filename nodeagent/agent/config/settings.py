"""The agent's YAML config: KubeletConfiguration field names, kubelet defaults, strict keys.

One immutable `Config` value per load, so a later reload can diff old against new
(`restart_required_changes`). Build it with `load_config` / `parse_config`: they add the checks
that span several keys (eviction thresholds, enforceNodeAllocatable) and report every problem
at once as `key.path: message` lines in a ConfigError.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from nodeagent.agent.config.stats import StatsSettings
from nodeagent.agent.config.thresholds import DEFAULT_EVICTION_HARD, IGNORED_SIGNALS, Threshold, parse_thresholds
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.names import validate_dns1123_subdomain
from nodeagent.core.quantity import Quantity, QuantityField
from nodeagent.core.wellknown import NODEAGENT_API_VERSION
from nodeagent.daemonkit.configfile import (
    AbsolutePath,
    AuthenticationConfig,
    AuthenticationField,
    ConfigError,
    GoDuration,
    LoggingConfig,
    absolute_path,
    ip_address,
    non_negative_duration,
    positive_duration,
    pydantic_error_lines,
    read_yaml,
    read_yaml_file,
)
from nodeagent.daemonkit.kubeconfig import KubeconfigError, load_kubeconfig

KUBELET_API_VERSION = "kubelet.config.k8s.io/v1beta1"
KUBELET_KIND = "KubeletConfiguration"
API_VERSION = NODEAGENT_API_VERSION
KIND = "NodeAgentConfiguration"
_KIND_FOR_API_VERSION = {KUBELET_API_VERSION: KUBELET_KIND, API_VERSION: KIND}
DEFAULT_CONFIG_SOURCE = "nodeagent/agent/config/defaults.yaml"
RESTART_KEYS = ("address", "port", "cgroupRoot", "cgroupDriver", "stateDir", "authentication",
                "anonymousLoopbackReads", "tlsCertFile", "tlsPrivateKeyFile", "unixSocket", "maxRequestBodyBytes",
                "nice", "nodefsPath", "imagefsPath", "ociRuntime")
UNIX_SOCKET_NAME = "nodeagent.sock"
V = TypeVar("V")
SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the terminating NUL


# ---- field types ----


def _number_to_str(value: object) -> object:
    """YAML turns `nodefs.inodesFree: 1000` into an int; the kubelet's maps hold strings."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def _non_negative_quantity(quantity: Quantity) -> Quantity:
    if quantity.sign() < 0:
        raise ValueError(f'must not be negative, got "{quantity}"')
    return quantity


def _http_url(value: str | None) -> str | None:
    if value is None:
        return value
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f'must be an http:// or https:// URL with a host, got "{value}"')
    return value.rstrip("/")


ReservedResource = Literal["cpu", "memory", "ephemeral-storage", "pid"]
ReservedQuantity = Annotated[QuantityField, AfterValidator(_non_negative_quantity)]
EvictionValue = Annotated[str, BeforeValidator(_number_to_str)]
EnforceKey = Literal["pods", "system-reserved", "kube-reserved", "none"]


def _unix_socket_path(value: str | None) -> str | None:
    if value is not None:
        absolute_path(value)
        if len(value.encode()) > SUN_PATH_MAX:
            raise ValueError(f"path too long for a Unix socket ({len(value.encode())} bytes, at most {SUN_PATH_MAX})")
    return value


def _registry_host(value: str) -> str:
    if not value or "/" in value or any(c.isspace() for c in value) or value != value.lower():
        raise ValueError(f'"{value}" must be a registry host[:port] in lower case, without scheme or path')
    return value


class RegistryConfig(BaseModel):
    """How the agent reaches one image registry (nodeagent's own key; images/credentials.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    insecure: bool = False  # plain HTTP or unverified TLS (loopback registries are allowed it anyway)
    username: str | None = None
    password_file: AbsolutePath | None = None
    cert_dir: AbsolutePath | None = None


class Config(BaseModel):
    """The effective configuration. snake_case attributes, camelCase YAML keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    api_version: str | None = None
    kind: str | None = None
    node_name: str | None = Field(default=None, validate_default=True)
    address: Annotated[str, AfterValidator(ip_address)] = "127.0.0.1"
    port: int = Field(default=10250, ge=1, le=65535)
    state_dir: AbsolutePath = "/var/lib/nodeagent"
    nodefs_path: AbsolutePath | None = None
    imagefs_path: AbsolutePath | None = None
    static_pod_path: AbsolutePath | None = None
    cgroup_root: AbsolutePath = "/"
    cgroup_driver: Literal["auto", "v2", "v1"] = "auto"
    max_pods: int = Field(default=110, ge=0)
    kube_reserved: dict[ReservedResource, ReservedQuantity] = Field(default_factory=dict)
    system_reserved: dict[ReservedResource, ReservedQuantity] = Field(default_factory=dict)
    kube_reserved_cgroup: AbsolutePath | None = None
    system_reserved_cgroup: AbsolutePath | None = None
    enforce_node_allocatable: tuple[EnforceKey, ...] = ("pods",)
    eviction_hard: dict[str, EvictionValue] | None = None
    merge_default_eviction_settings: bool = False
    eviction_soft: dict[str, EvictionValue] = Field(default_factory=dict)
    eviction_soft_grace_period: dict[str, EvictionValue] = Field(default_factory=dict)
    eviction_max_pod_grace_period: int = Field(default=0, ge=0)
    eviction_minimum_reclaim: dict[str, EvictionValue] = Field(default_factory=dict)
    eviction_pressure_transition_period: Annotated[GoDuration, AfterValidator(non_negative_duration)] = 300.0
    housekeeping_interval: Annotated[GoDuration, AfterValidator(positive_duration)] = 10.0
    # the agent's own CPU nice value; children (pods) start at 0 (node/priority.py)
    nice: int = Field(default=-10, ge=-20, le=19)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    # API access. Unset authentication: only the unixSocket (and /healthz); daemonkit/auth.py.
    authentication: AuthenticationField = None
    # Reads (GET) over loopback TCP without credentials: off, since any local user reaches 127.0.0.1.
    anonymous_loopback_reads: bool = False
    tls_cert_file: AbsolutePath | None = None
    tls_private_key_file: AbsolutePath | None = None
    unix_socket: Annotated[str | None, AfterValidator(_unix_socket_path)] = None
    max_request_body_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    # The central scheduler (optional): the agent POSTs its Node status there on start and every
    # nodeStatusUpdateFrequency (nodeagent/node/registration.py).
    scheduler_url: Annotated[str | None, AfterValidator(_http_url)] = Field(default=None, alias="schedulerURL")
    scheduler_token_file: AbsolutePath | None = None
    node_status_update_frequency: Annotated[GoDuration, AfterValidator(positive_duration)] = 10.0
    # The control plane (`nodeagent server run`), as the kubelet's --kubeconfig: the agent creates its
    # Node there, keeps its status every nodeStatusUpdateFrequency and renews the Lease
    # kube-node-lease/<nodeName> every nodeLeaseDurationSeconds/4 (agent/cluster_client). Unset: none.
    kubeconfig: AbsolutePath | None = None
    node_lease_duration_seconds: int = Field(default=40, ge=1)
    # configMap/secret/downwardAPI/projected volume files of running pods are read again from the
    # server and rewritten (atomically) this often; nodeagent's own key, read at start
    # (pods/volume_refresh.py says why a period and not a watch).
    volume_refresh_period: Annotated[GoDuration, AfterValidator(positive_duration)] = 10.0
    # An unchanged status is still sent this often (the kubelet's key; the Lease carries liveness).
    # Unset: 5m, or nodeStatusUpdateFrequency when that is set (the kubelet's compatibility rule).
    node_status_report_frequency: Annotated[GoDuration, AfterValidator(positive_duration)] = 300.0
    # Images (nodeagent/agent/images): the kubelet's image GC keys, then nodeagent's own.
    image_gc_high_threshold_percent: int = Field(default=85, ge=0, le=100, alias="imageGCHighThresholdPercent")
    image_gc_low_threshold_percent: int = Field(default=80, ge=0, le=100, alias="imageGCLowThresholdPercent")
    image_minimum_gc_age: Annotated[GoDuration, AfterValidator(non_negative_duration)] = Field(
        default=120.0, alias="imageMinimumGCAge")
    image_maximum_gc_age: Annotated[GoDuration, AfterValidator(non_negative_duration)] = Field(
        default=0.0, alias="imageMaximumGCAge")
    image_registries: dict[Annotated[str, AfterValidator(_registry_host)], RegistryConfig] = Field(default_factory=dict)
    image_pull_progress_timeout: Annotated[GoDuration, AfterValidator(positive_duration)] = 300.0
    # The OCI runtime that runs containers from images (runtime/oci/select.py): auto takes runc,
    # else crun where this host's cgroup layout lets it run; none runs no image. Read at start.
    oci_runtime: Literal["auto", "runc", "crun", "none"] = "auto"
    # Resource metrics (nodeagent/agent/stats: /metrics/resource, /stats/summary), nodeagent's own
    # keys (the kubelet leaves these to cAdvisor's flags): one read pass of every pod cgroup per
    # statsInterval, CPU rates over statsCPURateWindow, log and volume directories walked every
    # statsStorageInterval, statsMaxOpenFiles descriptors kept for re-reading (null: half the soft
    # RLIMIT_NOFILE). Checked together by StatsSettings (config/stats.py).
    stats_interval: GoDuration = 1.0
    stats_cpu_rate_window: GoDuration = Field(default=1.0, alias="statsCPURateWindow")
    stats_storage_interval: GoDuration = 10.0
    stats_max_open_files: int | None = None

    @field_validator("api_version")
    @classmethod
    def _check_api_version(cls, value: str | None) -> str | None:
        if value is not None and value not in _KIND_FOR_API_VERSION:
            raise ValueError(f'unsupported apiVersion "{value}"; use "{API_VERSION}" or "{KUBELET_API_VERSION}"')
        return value

    @field_validator("kind")
    @classmethod
    def _check_kind(cls, value: str | None, info: Any) -> str | None:
        if value is None:
            return value
        expected = _KIND_FOR_API_VERSION.get(info.data.get("api_version") or "")
        if expected is not None and value != expected:
            raise ValueError(f'must be "{expected}" for apiVersion "{info.data["api_version"]}", got "{value}"')
        if value not in _KIND_FOR_API_VERSION.values():
            raise ValueError(f'unsupported kind "{value}"; use "{KIND}" or "{KUBELET_KIND}"')
        return value

    @field_validator("node_name")
    @classmethod
    def _check_node_name(cls, value: str | None) -> str:
        if value is None:
            hostname = socket.gethostname().strip().lower()
            try:
                validate_dns1123_subdomain(hostname)
            except ValueError as exc:
                raise ValueError(
                    f"defaults to the hostname, which is not a valid node name ({exc}); set nodeName"
                ) from None
            return hostname
        validate_dns1123_subdomain(value)
        return value

    @field_validator("enforce_node_allocatable")
    @classmethod
    def _check_enforce(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if "none" in value and len(value) > 1:
            raise ValueError('may not contain other enforcements when "none" is specified')
        return value

    @model_validator(mode="after")
    def _resolve_defaults(self) -> Config:
        """Fill the defaults that depend on other keys (the model is frozen: set them once here)."""
        nodefs = self.nodefs_path or self.state_dir
        object.__setattr__(self, "nodefs_path", nodefs)
        object.__setattr__(self, "imagefs_path", self.imagefs_path or nodefs)
        hard = effective_eviction_hard(self.eviction_hard, self.merge_default_eviction_settings)
        if "node_status_report_frequency" not in self.model_fields_set and \
                "node_status_update_frequency" in self.model_fields_set:
            object.__setattr__(self, "node_status_report_frequency", self.node_status_update_frequency)
        object.__setattr__(self, "eviction_hard", hard)
        if "unix_socket" not in self.model_fields_set:  # unset: under stateDir; explicit null: none
            path = f"{self.state_dir.rstrip('/')}/{UNIX_SOCKET_NAME}"
            if len(path.encode()) > SUN_PATH_MAX:
                raise ValueError(f"unixSocket: the default {path} is too long for a Unix socket; set unixSocket")
            object.__setattr__(self, "unix_socket", path)
        return self

    @cached_property
    def thresholds(self) -> tuple[Threshold, ...]:
        """The effective eviction thresholds (hard, soft, then allocatableMemory copies)."""
        return tuple(_thresholds_from(self.model_dump(by_alias=True)))

    @property
    def stats(self) -> StatsSettings:
        """The resource-metrics sampler's settings; FieldError naming the key if they do not fit."""
        return StatsSettings(interval=self.stats_interval, cpu_window=self.stats_cpu_rate_window,
                             storage_interval=self.stats_storage_interval, max_open_files=self.stats_max_open_files)

    @property
    def hard_thresholds(self) -> tuple[Threshold, ...]:
        """Hard thresholds, including the allocatableMemory.available copies (allocatable
        subtracts only memory.available and nodefs.available, so passing these is fine)."""
        return tuple(t for t in self.thresholds if t.hard)

    def to_dict(self) -> dict[str, Any]:
        """Every key, camelCase, JSON-ready (quantities and durations as strings)."""
        return self.model_dump(mode="json", by_alias=True)


def effective_eviction_hard(eviction_hard: Mapping[str, V] | None, merge_defaults: bool) -> dict[str, V | str]:
    """The kubelet's rule (cmd/kubelet/app/server.go loadConfigFile): an unset evictionHard gets
    the defaults; a set one replaces them entirely (signals left out are disabled) unless
    mergeDefaultEvictionSettings is true, which fills in the signals left out."""
    if eviction_hard is None:
        return dict(DEFAULT_EVICTION_HARD)
    merged: dict[str, V | str] = dict(eviction_hard)
    if merge_defaults:
        for signal, value in DEFAULT_EVICTION_HARD.items():
            merged.setdefault(signal, value)
    return merged


def _thresholds_from(data: Mapping[str, Any]) -> list[Threshold]:
    """Thresholds from camelCase config data (raw or dumped); raises ValidationErrors."""
    hard = data.get("evictionHard")
    merge = data.get("mergeDefaultEvictionSettings") is True
    enforce = data.get("enforceNodeAllocatable", ("pods",))

    def as_map(value: object) -> dict[str, object]:
        return {str(k): _number_to_str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}

    return parse_thresholds(
        effective_eviction_hard(as_map(hard) if isinstance(hard, Mapping) else None, merge),
        as_map(data.get("evictionSoft")),
        as_map(data.get("evictionSoftGracePeriod")),
        as_map(data.get("evictionMinimumReclaim")),
        enforce_node_allocatable=enforce if isinstance(enforce, (list, tuple)) else (),
    )


def _cross_checks(config: Config) -> list[FieldError]:
    errors = []
    for key, cgroup, alias in (
        ("system-reserved", config.system_reserved_cgroup, "systemReservedCgroup"),
        ("kube-reserved", config.kube_reserved_cgroup, "kubeReservedCgroup"),
    ):
        if key in config.enforce_node_allocatable and not cgroup:
            errors.append(FieldError("enforceNodeAllocatable", f'"{key}" needs {alias} to name the cgroup to limit'))
    if (config.tls_cert_file is None) != (config.tls_private_key_file is None):
        missing = "tlsPrivateKeyFile" if config.tls_private_key_file is None else "tlsCertFile"
        errors.append(FieldError(missing, "tlsCertFile and tlsPrivateKeyFile must be set together"))
    low, high = config.image_gc_low_threshold_percent, config.image_gc_high_threshold_percent
    if low >= high:
        errors.append(FieldError("imageGCLowThresholdPercent",
                                 f"{low} must be less than imageGCHighThresholdPercent {high}"))
    if config.image_maximum_gc_age and config.image_maximum_gc_age <= config.image_minimum_gc_age:
        errors.append(FieldError("imageMaximumGCAge", f"{config.image_maximum_gc_age}s must be greater than "
                                                      f"imageMinimumGCAge {config.image_minimum_gc_age}s"))
    for host, registry in config.image_registries.items():
        if registry.password_file and not registry.username:
            errors.append(FieldError(f"imageRegistries.{host}.passwordFile", "needs username"))
    try:
        config.stats  # noqa: B018 - built for its checks
    except FieldError as e:
        errors.append(e)
    if config.kubeconfig:
        try:
            load_kubeconfig(config.kubeconfig)
        except KubeconfigError as e:
            errors.append(FieldError("kubeconfig", str(e)))
    auth = config.authentication
    if isinstance(auth, AuthenticationConfig) and auth.client_ca_file and config.tls_cert_file is None:
        errors.append(FieldError("authentication.clientCAFile",
                                 "client certificates need TLS: set tlsCertFile and tlsPrivateKeyFile"))
    return errors


def parse_config(data: Mapping[str, Any] | None, source: str) -> Config:
    """Validate config data (camelCase keys) into a Config; ConfigError lists every problem."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(source, [f"(root): expected a mapping of configuration keys, got {type(data).__name__}"])
    lines: list[tuple[str, str]] = []
    config: Config | None = None
    try:
        config = Config.model_validate(dict(data))
    except ValidationError as exc:
        lines += pydantic_error_lines(exc, Config)
    thresholds: list[Threshold] | None = None
    try:
        thresholds = _thresholds_from(config.model_dump(by_alias=True) if config else data)
    except ValidationErrors as exc:
        reported = [path for path, _ in lines]
        for err in exc.errors:
            if not any(err.path == p or err.path.startswith(p + ".") for p in reported):
                lines.append((err.path, err.message))
    if config is not None:
        lines += [(e.path, e.message) for e in _cross_checks(config)]
    if lines:
        raise ConfigError(source, [f"{path}: {message}" if path else message for path, message in lines])
    assert config is not None and thresholds is not None
    config.__dict__["thresholds"] = tuple(thresholds)  # prime the cached_property
    return config


def parse_yaml(text: str, source: str) -> Config:
    """Parse YAML text into a Config; an empty document means all defaults."""
    return parse_config(read_yaml(text, source), source)


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; ConfigError (with the file name) on any problem."""
    return parse_config(read_yaml_file(path), str(path))


def default_config_text() -> str:
    """The embedded defaults.yaml shipped as package data."""
    return resources.files("nodeagent.agent.config").joinpath("defaults.yaml").read_text(encoding="utf-8")


def load_default_config() -> Config:
    return parse_yaml(default_config_text(), DEFAULT_CONFIG_SOURCE)


def restart_required_changes(old: Config, new: Config) -> list[str]:
    """Keys (camelCase) whose change a reload cannot apply in place: the agent must restart."""
    names = {field.alias: name for name, field in Config.model_fields.items()}
    return [key for key in RESTART_KEYS if getattr(old, names[key]) != getattr(new, names[key])]


def config_warnings(config: Config) -> list[str]:
    """Legal but probably unintended settings, as `key.path: message` lines."""
    out = []
    soft = set(config.eviction_soft)
    for signal in config.eviction_soft_grace_period:
        if signal not in soft:
            out.append(f"evictionSoftGracePeriod.{signal}: no evictionSoft.{signal} threshold; ignored")
    effective = {t.signal for t in config.thresholds}
    for signal in config.eviction_minimum_reclaim:
        if signal not in effective:
            out.append(f"evictionMinimumReclaim.{signal}: no threshold for this signal; ignored")
    for key, values in (("evictionHard", config.eviction_hard or {}), ("evictionSoft", config.eviction_soft)):
        for signal in values:
            if signal in IGNORED_SIGNALS:
                out.append(
                    f"{key}.{signal}: ignored; nodeagent has no separate container filesystem "
                    "(the nodefs/imagefs thresholds apply)"
                )
    missing = [s for s in DEFAULT_EVICTION_HARD if s not in (config.eviction_hard or {})]
    if missing and not config.merge_default_eviction_settings:
        out.append(
            f"evictionHard: the default hard thresholds for {', '.join(missing)} are disabled because evictionHard "
            "is set without them (set mergeDefaultEvictionSettings: true to keep the defaults)"
        )
    return out
