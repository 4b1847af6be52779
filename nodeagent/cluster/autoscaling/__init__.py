"""Resources that follow the load: the pure cores of metrics, HPA, VPA and in-place resize (issue 15).

Everything here is policy over plain values (numbers, dataclasses, the API's JSON dicts); a thin loop
feeds it from informer caches and the server's sample window, and writes what it returns through
the API. Times are plain floats (seconds) passed in by the caller, who reads them from an injected
nodeagent.core.clock.Clock, so periods are tested without sleeping.

    metrics/   the server's in-memory sample window (ring buffers of the agents' 1 s samples), CPU
               rates from cumulative counters, NodeMetrics/PodMetrics objects for `kubectl top`
    hpa/       the HorizontalPodAutoscaler: spec and defaults, replica calculator, normalization
               (behavior, stabilization), conditions, one reconcile step, v1 <-> v2 conversion,
               the fast first reaction and the trace simulator that measures it
    vpa/       the VerticalPodAutoscaler: decaying histograms and checkpoints, the recommender,
               resource policy, admission (Initial) and the updater's decisions
    resize     the agent's decision on an in-place resize (KEP-1287)
    coexist    HPA and VPA on the same workload: who owns which resource

May import: nodeagent.core only (an import contract says so).
"""
