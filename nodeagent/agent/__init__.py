"""The node agent: pods as processes in real cgroups, eviction under pressure, node status.

Its packages are layered as data flows (observe -> decide -> act -> report); import-linter
keeps each importing only the ones below it:

    daemon      the composition root: a factory does the I/O, the Agent wires, owns the
                long-lived tasks and the watchdog's progress checks
    api/        report: the HTTP API and its backend adapter, /metrics, registration
    pods/       act: admission, the pod plan, pod workers, checkpoints, static pod sync, the pod
                side of eviction
    lifecycle/  act over decide: postStart/preStop hooks, termination messages, init-container
                order and the pod phase with init containers and sidecars
    probes/     act over decide: liveness/readiness/startup probes (pure state, executors, runners)
    eviction/   act over observe/decide: the eviction loop, its wake-ups and pure decisions
    runtime/    act: spawning and supervising container processes, their logs and states; oci/, the
                OCI runtime room for containers from images
    stats/      observe/report: resource metrics, one read pass over the pod cgroups per interval,
                CPU rates from counters, /metrics/resource and /stats/summary in the kubelet's shapes
    images/     act: image references, pulls (skopeo), the layer store on imagefs, image GC
    node/       observe/decide: capacity, allocatable, node status and its reporter, static pod
                files, /proc
    cgroups/    observe/act: the cgroup v1 and v2 drivers and the pure kubepods layout
    config/     the config file, its eviction thresholds and reload planning
    events      the event recorder every layer reports to

May import: core, daemonkit. Never cluster or cli.
"""
