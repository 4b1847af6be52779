"""Containers from images run by an OCI runtime (runc by default, crun where it works): the pure
bundle builder (config.json), the runtime's choice, the overlay rootfs, the per-pod sandbox
process holding the IPC and UTS namespaces, and the runtime driver the pod worker uses.

May import: runtime (spawn, logs), images (records), cgroups, config, core.
"""
