"""Patches as kube-apiserver applies them: JSON patch, JSON merge patch, strategic merge patch, and
server-side apply with managed fields. Pure functions over plain JSON values; merge keys, list
types and map types come from the schemas.

May import: core and cluster.schema.
"""
