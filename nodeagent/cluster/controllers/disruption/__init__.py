"""PodDisruptionBudgets (pkg/controller/disruption) and the pods/eviction decision
(pkg/registry/core/pod/storage/eviction.go).

    status    expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed, disruptedPods,
              the DisruptionAllowed condition, failSafe
    eviction  allowed, or upstream's 429/403/500 with its message and cause; the PDB update

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
