"""The daemonset controller's pure core (see the room's docstring).

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
