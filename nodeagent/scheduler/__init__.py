"""The central scheduler: places pods on nodes by their requests, with priority, preemption, quotas.

Pure core (no I/O): cluster.py (the vectorised node table), framework.py (filter/score),
queue.py, priority.py, preemption.py, quota.py, reconcile.py, nodes.py, objects.py.
Around it: config.py, store.py and writer.py (SQLite, off the event loop), state.py (memory and
accounting), binder.py (the scheduling loop, binding, preemption, deletion through the agents),
agents.py (the HTTP client), service.py (the process), admission.py and api.py (the cluster API),
cli.py (`nodeagent scheduler run|check-config`).
"""
