"""Container probes (liveness, readiness, startup): the model, Kubernetes' defaulting and checks.

Defaulting (SetDefaults_Probe): timeoutSeconds 1, periodSeconds 10, successThreshold 1,
failureThreshold 3, each also when given as 0; initialDelaySeconds 0. Checks (validateProbe and
its liveness/readiness/startup variants): exactly one handler among exec, httpGet, tcpSocket and
grpc; no negative timings; terminationGracePeriodSeconds > 0 and never on a readiness probe;
successThreshold must be 1 for liveness and startup probes.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from nodeagent.core.errors import FieldError
from nodeagent.core.model.actions import (
    ExecAction,
    GRPCAction,
    HTTPGetAction,
    TCPSocketAction,
    handler_errors,
)
from nodeagent.core.model.base import Int32, Int64, KubeModel, zero_means
from nodeagent.core.names import invalid

ProbeKind = Literal["liveness", "readiness", "startup"]
PROBE_HANDLERS = ("exec", "http_get", "tcp_socket", "grpc")
DEFAULT_TIMEOUT_SECONDS = 1
DEFAULT_PERIOD_SECONDS = 10
DEFAULT_SUCCESS_THRESHOLD = 1
DEFAULT_FAILURE_THRESHOLD = 3
_NEGATIVE = "must be greater than or equal to 0"


class Probe(KubeModel):
    _written_when_set: ClassVar[frozenset[str]] = frozenset(
        {"initial_delay_seconds", "timeout_seconds", "period_seconds", "success_threshold", "failure_threshold"}
    )

    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    grpc: GRPCAction | None = None
    initial_delay_seconds: Int32 = 0
    timeout_seconds: Annotated[Int32, zero_means(DEFAULT_TIMEOUT_SECONDS)] = DEFAULT_TIMEOUT_SECONDS
    period_seconds: Annotated[Int32, zero_means(DEFAULT_PERIOD_SECONDS)] = DEFAULT_PERIOD_SECONDS
    success_threshold: Annotated[Int32, zero_means(DEFAULT_SUCCESS_THRESHOLD)] = DEFAULT_SUCCESS_THRESHOLD
    failure_threshold: Annotated[Int32, zero_means(DEFAULT_FAILURE_THRESHOLD)] = DEFAULT_FAILURE_THRESHOLD
    termination_grace_period_seconds: Int64 | None = None

    @property
    def handler(self) -> ExecAction | HTTPGetAction | TCPSocketAction | GRPCAction:
        """The one action (validation guarantees exactly one)."""
        for name in PROBE_HANDLERS:
            action = getattr(self, name)
            if action is not None:
                return action  # type: ignore[no-any-return]
        raise ValueError("probe has no handler")


def probe_errors(path: str, probe: Probe, kind: ProbeKind) -> list[FieldError]:
    """Kubernetes' validateProbe plus validateLivenessProbe / validateReadinessProbe / validateStartupProbe."""
    errs = handler_errors(path, probe, PROBE_HANDLERS, None)
    for name in ("initial_delay_seconds", "timeout_seconds", "period_seconds", "success_threshold",
                 "failure_threshold"):
        value = getattr(probe, name)
        if value < 0:
            alias = Probe.model_fields[name].alias
            errs.append(FieldError(f"{path}.{alias}", invalid(value, _NEGATIVE)))
    grace = probe.termination_grace_period_seconds
    if grace is not None:
        if kind == "readiness":
            errs.append(FieldError(f"{path}.terminationGracePeriodSeconds",
                                   invalid(grace, "must not be set for readinessProbes")))
        elif grace <= 0:
            errs.append(FieldError(f"{path}.terminationGracePeriodSeconds", invalid(grace, "must be greater than 0")))
    if kind in ("liveness", "startup") and probe.success_threshold != 1:
        errs.append(FieldError(f"{path}.successThreshold", invalid(probe.success_threshold, "must be 1")))
    return errs
