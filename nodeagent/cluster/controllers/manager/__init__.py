"""The controller-manager's runtime: the part of the controllers that does I/O, kept thin.

    queue             the rate-limited work queue (dedup, per-key exponential back-off, token bucket)
    informer          a shared informer's cache, indexes and event handlers, fed by a list+watch
    client            the protocols for the API it writes through (the control plane supplies them)
    executor          runs a pure core's plan: creates, slow-start bursts, deletes with
                      preconditions, patches, updates, status, events
    loop              the worker loop: sync a key, forget or back off, requeue after
    replicaset, deployment, garbagecollector, job (with ttl-after-finished), cronjob, daemonset,
    nodelifecycle
                      the thin loops: handlers to keys and expectations, caches to the core's
                      inputs, its plan to the executor
    manager           the informers and controllers of one server, started once the caches listed

May import the controllers' cores and core; never the registry or anything above it (the control
plane hands it a client), nor daemonkit.
"""
