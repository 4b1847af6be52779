"""The process runtime: spawn a container process inside its cgroup (the vfork shim), supervise it
(pidfd, restart policy, crash-loop back-off; mrelease reaps a killed process's memory), its log
files, and container states (pure); oci/, containers from images through an OCI runtime.

May import: images (records, for oci/), node, cgroups, config, events, core, daemonkit (tasks,
progress); not eviction or stats beside it.
"""
