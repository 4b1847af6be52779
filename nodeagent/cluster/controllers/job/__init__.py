"""The job controller's pure core (see the room's docstring)."""
