"""Why a pod manager refuses a valid pod: the API answers these as Kubernetes Status objects."""

from __future__ import annotations


class AdmissionError(Exception):
    """The pod is valid but this node will not run it (422): `reason` like OutOfmemory."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class AlreadyExists(Exception):
    """A pod with this namespace/name is already admitted (409)."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f'pods "{name}" already exists in namespace "{namespace}"')
        self.namespace = namespace
        self.name = name


class DurabilityError(Exception):
    """The pod's record could not be made durable (disk full, I/O error): nothing was promised (500)."""
