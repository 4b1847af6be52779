"""The control plane's storage: the etcd-shaped Store protocol (interface) and its backends.

May import: core.
"""
