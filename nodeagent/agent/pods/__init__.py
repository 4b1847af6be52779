"""Pods on this node: the PodManager (admission, re-adoption, checkpoints), the pod plan
(everything below admission needs, derived once), one PodWorker per pod, the static pod sync,
and the pod side of eviction.

May import: lifecycle, probes, eviction, runtime, stats, images, node, cgroups, config, events (the
rooms below it), core, daemonkit.
"""
