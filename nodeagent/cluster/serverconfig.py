"""`nodeagent server run --config FILE`: the control plane's config (strict keys, camelCase YAML).

    apiVersion: nodeagent.io/v1alpha1
    kind: ServerConfiguration
    address: 127.0.0.1          # plain HTTP without authentication: loopback only for now
    port: 6443                  # 0: any free port (tests; the bound port is logged)
    storage:
      backend: sqlite           # the embedded default (k3s's choice); an etcd backend can come later
      path: /var/lib/nodeagent-server/state.db
    watchBookmarkInterval: 1m
    compactionInterval: 5m      # history older than one interval is compacted (watchers then get 410)
    logging: {level: info, format: auto}
    controllers: ["*"]          # the in-process controller-manager: "*" (all), names, "-name" to leave one out,
                                # [] for none (kube-controller-manager's --controllers)
    nodeLifecycle:              # kube-controller-manager's node lifecycle flags, upstream defaults
      nodeMonitorGracePeriod: 50s       # no Lease renewal nor status for this long: Ready=Unknown
      nodeStartupGracePeriod: 1m        # the same for a node that never posted Ready
      nodeMonitorPeriod: 5s
      nodeEvictionRate: 0.1             # nodes per second tainted NoExecute in a healthy zone
      secondaryNodeEvictionRate: 0.01   # in a partially disrupted zone (0 below largeClusterSizeThreshold)
      unhealthyZoneThreshold: 0.55
      largeClusterSizeThreshold: 50
    security:                   # set: HTTPS with a CA and serving certificate made on first start
      tokenAuthFile: /etc/nodeagent/tokens.csv   # kube-apiserver's flag names (cluster/auth/config.py)
      authorizationMode: [Node, RBAC]
    metricResolution: 15s       # how often the agents' /metrics/resource is scraped (1s at the least)
    metricsScrape:              # how the server authenticates to the agents (scrape, logs, exec)
      tokenFile: /etc/nodeagent/agent-token      # a bearer token the agents' tokenFile holds
      caFile: /etc/nodeagent/agent-ca.crt        # verifies the agents' serving certificates
      insecureSkipTLSVerify: false               # metrics-server's --kubelet-insecure-tls
      timeout: 10s                               # per agent; at most 80% of the resolution is used
    horizontalPodAutoscaler:    # kube-controller-manager's --horizontal-pod-autoscaler-* flags
      syncPeriod: 15s
      tolerance: 0.1
      downscaleStabilization: 5m
      cpuInitializationPeriod: 5m
      initialReadinessDelay: 30s
      fast: false               # true: a sync a second and the fast first reaction (autoscaling/hpa/fast.py)
    externalMetrics:            # set: external.metrics.k8s.io and HPA External metrics from Prometheus
      prometheusURL: http://127.0.0.1:9090
      timeout: 5s
      rules:                    # prometheus-adapter's externalRules, kept small; none: a name is its series
        - name: queue_depth
          query: sum(queue_messages{<<.LabelMatchers>>})
    verticalPodAutoscaler:      # vpa-recommender's and vpa-updater's flags
      recommenderInterval: 1m
      checkpointInterval: 1m
      updaterInterval: 1m
      podRecommendationMinCpuMillicores: 25     # the floor of a pod's recommendation, split over its containers
      podRecommendationMinMemoryMb: 250
      inRecommendationBoundsEvictionLifetimeThreshold: 12h   # pods within bounds are updated only older than this
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from nodeagent.cluster.auth.config import SecurityConfig
from nodeagent.cluster.controllers.manager.manager import CONTROLLERS
from nodeagent.cluster.controllers.manager.nodelifecycle import NodeLifecycleSettings
from nodeagent.cluster.controllers.nodelifecycle.zones import Rates
from nodeagent.daemonkit.configfile import (
    AbsolutePath,
    ConfigError,
    GoDuration,
    LoggingConfig,
    PositiveDuration,
    ip_address,
    pydantic_error_lines,
    read_yaml_file,
)

DEFAULT_PORT = 6443


class StorageConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    backend: Literal["sqlite", "memory"] = "sqlite"
    path: AbsolutePath = "/var/lib/nodeagent-server/state.db"


def _at_least_a_second(seconds: float) -> float:
    if seconds < 1.0:
        raise ValueError(f"must be at least 1s, got {seconds:g}s")
    return seconds


class MetricsScrapeConfig(BaseModel):
    """The server's credentials toward the agents. With `security` on, the server also presents a
    client certificate from its client CA (CN system:nodeagent-metrics-scraper) over HTTPS: an agent
    whose authentication.clientCAFile is the server's client-ca.crt accepts it as it is."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    token_file: AbsolutePath | None = None
    ca_file: AbsolutePath | None = Field(default=None, alias="caFile")
    insecure_skip_tls_verify: bool = Field(default=False, alias="insecureSkipTLSVerify")
    timeout: PositiveDuration = 10.0


