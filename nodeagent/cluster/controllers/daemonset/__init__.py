"""The daemonset controller's pure core (see the room's docstring)."""
