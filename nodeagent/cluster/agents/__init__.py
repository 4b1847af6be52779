"""How the control plane talks to the node agents: the HTTP client, and the pure reconciliation of
what an agent runs with what the store says.

May import: objects, core, daemonkit.
"""
