"""The control plane's store on disk: the Store protocol, SQLite behind it, and its writer process.

May import: core.
"""
