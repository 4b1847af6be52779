"""The Deployment controller's pure core (pkg/controller/deployment): ReplicaSets per pod template,
RollingUpdate (maxSurge/maxUnavailable, ResolveFenceposts, NewRSNewReplicas, unhealthy old pods
first) and Recreate, proportional scaling while paused or mid-rollout, progress conditions with
progressDeadlineSeconds, revisions and revisionHistoryLimit cleanup.

    util       the deployment_util.go functions: fenceposts, revisions, annotations, proportions,
               conditions, defaults
    reconcile  one sync: claim ReplicaSets, find or create the new one, scale, status

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
