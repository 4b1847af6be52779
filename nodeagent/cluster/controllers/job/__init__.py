"""The Job controller's pure core (pkg/controller/job) and the TTL-after-finished decision.

backoff       the pod-failure back-off record (10 s doubling, capped at 10 min) and finish times
indexes       Indexed mode: completion indexes, their interval strings, duplicates to remove
failurepolicy podFailurePolicy rules (onExitCodes, onPodConditions; FailJob, Ignore, Count)
reconcile     one sync: claim, count with the job-tracking finalizer, create/delete, conditions
ttl           ttlSecondsAfterFinished (ttlafterfinished controller)

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
