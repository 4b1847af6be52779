"""The garbagecollector controller's pure core (see the room's docstring)."""
