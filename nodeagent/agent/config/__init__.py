"""The agent's configuration: the YAML file (KubeletConfiguration names), eviction thresholds,
and what a reload changes.

settings (the immutable Config, defaults.yaml embedded), thresholds (evictionHard/Soft/...
parsed, kubelet defaults), reload (what changed, what needs a restart).

May import: core, daemonkit.
"""
