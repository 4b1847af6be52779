"""Cost of the controllers' decision functions at the issue's scale, in process, no store:

  rollout1000   a 1000-replica Deployment (maxSurge 25%) on 100 nodes: ReplicaSet manage (1000
                creates planned) and one Deployment sync mid-rollout
  fifty         50 Deployments of 20 created at once: one Deployment sync + one ReplicaSet manage each
  idle10k       10,000 pods idle (500 ReplicaSets of 20, all in place): one resync pass over every
                ReplicaSet (claim, status) and one garbage-collector pass over every object
Prints figures (median of repeats, ms); never asserts.

    .venv/bin/python bench/controllers_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from controllers_objects import NOW, pod, replicaset

from nodeagent.cluster.controllers.deployment import reconcile as dc
from nodeagent.cluster.controllers.garbagecollector.decide import collect
from nodeagent.cluster.controllers.replicaset import reconcile as rsc


def timed(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs) * 1000


def deployment(name: str, replicas: int, image: str = "v1") -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "uid": f"{name}-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
        },
        "status": {},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    n = ap.parse_args().repeat
    d = deployment("big", 1000)
    plan = dc.sync(d, [], now=NOW)
    rs = plan.actions[0].obj
    rs["metadata"].update(uid="big-rs", creationTimestamp="2023-11-14T20:00:00Z", generation=1)
    print(f"rollout1000 deployment sync (create the RS): {timed(lambda: dc.sync(d, [], now=NOW), n):.2f} ms")
    ms = timed(lambda: rsc.manage(rs, [], now=NOW, satisfied=True), n)
    print(f"rollout1000 replicaset manage (1000 to create, 500 planned): {ms:.2f} ms")
    pods = [
        pod(f"big-{i}", node=f"node-{i % 100:03d}", owner=rs, labels=rs["spec"]["template"]["metadata"]["labels"])
        for i in range(1000)
    ]
    rs["status"] = {"replicas": 1000, "availableReplicas": 1000, "readyReplicas": 1000}
    ms = timed(lambda: rsc.reconcile(rs, pods, now=NOW), n)
    print(f"rollout1000 replicaset status pass over 1000 pods: {ms:.2f} ms")
    rs_small = {**rs, "spec": {**rs["spec"], "replicas": 750}}
    print(
        f"rollout1000 scale-down victims (250 of 1000, ranked over 100 nodes): "
        f"{timed(lambda: rsc.manage(rs_small, pods, now=NOW, satisfied=True, related=pods), n):.2f} ms"
    )
    d2 = deployment("big", 1000, image="v2")
    d2["metadata"]["generation"] = 2
    print(
        f"rollout1000 deployment sync at the start of a rollout: {timed(lambda: dc.sync(d2, [rs], now=NOW), n):.2f} ms"
    )
    deps = [deployment(f"d{i}", 20) for i in range(50)]

    def fifty() -> None:
        for dep in deps:
            p = dc.sync(dep, [], now=NOW)
            new = p.actions[0].obj
            new["metadata"].update(uid=f"{new['metadata']['name']}-u")
            rsc.manage(new, [], now=NOW, satisfied=True)

    print(f"fifty: 50 deployment syncs + 50 replicaset manages: {timed(fifty, n):.2f} ms")
    rss, all_pods = [], []
    for i in range(500):
        r = replicaset(f"rs{i}", 20, labels={"app": f"a{i}"})
        rss.append(r)
        ps = [pod(f"rs{i}-{j}", node=f"node-{j % 100:03d}", owner=r, labels={"app": f"a{i}"}) for j in range(20)]
        r["status"] = rsc.calculate_status(r, ps, NOW, None)
        all_pods.append(ps)

    def idle() -> None:
        for r, ps in zip(rss, all_pods, strict=True):
            rsc.reconcile(r, ps, now=NOW)

    print(f"idle10k: replicaset resync pass over 500 RSs / 10,000 pods: {timed(idle, n):.1f} ms")
    objects = [*rss, *(p for ps in all_pods for p in ps)]
    scoped = lambda api, kind: True
    print(f"idle10k: garbage-collector pass over 10,500 objects: {timed(lambda: collect(objects, scoped), n):.1f} ms")


if __name__ == "__main__":
    main()
