"""The VerticalPodAutoscaler (autoscaling.k8s.io/v1), as pure steps.

histogram    exponential buckets, decaying weights, checkpoints
aggregate    a container's usage history: CPU samples, memory peaks per interval, OOM bumps
recommender  target / lowerBound / upperBound from the histograms
spec         the VPA spec typed and validated
policy       resourcePolicy on recommendations and on pods (caps, controlled values, limits)
admission    requests (and limits) set when a pod is created (Initial and the replacements)
updater      which pods to evict or resize in place (Recreate, InPlaceOrRecreate)

May import: resize and metrics (below it in autoscaling's contract), core. Not hpa beside it, nor
coexist or together above; never agent, cli or daemonkit.
"""
