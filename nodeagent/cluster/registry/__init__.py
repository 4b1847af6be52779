"""The Kubernetes API's objects, independent of HTTP: the catalog of kinds and one generic store.

    catalog        every resource served: group, version, kind, names, scope, verbs, subresources
    registry       the catalog and one GenericStore per resource over one Store; namespace lifecycle
    store          the generic store: create, get, list, watch, update, patch, delete(collection)
    strategy       what a kind adds: defaulting, validation, status rules, columns, field attributes
    kinds/         the built-in kinds' strategies
    binding        pods/binding: a scheduler's decision written with compare-and-swap (409 if bound)
    watch          the watch fan-out (one store watch per resource, events encoded once)
    options        list/delete options and the request context, validated as kube-apiserver does
    codec          objects <-> stored values, continue tokens
    table          server-side printing (meta.k8s.io/v1 Table)
    errors         metav1.Status errors with Kubernetes' reasons, codes and wording
    plugins        protocols of the rooms beside it: patch, field manager, field validation, admission
    authorization  the auth room's Authorizer, and AuthorizationOff for a server without security

May import: the rooms below it in the control plane's contract (storage, admission, auth,
controllers), the pure libraries schema and patch, core, daemonkit. Never HTTP (apiserver), the
loops or the server.
"""
