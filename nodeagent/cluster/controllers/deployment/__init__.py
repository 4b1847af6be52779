"""The deployment controller's pure core (see the room's docstring)."""
