"""The control plane (`nodeagent server run`): the cluster API, the scheduler and its loops.

    server       the composition root: loads the store, learns the nodes, runs the loops, serves
    apiserver/   the cluster API over aiohttp (routes) and what it does to objects (operations)
    binder       the scheduling loop: bind, preempt and delete through the agents
    state        every object in memory, the node table, quota usage, and their writes to the store
    agents/      talking to the node agents (HTTP client) and reconciling what they run
    objects      the API objects kept (pods with binding and status, namespaces, quotas)
    store/       the store on disk (SQLite, written from a child process)
    config       the server's config file
    scheduler/   the pure scheduling core: node table, filter/score, queue, preemption, node state
    admission/   PriorityClass and ResourceQuota rules (pure)

May import: core, daemonkit. Never agent or cli (an inner contract keeps the order above).
"""
