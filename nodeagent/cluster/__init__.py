"""The control plane (`nodeagent server run`): the Kubernetes API, the scheduler and its loops.

In the order of the inner contract (pyproject.toml), top to bottom; rooms on one line of it are
independent of each other:

    server        the scheduler's composition root (`nodeagent scheduler run`): store, nodes, loops
    controlplane  the composition root of `nodeagent server run` (the Kubernetes API)
    apiserver/    the Kubernetes API over aiohttp (kubeapi, resources, discovery...), and the
                  scheduler's routes (app) and what they do to objects (operations)
    binder        the scheduling loop: bind, preempt and delete through the agents
    state         every object in memory, the node table, quota usage, and their writes to the store
    agents/       talking to the node agents (HTTP client) and reconciling what they run
    scheduling/   the scheduler inside `nodeagent server run`: watch-backed caches, the loop,
                  bindings through pods/binding
    events/       core/v1 Events of the control plane's own parts (correlator, async recorder)
    admitters/    the API's admission plugins, in Kubernetes' order, over the registry
    objects       the API objects kept (pods with binding and status, namespaces, quotas)
    store/        the store on disk (SQLite, written from a child process)
    config        the scheduler's config file (`nodeagent scheduler run`)
    serverconfig  the control plane's config file (`nodeagent server run`)
    registry/     the resource catalog, the generic registry store and each kind's strategy
    controllers/  the workload controllers' pure cores (ReplicaSet, Deployment, DaemonSet, Job,
                  CronJob, garbage collector, node lifecycle, disruption) over their common/
    scheduler/    the pure scheduling core: node table, filter/score, queue, preemption, node state
    admission/    PriorityClass, ResourceQuota, LimitRange and DefaultTolerationSeconds rules (pure)
    storage/      the etcd-shaped Store protocol and its backends (memory, SQLite)
    auth/         authentication, authorization (RBAC, Node), certificates, encryption at rest
    autoscaling/  the pure cores of metrics, HPA, VPA and in-place resize
Beside the layers, each under its own contract: schema/ (the Kubernetes OpenAPI definitions,
field validation, OpenAPI v3 documents; imports only core) and patch/ (JSON, merge and strategic
merge patches, server-side apply, managedFields; imports only core and schema).

May import: core, daemonkit. Never agent or cli (an inner contract keeps the order above).
"""
