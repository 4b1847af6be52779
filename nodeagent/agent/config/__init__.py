"""The agent's configuration: the YAML file (KubeletConfiguration names), eviction thresholds,
and what a reload changes.

settings (the immutable Config, defaults.yaml embedded), thresholds (evictionHard/Soft/...
parsed, kubelet defaults), stats (the resource-metrics sampler's intervals and window),
reload (what changed, what needs a restart).

May import: core, daemonkit.
"""
