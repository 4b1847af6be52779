"""The agent as a client of the control plane (`nodeagent server run`): its Node, the Node's
status and its Lease, kept the way a kubelet keeps them (sync.py), from pure bodies (bodies.py)."""
