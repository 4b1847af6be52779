"""What every controller shares: object accessors, label selectors, IntOrString scaling, pod
predicates, conditions, ownerReference claiming, expectations, template hashing, taints and node
affinity, back-off, and the action types the loops execute. Pure; no I/O.

May import: core and the scheduler's pure predicates (cluster/scheduler). No controller (they
are above it), never admission, auth or daemonkit.
"""
