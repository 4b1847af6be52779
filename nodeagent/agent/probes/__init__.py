"""The prober: liveness, readiness and startup probes as the kubelet runs them.

Pure (table-tested with a fake clock, no I/O):
    results      a probe's outcome (success, failure, warning), the kubelet's event wording
    state        one probe of one container: schedule (initial delay, period, manual trigger),
                 result counting (success/failure thresholds), startup gating, hold after a
                 liveness/startup failure, the Unhealthy / ProbeWarning / Killing events
    readiness    container started/ready from probe results; the pod's Initialized,
                 ContainersReady and Ready conditions with lastTransitionTime
    target       where a probe goes: host (127.0.0.1 for host-process pods) and port by number or name

Executors (asyncio, nothing blocks the loop; each honours its timeout and cleans up on cancel):
    exec_probe   the command inside the container's cgroup with its env, through the spawn shim
    http_probe   httpGet, responses parsed by httptools (2xx/3xx success, redirects to other hosts not followed)
    tcp_probe    a TCP connect
    grpc_probe   grpc.health.v1.Health/Check over a minimal HTTP/2 client (h2)

Loop:
    runner       one task per probe: waits for the schedule, runs the executor, feeds the state,
                 hands every step to a sink; cancellation-safe
    poller       probe I/O (a reply, an exec's exit) looked at once per grid tick, not a wake-up each
    pod_probes   the runners of one pod, started through a task spawner the composition root gives

May import: runtime (the spawn shim, cgroup handles, container states), events, core.
"""
