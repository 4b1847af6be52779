"""The workload controllers' pure cores (issue 14): one package per controller, each a decision
function from (desired, observed, now) to plain actions, plus `common/` (the vocabulary they share).

    replicaset/       pods to create/delete in bursts, the scale-down victim order, status, adoption
    deployment/       RollingUpdate and Recreate over ReplicaSets, progress, revisions, history
    daemonset/        one pod per eligible node, its RollingUpdate, ControllerRevisions, status
    job/              completions, parallelism, back-off, deadlines, Indexed mode, podFailurePolicy,
                      finalizer-based tracking; ttlafterfinished
    cronjob/          five-field schedules (robfig/cron semantics), missed starts, concurrency, history
    garbagecollector/ the ownerReference graph and cascading deletion (Background, Foreground, Orphan)
    nodelifecycle/    node health, NoSchedule/NoExecute taints, zone states and rate-limited tainting,
                      taint-based eviction
    disruption/       PodDisruptionBudget status and the pods/eviction decision

Inputs are plain values an informer cache can produce (objects as dicts shaped like the Kubernetes
JSON, `now` as epoch seconds taken from the injected clock by the caller); outputs are the actions in
`common.actions` (create, delete with preconditions, patch, update status, event, requeue after T)
that a thin loop executes. Nothing here does I/O, sleeps or reads a clock.

May import: nodeagent.core and nodeagent.cluster.scheduler (pure predicates). Nothing else.
"""
