"""The cluster API: Kubernetes API server paths over aiohttp (app) and what they do to objects
(operations), against the ClusterBackend protocol the server implements.

May import: every cluster module below it, daemonkit, core.
"""
