"""Patches as kube-apiserver applies them. Pure functions over plain JSON values; merge keys,
list types and map types come from the schemas.

    errors         PatchError (message + the 400/409/422 kube-apiserver answers)
    jsonpatch      RFC 6902 JSON patch (the jsonpatch package) with upstream's limits and op checks
    merge          RFC 7386 JSON merge patch
    strategic      strategic merge patch (directives, merge keys and strategies from the schema)
    fieldpath      field paths and sets, the fieldsV1 encoding of managedFields
    typed          objects walked along the schema for apply: field sets, compare, merge, remove
    managedfields  metadata.managedFields entries: decode, encode, the Update-manager cap
    shapememo      a create's field set, remembered by the object's shape (keys and lists)
    apply          server-side apply (conflicts, force, prune) and the ownership of ordinary writes

May import: core and cluster.schema.
"""
