"""The pod plan: what every layer below admission needs about one pod, derived once.

Admission parses a manifest into a Pod and `plan_pod` turns it into a PodPlan: the QoS class,
criticality, the summed requests and limits, the pod's and each container's cgroup path and
values, each container's oom_score_adj and launch spec, and the pod's directory under stateDir
(its logs). The pod worker, the process runtime, the cgroup driver, checkpoint restore and the
eviction side read these values and never derive them from the manifest again, so each fact has
one definition and one moment it is computed.

Init containers are planned like app containers (`init_containers`, in order), each with the
restart policy its supervisor runs with (lifecycle/init_sequence.py: a sidecar Always, a regular
one OnFailure, or Never under a Never pod). A container's environment is resolved here, once
(core/downward.py: valueFrom fieldRef / resourceFieldRef, envFrom against the sources this node
has: none yet, so only an optional source may be missing), from the node facts the caller gives
(node name, host IPs, allocatable); one that cannot be resolved keeps the error as
`config_error` (the kubelet's CreateContainerConfigError) and is never started. Each container
plan keeps the container's spec for what the worker runs around its process: probes, lifecycle
hooks, the termination message file and policy.

A container that runs from its image (host_process.runs_image) keeps its resolved variables
(`env`) for its OCI bundle, which adds the image's; its launch spec is never run.

Pure, except that a launch spec resolves HOME from the password database (LaunchSpec.from_container,
as runc does) and `clamp_oom_score_adj` is the caller's: the agent's is the spawn module's,
which knows whether this process may lower an oom_score_adj.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.lifecycle.init_sequence import supervisor_restart_policy
from nodeagent.agent.pods.host_process import runs_image
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.attach import fifo_path
from nodeagent.agent.runtime.spawn import LaunchSpec, container_env
from nodeagent.agent.runtime.supervisor import ContainerConfig
from nodeagent.core.downward import EnvResolutionError, EnvSources, NodeFacts, resolve_env
from nodeagent.core.expansion import expand
from nodeagent.core.model import Pod
from nodeagent.core.model.pod import Container
from nodeagent.core.qos import QOSClass, is_critical, is_node_critical, is_static, oom_score_adj, qos_class
from nodeagent.core.quantity import Quantity
from nodeagent.core.resources import PodResources, pod_resources


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    cgroup_path: str
    cgroup_spec: CgroupSpec
    config: ContainerConfig  # what the runtime runs: launch spec, oom_score_adj, log dir, restart policy
    spec: Container  # probes, lifecycle hooks, terminationMessagePath/Policy, as the manifest gives them
    init: bool = False  # an init container: runs (a sidecar: starts) before the app containers
    config_error: str | None = None  # its environment cannot be made (CreateContainerConfigError): never started
    from_image: bool = False  # run from its image by the OCI runtime (host_process.runs_image), not as a host process
    env: tuple[tuple[str, str], ...] = ()  # its own variables, resolved (an image container's bundle adds the image's)

    @property
    def sidecar(self) -> bool:
        """A restartable init container (restartPolicy: Always), kept running beside the app containers."""
        return self.init and self.spec.is_sidecar


@dataclass(frozen=True)
class PodPlan:
    pod: Pod
    qos: QOSClass
    critical: bool  # never evicted, admitted under any pressure (static, mirror, system priority)
    static: bool  # from a file on this node (phase rules differ)
    resources: PodResources
    cgroup_path: str
    cgroup_spec: CgroupSpec
    log_dir: str  # <stateDir>/pods/<namespace>_<name>_<uid>: what the pod keeps on disk
    containers: tuple[ContainerPlan, ...]  # the app containers (spec.containers)
    init_containers: tuple[ContainerPlan, ...] = ()  # spec.initContainers, in order
    host_ips: tuple[str, ...] = ()  # status.hostIPs: the node's addresses when the plan was made
    pod_ips: tuple[str, ...] = ()  # status.podIPs: host processes share the node's network, so the same

    @property
    def key(self) -> tuple[str, str]:
        return self.pod.metadata.namespace, self.pod.metadata.name

    @property
    def uid(self) -> str:
        return self.pod.metadata.uid

    @property
    def requests(self) -> Mapping[str, Quantity]:
        return self.resources.requests

    @property
    def cpu_request_milli(self) -> int:
        return self.resources.cpu_request_milli

    @property
    def all_containers(self) -> tuple[ContainerPlan, ...]:
        """Init containers first, then the app containers (names are unique across both)."""
        return self.init_containers + self.containers

    def container(self, name: str) -> ContainerPlan | None:
        """An app container's plan."""
        return next((c for c in self.containers if c.name == name), None)

    def any_container(self, name: str) -> ContainerPlan | None:
        """An init or app container's plan."""
        return next((c for c in self.all_containers if c.name == name), None)


