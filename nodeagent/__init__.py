"""nodeagent: a kubelet-like node agent for Linux and a small control plane that speaks Kubernetes.

The rooms, top to bottom (import-linter contracts in pyproject.toml keep imports going down):

    cli/        the `nodeagent` command: run the agent or the server, and the client verbs
    agent/      the node agent (one per host)          | never import each other
    cluster/    the control plane (`nodeagent server`) |
    daemonkit/  what both daemons are built from: config files, HTTP bodies and Status, auth, sd_notify, logs
    core/       the shared vocabulary, no I/O: quantities, names, durations, errors, clock, the Pod model, QoS
"""

__version__ = "0.1.0"
