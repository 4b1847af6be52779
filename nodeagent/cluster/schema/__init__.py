"""The Kubernetes OpenAPI schemas the control plane serves and checks bodies against.

Source: the upstream 1.37 definitions that the `kubernetes-validate` package ships as JSON schema
(`_definitions.json`, with every `x-kubernetes-*` extension kubectl and kube-apiserver read). The
file is read once, lazily, and kept compact (see loader.py); nothing here does I/O after that.

    model        Schema nodes (shape, properties, items, extensions) and their merge semantics
    loader       finds and compacts `_definitions.json` (once)
    definitions  the loaded set: lookup by reference and by GVK, walking a field path
    decode       JSON and YAML bodies to plain values, noting duplicate fields (as Go's decoders do)
    validation   server-side field validation: unknown/duplicate fields (Strict|Warn|Ignore), type
                 errors as FieldErrors, pruning what Go's typed decoding would drop
    openapi      the /openapi/v3 index and per group-version documents for the served resources

May import: core (and the standard library, kubernetes-validate's data file, PyYAML).
"""