def _unclamped(adj: int) -> int:
    return adj


def launch_spec(c: Container, pod: Pod, resolved: tuple[tuple[str, str], ...] | None) -> LaunchSpec:
    """What the runtime runs: with `resolved` (core.downward.resolve_env: valueFrom and envFrom
    resolved, literal values expanded once) the environment is taken as it is, plus the runtime's
    defaults (PATH, HOME), and command and args are expanded against it; without it (the
    container cannot be configured and never starts) from the literal values alone."""
    security = pod.spec.security_context
    if runs_image(pod, c) and not c.command:  # never run as a host process: the OCI bundle is (image_container.py)
        return LaunchSpec((f"<entrypoint of {c.image}>", *c.args), dict(resolved or ()), c.working_dir or "/")
    if resolved is None:
        return LaunchSpec.from_container(c, security)
    uid = security.run_as_user if security is not None else None
    gid = security.run_as_group if security is not None else None
    env = dict(resolved)
    for name, value in container_env((), uid).items():
        env.setdefault(name, value)
    argv = tuple(expand(a, env) for a in [*c.command, *c.args])
    return LaunchSpec(argv, env, c.working_dir or "/", uid, gid)


def plan_pod(pod: Pod, *, state_dir: str, memory_capacity: int,
             clamp_oom_score_adj: Callable[[int], int] = _unclamped,
             node: NodeFacts | None = None, sources: EnvSources | None = None) -> PodPlan:
    """Everything below admission needs about `pod`; FieldError or ValueError when a value
    cannot be made (a name that cannot be a path, a container without a command). `node`: what
    the downward API reads of the node (name, host IPs, allocatable); `sources`: the ConfigMaps
    and Secrets envFrom / valueFrom may name (none: this node has no source of them yet)."""
    meta = pod.metadata
    qos = qos_class(pod)
    node_critical = is_node_critical(pod)
    resources = pod_resources(pod)
    cgroup_path = layout.pod_path(qos, meta.uid)
    log_dir = logs.pod_log_dir(state_dir, meta.namespace, meta.name, meta.uid)
    facts = node or NodeFacts()

    def adj_of(c: Container) -> int:
        memory = c.resources.requests.get("memory")
        return oom_score_adj(qos, node_critical, memory.value() if memory is not None else 0, memory_capacity)

    app_min_adj = min(adj_of(c) for c in pod.spec.containers)

    def plan_container(c: Container, *, init: bool) -> ContainerPlan:
        adj = adj_of(c)
        if init and c.is_sidecar:  # GetContainerOOMScoreAdjust: a sidecar is killed no earlier than its app
            adj = min(adj, app_min_adj)
        error: str | None = None
        try:
            resolved: tuple[tuple[str, str], ...] | None = resolve_env(pod, c, facts, sources).env
        except EnvResolutionError as e:
            resolved, error = None, str(e)
        launch = launch_spec(c, pod, resolved)
        container_dir = logs.container_dir(log_dir, c.name)
        if c.stdin:  # `kubectl attach -i` writes to it (runtime/attach.py); runc copies it to an image container's
            launch = replace(launch, stdin=fifo_path(container_dir), stdin_once=c.stdin_once)
        if c.tty:  # each run gets a terminal (runtime/stdio_holder.py)
            launch = replace(launch, tty=True)
        config = ContainerConfig(
            name=c.name,
            launch=launch,
            log_dir=container_dir,
            restart_policy=supervisor_restart_policy(pod.spec.restart_policy, c, init=init),
            oom_score_adj=clamp_oom_score_adj(adj),
            pod_name=meta.name,
            pod_namespace=meta.namespace,
            pod_uid=meta.uid,
            image=c.image or "",
        )
        return ContainerPlan(c.name, layout.container_path(qos, meta.uid, c.name), layout.container_cgroup_spec(c),
                             config, c, init=init, config_error=error, from_image=runs_image(pod, c),
                             env=resolved or ())

    return PodPlan(pod=pod, qos=qos, critical=is_critical(pod), static=is_static(pod), resources=resources,
                   cgroup_path=cgroup_path, cgroup_spec=layout.pod_cgroup_spec(qos, resources), log_dir=log_dir,
                   containers=tuple(plan_container(c, init=False) for c in pod.spec.containers),
                   init_containers=tuple(plan_container(c, init=True) for c in pod.spec.init_containers),
                   host_ips=facts.host_ips, pod_ips=facts.pod_ips)