class NodeLifecycleConfig(BaseModel):
    """The node lifecycle controller's flags (kube-controller-manager's names); short grace periods
    let a test watch a node go unreachable without waiting 50 s."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    node_monitor_grace_period: PositiveDuration = 50.0  # 50 s since Kubernetes 1.32 (was 40 s)
    node_startup_grace_period: PositiveDuration = 60.0
    node_monitor_period: PositiveDuration = 5.0
    node_eviction_rate: float = Field(default=0.1, ge=0)
    secondary_node_eviction_rate: float = Field(default=0.01, ge=0)
    unhealthy_zone_threshold: float = Field(default=0.55, gt=0, le=1)
    large_cluster_size_threshold: int = Field(default=50, ge=0)

    def settings(self) -> NodeLifecycleSettings:
        return NodeLifecycleSettings(
            monitor_grace=self.node_monitor_grace_period, startup_grace=self.node_startup_grace_period,
            monitor_period=self.node_monitor_period,
            rates=Rates(self.node_eviction_rate, self.secondary_node_eviction_rate, self.unhealthy_zone_threshold,
                        self.large_cluster_size_threshold))


class HorizontalPodAutoscalerConfig(BaseModel):
    """The HPA controller's settings (upstream's defaults); `fast` turns on hpa.fast's 1 s syncs."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    sync_period: PositiveDuration = 15.0
    tolerance: float = Field(default=0.1, ge=0.0)
    downscale_stabilization: Annotated[GoDuration, Field(ge=0.0)] = 300.0
    cpu_initialization_period: Annotated[GoDuration, Field(ge=0.0)] = 300.0
    initial_readiness_delay: Annotated[GoDuration, Field(ge=0.0)] = 30.0
    fast: bool = False


class ExternalMetricRuleConfig(BaseModel):
    """One metric name and its PromQL template (<<.Series>>, <<.LabelMatchers>>, <<.Namespace>>)."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    name: Annotated[str, Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")]
    query: Annotated[str, Field(min_length=1)] = "<<.Series>>{<<.LabelMatchers>>}"


class ExternalMetricsConfig(BaseModel):
    """Where external metrics come from: a Prometheus (its HTTP API) and the rules that name them."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    prometheus_url: Annotated[str, Field(alias="prometheusURL", pattern=r"^https?://")]
    timeout: PositiveDuration = 5.0
    rules: tuple[ExternalMetricRuleConfig, ...] = ()


class VerticalPodAutoscalerConfig(BaseModel):
    """The VPA loops' periods (upstream's --recommender-interval and --updater-interval, 1 min), and the
    recommender's and updater's flags a short-lived cluster needs (--pod-recommendation-min-*,
    --in-recommendation-bounds-eviction-lifetime-threshold); upstream's defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    recommender_interval: PositiveDuration = 60.0
    checkpoint_interval: PositiveDuration = 60.0
    updater_interval: PositiveDuration = 60.0
    pod_recommendation_min_cpu_millicores: float = Field(default=25.0, ge=0.0)
    pod_recommendation_min_memory_mb: float = Field(default=250.0, ge=0.0)
    in_recommendation_bounds_eviction_lifetime_threshold: Annotated[GoDuration, Field(ge=0.0)] = 12 * 3600.0


class ServerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    api_version: Literal["nodeagent.io/v1alpha1"] | None = None
    kind: Literal["ServerConfiguration"] | None = None
    address: Annotated[str, AfterValidator(ip_address)] = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    watch_bookmark_interval: PositiveDuration = 60.0
    compaction_interval: PositiveDuration = 300.0  # kube-apiserver's --etcd-compaction-interval
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    security: SecurityConfig | None = None  # unset: plain HTTP on loopback, no authentication
    metric_resolution: Annotated[PositiveDuration, AfterValidator(_at_least_a_second)] = 15.0
    metrics_scrape: MetricsScrapeConfig = Field(default_factory=MetricsScrapeConfig)
    controllers: tuple[str, ...] = ("*",)
    node_lifecycle: NodeLifecycleConfig = Field(default_factory=NodeLifecycleConfig)
    horizontal_pod_autoscaler: HorizontalPodAutoscalerConfig = Field(default_factory=HorizontalPodAutoscalerConfig)
    external_metrics: ExternalMetricsConfig | None = None  # unset: no external metrics API
    vertical_pod_autoscaler: VerticalPodAutoscalerConfig = Field(default_factory=VerticalPodAutoscalerConfig)

    @model_validator(mode="after")
    def _controllers(self) -> ServerConfig:
        for c in self.controllers:
            if c != "*" and c.removeprefix("-") not in CONTROLLERS:
                raise ValueError(f"controllers: unknown controller {c!r}: known are {', '.join(CONTROLLERS)} "
                                 '("*" for all, "-name" to leave one out)')
        return self

    @property
    def enabled_controllers(self) -> list[str]:
        """--controllers semantics: "*" turns on every one, "name" one, "-name" turns one off."""
        on = {c for c in CONTROLLERS if "*" in self.controllers or c in self.controllers}
        return [c for c in CONTROLLERS if c in on and f"-{c}" not in self.controllers]

    @model_validator(mode="after")
    def _loopback(self) -> ServerConfig:
        from nodeagent.daemonkit.auth import is_loopback
        if self.security is None and not is_loopback(self.address):
            raise ValueError(f"address: {self.address} is not a loopback address: without `security` the API is "
                             "served over plain HTTP without authentication, so only on loopback (127.0.0.1 or ::1)")
        return self

    @property
    def data_dir(self) -> Path:
        return Path(self.storage.path).parent

    @property
    def tls_dir(self) -> Path:
        """Where the CAs, the serving certificate and the token key are made on first start."""
        return self.data_dir / "tls"

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{'https' if self.security is not None else 'http'}://{host}:{self.port}"

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def parse_server_config(data: Any, source: str) -> ServerConfig:
    """Validate config data; ConfigError lists every problem with its key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"(root): expected a mapping of configuration keys, got {type(data).__name__}"])
    try:
        return ServerConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, [f"{p}: {m}" if p else m for p, m in pydantic_error_lines(exc, ServerConfig)]) \
            from None


def load_server_config(path: str | Path) -> ServerConfig:
    return parse_server_config(read_yaml_file(path), str(path))
