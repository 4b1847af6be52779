"""HTTP API: `create_app(backend)` serves Kubernetes-shaped node and pod resources."""

from nodeagent.api.app import create_app
from nodeagent.api.backend import AdmissionError, AgentBackend, AlreadyExists

__all__ = ["AdmissionError", "AgentBackend", "AlreadyExists", "create_app"]
