"""Pods on this node: the PodManager (admission, re-adoption, checkpoints), one PodWorker per pod,
and the pod side of eviction.

May import: eviction, runtime, node, cgroups, config, events, core.
"""
