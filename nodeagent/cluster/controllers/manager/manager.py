"""The controller-manager inside the server process (kube-controller-manager's shape).

It owns one shared informer per kind any enabled controller needs, and the controllers built on
them. The control plane feeds each informer from a list+watch of its resource and starts `run`
only once every informer has listed (WaitForCacheSync), so a controller never acts on a partial
cache: after a restart, the caches are rebuilt from the store first and the first syncs see every
pod already there (no duplicates).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

import structlog

from nodeagent.cluster.autoscaling.metrics.external import ExternalSource
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.cluster.controllers.manager.client import Client, Recorder
from nodeagent.cluster.controllers.manager.cronjob import CronJobController
from nodeagent.cluster.controllers.manager.daemonset import DaemonSetController
from nodeagent.cluster.controllers.manager.deployment import DeploymentController
from nodeagent.cluster.controllers.manager.disruption import DisruptionController
from nodeagent.cluster.controllers.manager.garbagecollector import GarbageCollector
from nodeagent.cluster.controllers.manager.horizontal import (
    HorizontalController,
    HorizontalSettings,
    PodIndex,
    Scales,
)
from nodeagent.cluster.controllers.manager.informer import Informer
from nodeagent.cluster.controllers.manager.job import JobController, TTLAfterFinishedController
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.cluster.controllers.manager.nodelifecycle import NodeLifecycleController, NodeLifecycleSettings
from nodeagent.cluster.controllers.manager.replicaset import ReplicaSetController
from nodeagent.cluster.controllers.manager.serviceaccount import RootCACertPublisher, ServiceAccountsController
from nodeagent.cluster.controllers.manager.vertical import PodActions, VerticalSettings, VPARecommender, VPAUpdater
from nodeagent.core.clock import Clock

log = structlog.get_logger(__name__)

CONTROLLERS = ("replicaset", "deployment", "garbagecollector", "job", "cronjob", "ttl-after-finished",
               "daemonset", "nodelifecycle", "disruption", "horizontalpodautoscaling", "vpa-recommender",
               "vpa-updater", "serviceaccount", "root-ca-cert-publisher")
# what the garbage collector's graph spans: the kinds that own or are owned in this slice
GC_KINDS = (
    ("v1", "Pod"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "ControllerRevision"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
)
COMPONENTS = {
    "replicaset": "replicaset-controller",
    "deployment": "deployment-controller",
    "garbagecollector": "garbage-collector-controller",
    "job": "job-controller",
    "cronjob": "cronjob-controller",
    "ttl-after-finished": "ttl-after-finished-controller",
    "daemonset": "daemonset-controller",
    "nodelifecycle": "node-controller",
    "disruption": "disruption-controller",
    "horizontalpodautoscaling": "horizontal-pod-autoscaler",
    "vpa-recommender": "vpa-recommender",
    "vpa-updater": "vpa-updater",
    "serviceaccount": "service-account-controller",
    "root-ca-cert-publisher": "root-ca-cert-publisher",
}


class ControllerManager:
    def __init__(self, client: Client, clock: Clock, *, enabled: Collection[str] = CONTROLLERS,
                 recorder: Callable[[str], Recorder | None] = lambda _component: None,
                 node_lifecycle: NodeLifecycleSettings | None = None,
                 scales: Scales | None = None, metrics: SampleWindow | None = None,
                 hpa: HorizontalSettings | None = None, external_metrics: ExternalSource | None = None,
                 pod_actions: PodActions | None = None, vpa: VerticalSettings | None = None,
                 root_ca: str | None = None) -> None:
        """`scales`: the scale subresource the HPA and the VPA read (the client's when it has one);
        `metrics`: the server's sample window the HPA and the VPA recommender read pods' usage from
        (None: no metrics); `external_metrics`: where the HPA's External metrics come from (None: not
        served); `pod_actions`: pods/eviction and pods/resize for the VPA updater (the client's when
        it has them); `root_ca`: the PEM bundle verifying the server's serving certificate, published in
        every namespace (None: the server has no TLS, so root-ca-cert-publisher has nothing to publish
        and does not run)."""
        unknown = sorted(set(enabled) - set(CONTROLLERS))
        if unknown:
            raise ValueError(f"unknown controllers: {', '.join(unknown)}")
        self.client, self.clock = client, clock
        self.informers: dict[tuple[str, str], Informer] = {}
        self.controllers: list[Controller] = []
        if "replicaset" in enabled:
            self.replicaset = ReplicaSetController(clock, client, recorder(COMPONENTS["replicaset"]),
                                                   replicasets=self.informer("apps/v1", "ReplicaSet"),
                                                   pods=self.informer("v1", "Pod"))
            self.controllers.append(self.replicaset)
        if "deployment" in enabled:
            self.deployment = DeploymentController(clock, client, recorder(COMPONENTS["deployment"]),
                                                   deployments=self.informer("apps/v1", "Deployment"),
                                                   replicasets=self.informer("apps/v1", "ReplicaSet"),
                                                   pods=self.informer("v1", "Pod"))
            self.controllers.append(self.deployment)
        if "daemonset" in enabled:
            self.daemonset = DaemonSetController(clock, client, recorder(COMPONENTS["daemonset"]),
                                                 daemonsets=self.informer("apps/v1", "DaemonSet"),
                                                 pods=self.informer("v1", "Pod"), nodes=self.informer("v1", "Node"),
                                                 revisions=self.informer("apps/v1", "ControllerRevision"))
            self.controllers.append(self.daemonset)
        if "nodelifecycle" in enabled:
            self.nodelifecycle = NodeLifecycleController(clock, client, recorder(COMPONENTS["nodelifecycle"]),
                                                         nodes=self.informer("v1", "Node"),
                                                         leases=self.informer("coordination.k8s.io/v1", "Lease"),
                                                         pods=self.informer("v1", "Pod"), settings=node_lifecycle)
            self.controllers.append(self.nodelifecycle)
        if "garbagecollector" in enabled:
            self.gc = GarbageCollector(clock, client, recorder(COMPONENTS["garbagecollector"]),
                                       [self.informer(av, k) for av, k in GC_KINDS])
            self.controllers.append(self.gc)
        if "job" in enabled:
            self.job = JobController(clock, client, recorder(COMPONENTS["job"]),
                                     jobs=self.informer("batch/v1", "Job"), pods=self.informer("v1", "Pod"))
            self.controllers.append(self.job)
        if "cronjob" in enabled:
            self.cronjob = CronJobController(clock, client, recorder(COMPONENTS["cronjob"]),
                                             cronjobs=self.informer("batch/v1", "CronJob"),
                                             jobs=self.informer("batch/v1", "Job"))
            self.controllers.append(self.cronjob)
        if "ttl-after-finished" in enabled:
            self.ttl = TTLAfterFinishedController(clock, client, recorder(COMPONENTS["ttl-after-finished"]),
                                                  jobs=self.informer("batch/v1", "Job"))
            self.controllers.append(self.ttl)
        if "disruption" in enabled:
            self.disruption = DisruptionController(clock, client, recorder(COMPONENTS["disruption"]),
                                                   pdbs=self.informer("policy/v1", "PodDisruptionBudget"),
                                                   pods=self.informer("v1", "Pod"),
                                                   replicasets=self.informer("apps/v1", "ReplicaSet"),
                                                   deployments=self.informer("apps/v1", "Deployment"),
                                                   statefulsets=self.informer("apps/v1", "StatefulSet"))
            self.controllers.append(self.disruption)
        if "horizontalpodautoscaling" in enabled:
            scales = scales if scales is not None else (client if isinstance(client, Scales) else None)
            if scales is None:
                raise ValueError("horizontalpodautoscaling needs a client with the scale subresource")
            self.horizontal = HorizontalController(
                clock, client, recorder(COMPONENTS["horizontalpodautoscaling"]),
                hpas=self.informer("autoscaling/v2", "HorizontalPodAutoscaler"), pods=self.informer("v1", "Pod"),
                scales=scales, window=metrics, settings=hpa, external=external_metrics)
            self.controllers.append(self.horizontal)
        if "vpa-recommender" in enabled or "vpa-updater" in enabled:
            self._vertical(client, clock, enabled, recorder, scales, metrics, pod_actions, vpa)
        if "serviceaccount" in enabled:
            self.serviceaccount = ServiceAccountsController(
                clock, client, namespaces=self.informer("v1", "Namespace"),
                serviceaccounts=self.informer("v1", "ServiceAccount"))
            self.controllers.append(self.serviceaccount)
        if "root-ca-cert-publisher" in enabled:
            if root_ca is None:
                log.info("root_ca_cert_publisher_off", reason="the server serves no TLS: no CA to publish")
            else:
                self.root_ca_publisher = RootCACertPublisher(
                    clock, client, namespaces=self.informer("v1", "Namespace"),
                    configmaps=self.informer("v1", "ConfigMap"), root_ca=root_ca)
                self.controllers.append(self.root_ca_publisher)

    def _vertical(self, client: Client, clock: Clock, enabled: Collection[str],
                  recorder: Callable[[str], Recorder | None], scales: Scales | None, metrics: SampleWindow | None,
                  pod_actions: PodActions | None, vpa: VerticalSettings | None) -> None:
        """The VPA recommender and updater, sharing the VPA informer and the HPA's pod index."""
        scales = scales if scales is not None else (client if isinstance(client, Scales) else None)
        if scales is None:
            raise ValueError("the VPA needs a client with the scale subresource")
        vpas = self.informer("autoscaling.k8s.io/v1", "VerticalPodAutoscaler")
        index = self.horizontal.index if hasattr(self, "horizontal") else PodIndex(self.informer("v1", "Pod"))
        hpas = self.informer("autoscaling/v2", "HorizontalPodAutoscaler")  # what they own, the VPA leaves (coexist)
        if "vpa-recommender" in enabled:
            self.vpa_recommender = VPARecommender(
                clock, client, recorder(COMPONENTS["vpa-recommender"]), vpas=vpas,
                checkpoints=self.informer("autoscaling.k8s.io/v1", "VerticalPodAutoscalerCheckpoint"),
                pods=self.informer("v1", "Pod"), scales=scales, window=metrics, settings=vpa, index=index, hpas=hpas)
            self.controllers.append(self.vpa_recommender)
        if "vpa-updater" in enabled:
            actions = pod_actions if pod_actions is not None else (client if isinstance(client, PodActions) else None)
            if actions is None:
                raise ValueError("vpa-updater needs a client with pods/eviction and pods/resize")
            self.vpa_updater = VPAUpdater(
                clock, client, recorder(COMPONENTS["vpa-updater"]), vpas=vpas, pods=self.informer("v1", "Pod"),
                replicasets=self.informer("apps/v1", "ReplicaSet"),
                pdbs=self.informer("policy/v1", "PodDisruptionBudget"), scales=scales, actions=actions,
                settings=vpa, index=index, hpas=hpas)
            self.controllers.append(self.vpa_updater)

    def informer(self, api_version: str, kind: str) -> Informer:
        """The shared informer of a kind (made on first ask)."""
        inf = self.informers.get((api_version, kind))
        if inf is None:
            inf = self.informers[(api_version, kind)] = Informer(api_version, kind)
        return inf

    async def run(self) -> None:
        """Every controller's workers; call once the informers have listed."""
        log.info("controller_manager_started", controllers=",".join(c.name for c in self.controllers),
                 informers=",".join(k for _, k in self.informers))
        try:
            await asyncio.gather(*(c.run() for c in self.controllers))
        finally:
            for c in self.controllers:
                c.queue.shutdown()
