"""Metrics the server keeps from the agents' samples, and the metrics.k8s.io objects built from them.

    rate      CPU usage rate from two cumulative counter samples (resets, gaps, out-of-order)
    window    per-series ring buffers (numpy) of the last N samples; usage over a window
    objects   NodeMetrics / PodMetrics (metrics.k8s.io/v1beta1) as `kubectl top` reads them
    scrape    the agents' /metrics/resource parsed into the window; the last good point per series;
              the scrape loop over an injected node lister and fetch (aiohttp's AgentFetcher)

May import: core only, and aiohttp in scrape's fetcher (the bottom of autoscaling's contract,
independent of resize beside it).
"""
