"""The garbage collector's pure core (pkg/controller/garbagecollector): the dependency graph from
ownerReferences and, for each object, what attemptToDeleteItem / processDeletingDependentsItem /
attemptToOrphan decide.

    graph      uid -> node with owners, dependents, deletion state; owner resolution with the
               cross-namespace rules
    decide     one pass over the graph: orphan, foreground and background cascades

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
