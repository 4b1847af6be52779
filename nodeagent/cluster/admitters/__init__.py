"""The admission plugins of the API, in Kubernetes' order, over the registry (the pure rules are
in cluster/admission).

May import: registry, admission, core.
"""
