"""Node lifecycle (pkg/controller/nodelifecycle, pkg/controller/tainteviction; the
DefaultTolerationSeconds admission plugin that gives pods their tolerationSeconds is
cluster/admission/tolerations.py).

    health      probe times from status heartbeats and Lease renewals; Ready=Unknown after the
                grace period with upstream's reasons and messages; NoSchedule condition taints
    zones       zone states (Normal, PartialDisruption, FullDisruption) and their eviction rates
    tainting    the rate-limited NoExecute tainting queue per zone (token bucket, burst 1)
    eviction    taint-based eviction after tolerationSeconds
    monitor     one monitor pass's per-node decisions as actions: NoExecute taints queued or
                swapped, taken off a Ready node, NoSchedule condition taints, pods marked NotReady

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
