"""nodeagent: a kubelet-like node resource manager for Linux."""

__version__ = "0.1.0"
