"""The process runtime: spawn a container process inside its cgroup (the vfork shim), supervise it
(pidfd, restart policy, crash-loop back-off), its log files, and container states (pure).

May import: node, cgroups, config, events, core, daemonkit (tasks, progress).
"""
