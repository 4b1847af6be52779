"""The pure scheduling core: the vectorised node table, filter and score (kube-scheduler's default
plugins), the priority queue with back-off, preemption, and what the scheduler knows of each node;
loop.py is the one asynchronous part: the batched loop that drains the queue, shared by the
scheduler service (binder.py) and the control plane's scheduler (scheduling/scheduler.py).

May import: core.
"""
