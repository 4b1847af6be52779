"""The control plane (`nodeagent server run`): the Kubernetes API, the scheduler and its loops.

    controlplane the composition root of `nodeagent server run` (the Kubernetes API)
    serverconfig its config file
    server       the scheduler's composition root (`nodeagent scheduler run`): store, nodes, loops
    apiserver/   the Kubernetes API over aiohttp (kubeapi, resources, discovery...), and the
                 scheduler's routes (app) and what they do to objects (operations)
    registry/    the resource catalog, the generic registry store and each kind's strategy
    storage/     the etcd-shaped Store protocol and its backends (memory, SQLite)
    schema/      the Kubernetes OpenAPI definitions, field validation, OpenAPI v3 documents
    patch/       JSON, merge and strategic merge patches, server-side apply, managedFields
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
