"""The built-in kinds: one strategy each (defaulting, validation, columns, field attributes).

To add a kind: a module here with its Strategy subclass (its ResourceInfo is the catalog entry)
and one line in BUILTIN.

May import: the registry's own modules (strategy, catalog, options, table, authorization),
admission (its parsers), auth (attributes), core; as part of the registry, nothing above it in the
control plane's contract (never HTTP, the loops or the server).
"""

from __future__ import annotations

from nodeagent.cluster.registry.kinds.apps import (
    ControllerRevisionStrategy,
    DaemonSetStrategy,
    DeploymentStrategy,
    ReplicaSetStrategy,
    StatefulSetStrategy,
)
from nodeagent.cluster.registry.kinds.autoscaling import (
    HorizontalPodAutoscalerStrategy,
    HorizontalPodAutoscalerV1Strategy,
)
from nodeagent.cluster.registry.kinds.batch import CronJobStrategy, JobStrategy
from nodeagent.cluster.registry.kinds.configuration import ConfigMapStrategy, SecretStrategy, ServiceAccountStrategy
from nodeagent.cluster.registry.kinds.disruption import PodDisruptionBudgetStrategy
from nodeagent.cluster.registry.kinds.events import EventStrategy, EventV1Strategy
from nodeagent.cluster.registry.kinds.namespaces import NamespaceStrategy
from nodeagent.cluster.registry.kinds.nodes import NodeStrategy
from nodeagent.cluster.registry.kinds.pods import PodStrategy
from nodeagent.cluster.registry.kinds.policy import LeaseStrategy, LimitRangeStrategy
from nodeagent.cluster.registry.kinds.rbac import (
    ClusterRoleBindingStrategy,
    ClusterRoleStrategy,
    RoleBindingStrategy,
    RoleStrategy,
)
from nodeagent.cluster.registry.kinds.reviews import SelfSubjectAccessReviewStrategy, SubjectAccessReviewStrategy
from nodeagent.cluster.registry.kinds.scheduling import PriorityClassStrategy, ResourceQuotaStrategy
from nodeagent.cluster.registry.kinds.vpa import VerticalPodAutoscalerCheckpointStrategy, VerticalPodAutoscalerStrategy
from nodeagent.cluster.registry.strategy import Strategy

BUILTIN: tuple[type[Strategy], ...] = (
    PodStrategy, NodeStrategy, NamespaceStrategy, ResourceQuotaStrategy, EventStrategy, LimitRangeStrategy,
    ConfigMapStrategy, SecretStrategy, ServiceAccountStrategy,
    PriorityClassStrategy, EventV1Strategy, LeaseStrategy,
    RoleStrategy, ClusterRoleStrategy, RoleBindingStrategy, ClusterRoleBindingStrategy,
    DeploymentStrategy, ReplicaSetStrategy, DaemonSetStrategy, StatefulSetStrategy, ControllerRevisionStrategy,
    JobStrategy, CronJobStrategy, PodDisruptionBudgetStrategy,
    HorizontalPodAutoscalerStrategy, HorizontalPodAutoscalerV1Strategy,  # v2 first: the preferred version
    VerticalPodAutoscalerStrategy, VerticalPodAutoscalerCheckpointStrategy,
)
REVIEWS: tuple[type[Strategy], ...] = (SelfSubjectAccessReviewStrategy, SubjectAccessReviewStrategy)
