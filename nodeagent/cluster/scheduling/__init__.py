"""The scheduler inside `nodeagent server run`: the scheduling core (cluster/scheduler) over the
registry, fed by watch-backed caches, binding through `pods/binding`.

    cache       Nodes and Pods from the watches, folded into the NodeTable (assumed pods, nominations)
    scheduler   the loop: queue, framework, preemption; bindings, status and events through the registry

May import: events, registry, scheduler, core, daemonkit.
"""
