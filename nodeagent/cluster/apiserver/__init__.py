"""HTTP: the Kubernetes API over aiohttp, and the scheduler's older cluster API.

    kubeapi       the application of `nodeagent server run`: dispatcher, Status errors, discovery,
                  /version, health, /openapi/v3
    requestinfo   what a path means (kube's RequestInfoFactory)
    negotiation   Accept (Table, aggregated discovery) and Content-Type
    resources     the verbs over HTTP: options, bodies, lists, Tables, watch streams
    encoding      objects, lists, Tables and watch events as bytes; warnings
    discovery     /api, /apis, resource lists (legacy and apidiscovery.k8s.io/v2)
    openapi       the catalog's OpenAPI v3 documents (schema room)
    app, operations, backend   the scheduler's API (`nodeagent scheduler run`), until it moves here

May import: every cluster module below it, daemonkit, core.
"""
