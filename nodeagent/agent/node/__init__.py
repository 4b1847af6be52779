"""The node itself: capacity, allocatable, the Node object, addresses, static pod files, /proc
facts about processes, and the agent's own priorities.

May import: cgroups, config, events, core.
"""
