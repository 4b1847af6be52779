"""The central scheduler's pure core: node table, queue, filter/score, preemption, quota, priority.

The API, the store and the agents' side are built around it later; nothing here does I/O.
"""
