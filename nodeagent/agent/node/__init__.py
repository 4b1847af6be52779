"""The node itself: capacity, allocatable, the Node object and its reporter, addresses, static pod
files, /proc facts (processes, meminfo), and the agent's own priorities.

May import: cgroups, config, events, core, daemonkit.
"""
