"""The HorizontalPodAutoscaler (autoscaling/v2, and v1 for `kubectl autoscale`), as pure steps.

spec        the v2 spec typed, with the API server's defaults and validation
pods        what the calculator reads of a pod; upstream's pod grouping and requests
replicas    the replica calculator (replica_calculator.go)
normalize   stabilization windows, behavior policies, min/max (horizontal.go)
conditions  AbleToScale / ScalingActive / ScalingLimited
controller  one sync of one HPA: reconcile(hpa, scale, pods, metrics, history, now)
convert     autoscaling/v1 <-> v2 (the round-trip annotations)
fast        beyond upstream: a first reaction within 5 s of a load step, without flapping
simulate    load traces through upstream's settings and the fast ones (tests, bench)

May import: metrics and resize (below it in autoscaling's contract), core. Not vpa beside it, nor
coexist or together above; never agent, cli or daemonkit.
"""
