"""stats: the agent's resource metrics, sampled as the kubelet's Summary API and /metrics/resource
report them (CPU usage and its rate, memory working set, ephemeral storage per container, pod and
node).

    targets      what the sampler must know of each pod (cgroup paths, log dirs, start times)
    window       a counter's sample window and its rate, with resets and gaps (pure)
    values       one pass as plain values (the Summary API's shape)
    files        cgroupfs files kept open and re-read with pread
    reader       the I/O of a pass: one cgroup, the machine, a filesystem, a directory
    sampler      the pass and its long-lived task; the latest Snapshot
    prometheus   /metrics/resource text (pure)
    summary      /stats/summary JSON (pure)

Its settings (interval, CPU rate window, storage interval) are config/stats.py's StatsSettings.
May import: cgroups, node, config, core (nothing else of the agent). The API serves it (api/stats.py);
the daemon starts the sampler and feeds it the pods' targets.
"""
