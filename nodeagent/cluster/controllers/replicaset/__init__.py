"""The ReplicaSet controller's pure core (pkg/controller/replicaset): claim pods by selector, create
or delete the difference in bursts (BurstReplicas 500, slow-start batches), pick scale-down victims
in ActivePodsWithRanks order, and compute the status.

    victims    the scale-down order and co-location ranks
    reconcile  manage (adopt/release, creates, deletes, expectations), the pod from the template,
               the status and when to look again

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
