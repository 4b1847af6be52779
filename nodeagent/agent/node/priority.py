"""The agent's own priorities: ahead of the pods it may have to evict, never passed on to them.

OOM: like the kubelet, the agent sets its own oom_score_adj to -999, so the kernel kills pods first
(pods get theirs from qos.py in the spawn shim, not by inheritance).

CPU: on a busy node the eviction pass competes with the very pods that fill memory, and a pass cut
by a scheduler tick shows in the reaction tail, so the loop runs at a better nice than the pods
(bench/README.md, "The loop thread at nice -10"). Nice and policy are per thread on Linux; this
sets the calling thread, the one that runs the event loop and so every eviction pass.
SCHED_RESET_ON_FORK makes every new task start at nice 0 with the normal policy: pods and the
address probe, and also the loop's worker threads (file reads handed off with asyncio.to_thread),
which need no head start.
"""

from __future__ import annotations

import os

import structlog

from nodeagent.agent.node.procfs import own_oom_score_adj

log = structlog.get_logger(__name__)

AGENT_OOM_SCORE_ADJ = -999


def set_own_oom_score_adj(value: int = AGENT_OOM_SCORE_ADJ) -> int:
    """The agent protects itself from the OOM killer like the kubelet (-999); returns what it got.

    Lowering it needs CAP_SYS_RESOURCE; without it the current value stays and a warning says so.
    """
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError as e:
        log.warning("agent_oom_score_adj_failed", wanted=value, error=str(e))
    return own_oom_score_adj()


def set_own_priority(nice: int) -> int:
    """Reset-on-fork and `nice` for the calling thread; returns the nice value in effect.

    A negative value needs CAP_SYS_NICE; without it the current value stays and a warning says so.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER | os.SCHED_RESET_ON_FORK, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as e:
        log.warning("agent_nice_failed", wanted=nice, error=str(e))
    return os.getpriority(os.PRIO_PROCESS, 0)
