"""The pure scheduling core: the vectorised node table, filter and score (kube-scheduler's default
plugins), the priority queue with back-off, preemption, and what the scheduler knows of each node.

May import: core.
"""
