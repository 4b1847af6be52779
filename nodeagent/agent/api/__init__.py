"""Report: the agent's HTTP API (`create_app(backend)`), the AgentBackend protocol it calls and
the adapter that implements it over the agent's parts, its Prometheus metrics and its
registration with the control plane.

May import: every other agent package, daemonkit, core.
"""

from nodeagent.agent.api.app import create_app
from nodeagent.agent.api.backend import AdmissionError, AgentBackend, AlreadyExists

__all__ = ["AdmissionError", "AgentBackend", "AlreadyExists", "create_app"]
