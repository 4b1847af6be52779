"""Eviction, as the kubelet's eviction package: a manager loop, pure helpers, small interfaces for
what observes the node.

    wakeups       arms the kernel notifications at the threshold lines (memcg eventfd, memory.high)
                  and builds the adaptive poll for what got armed
    manager       the loop: observe, evaluate, rank, evict as many pods as the shortfall needs;
                  its progress (a pass within its bound) is what the watchdog asks
    signals       the observers (meminfo, kubepods cgroup, statvfs, pids); notify/ the wake-ups
    ranking       which pods go first (pure)
    evaluate      thresholds met, grace periods, conditions (pure)
    observations  the plain values the rest works on

May import: config, node, cgroups, events, core, daemonkit (an inner contract keeps the order above).
"""
