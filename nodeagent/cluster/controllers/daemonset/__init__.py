"""The DaemonSet controller's pure core (pkg/controller/daemon): one pod per eligible node
(nodeSelector, required node affinity, taints against the template's tolerations plus the ones
every daemon pod gets), pinned by node affinity on metadata.name for the scheduler to bind; failed
pods replaced with back-off; excess pods pruned; RollingUpdate (maxUnavailable, maxSurge) and
OnDelete; ControllerRevision history; status.

    placement  NodeShouldRunDaemonPod, the daemon tolerations, pinning a pod to its node
    history    ControllerRevisions: snapshot, match, dedup, renumber, collisions, cleanup
    reconcile  one sync: claim, history, manage, rolling update, syncNodes, status

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
