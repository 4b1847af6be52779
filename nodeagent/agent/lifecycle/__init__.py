"""A container's life around its process: hooks, termination messages, init-container order.

    hooks                 postStart and preStop runners (exec, httpGet, sleep; preStop within the
                          grace period) and the kubelet's events for their failures
    termination_message   a terminated container's message: its terminationMessagePath file, or
                          with FallbackToLogsOnError the tail of its log
    init_sequence         which container to start next given the statuses (pure): init containers
                          in order, sidecars started in order and kept running, then the app containers
    phase                 the pod phase with init containers and sidecars, as the kubelet's getPhase (pure)

May import: probes (its executors run the hooks' exec and httpGet), runtime, events, core.
"""
