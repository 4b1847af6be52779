"""What the schemas and patch engines cost: memory of the loaded definitions, load time, and the
per-request work of field validation, patches and server-side apply on a realistic Pod.

Each memory figure is measured in a fresh child process (so nothing loaded before counts):
- RSS: the process's resident set before and after loading the definitions (VmRSS);
- traced: bytes Python allocated for what stays loaded (tracemalloc), and the peak while loading
  (the parsed JSON exists only during the load).
Timings are medians of repeated runs in this process. Prints figures; asserts nothing.

    .venv/bin/python bench/schema_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nodeagent.cluster.schema.model import Gvk
from nodeagent.cluster.schema.openapi import ServedResource, Subresource

_CHILD = r"""
import gc, json, sys, time, tracemalloc
sys.path.insert(0, {root!r})
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
import nodeagent.cluster.schema.definitions as d  # the modules, not the data
gc.collect()
before = rss()
tracemalloc.start()
t = time.perf_counter()
defs = d.definitions()
took = time.perf_counter() - t
gc.collect()
kept, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
after = rss()
{extra}
print(json.dumps(dict(rss_before=before, rss_after=after, kept=kept, peak=peak, load_s=took, n=len(defs), **out)))
"""

_OPENAPI_IMPORTS = r"""
sys.path.insert(0, {bench!r})
from nodeagent.cluster.schema.openapi import openapi_documents
from schema_bench import SERVED
"""

_OPENAPI = r"""
gc.collect(); r0 = rss(); t = time.perf_counter()
docs = openapi_documents(SERVED)
built = time.perf_counter() - t
gc.collect()
out = dict(openapi_rss=rss() - r0, openapi_s=built, openapi_bytes=sum(len(x.body) for x in docs.documents.values()))
"""

STATUS = Subresource("status", ("get", "update", "patch"))
SERVED = [
    ServedResource(
        "",
        "v1",
        "Pod",
        "pods",
        True,
        subresources=(
            STATUS,
            Subresource("binding", ("create",), Gvk("", "v1", "Binding")),
            Subresource("eviction", ("create",), Gvk("policy", "v1", "Eviction")),
            Subresource("log", ("get",)),
            Subresource("exec", ("get", "create"), Gvk("", "v1", "PodExecOptions"), connect=True),
        ),
    ),
    ServedResource("", "v1", "Node", "nodes", False, subresources=(STATUS,)),
    ServedResource("", "v1", "Namespace", "namespaces", False),
    ServedResource("", "v1", "ConfigMap", "configmaps", True),
    ServedResource("", "v1", "Secret", "secrets", True),
    ServedResource("", "v1", "ResourceQuota", "resourcequotas", True),
    ServedResource("", "v1", "LimitRange", "limitranges", True),
    ServedResource("", "v1", "Event", "events", True),
    ServedResource("", "v1", "ServiceAccount", "serviceaccounts", True),
    ServedResource("coordination.k8s.io", "v1", "Lease", "leases", True),
    ServedResource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False),
    ServedResource(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        True,
        subresources=(STATUS, Subresource("scale", ("get", "update", "patch"), Gvk("autoscaling", "v1", "Scale"))),
    ),
]


def child(extra: str = "out = {}") -> dict[str, Any]:
    code = _CHILD.format(root=str(Path(__file__).resolve().parent.parent), extra=extra)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def median_us(fn: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "default",
        "labels": {"app": "web", "tier": "front"},
        "annotations": {"a": "b"},
        "creationTimestamp": "2024-05-01T12:00:00Z",
    },
    "spec": {
        "containers": [
            {
                "name": f"c{i}",
                "image": "nginx:1.27",
                "command": ["nginx", "-g", "daemon off;"],
                "env": [{"name": f"E{j}", "value": str(j)} for j in range(5)],
                "ports": [{"containerPort": 80 + i, "protocol": "TCP"}],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "200m", "memory": "128Mi"},
                },
                "livenessProbe": {"httpGet": {"path": "/", "port": 80 + i}, "periodSeconds": 10},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
            for i in range(2)
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"disk": "ssd"},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 200 if args.quick else 2000

    m = child()
    grew = (m["rss_after"] - m["rss_before"]) / 2**20
    print(f"definitions: {m['n']} loaded in {m['load_s'] * 1000:.0f} ms (first use)")
    print(f"  RSS {m['rss_before'] / 2**20:.1f} -> {m['rss_after'] / 2**20:.1f} MiB (+{grew:.1f} MiB)")
    print(f"  traced: kept {m['kept'] / 2**20:.2f} MiB, peak while loading {m['peak'] / 2**20:.2f} MiB")
    o = child(_OPENAPI_IMPORTS.format(bench=str(Path(__file__).resolve().parent)) + _OPENAPI)
    print(
        f"openapi documents (12 resources, 4 group-versions): built in {o['openapi_s'] * 1000:.0f} ms, "
        f"{o['openapi_bytes'] / 2**10:.0f} KiB of JSON, RSS +{o['openapi_rss'] / 2**20:.1f} MiB"
    )

    from nodeagent.cluster.patch.apply import apply, update
    from nodeagent.cluster.patch.jsonpatch import json_patch
    from nodeagent.cluster.patch.merge import merge_patch
    from nodeagent.cluster.patch.strategic import strategic_merge_patch
    from nodeagent.cluster.schema.decode import decode_json, decode_yaml
    from nodeagent.cluster.schema.definitions import definitions
    from nodeagent.cluster.schema.model import Gvk
    from nodeagent.cluster.schema.validation import validate_fields

    schema = definitions().by_gvk(Gvk("", "v1", "Pod"))
    body = json.dumps(POD).encode()
    yaml_body = json.dumps(POD)  # JSON is YAML
    smp = {
        "metadata": {"labels": {"tier": None, "x": "y"}},
        "spec": {
            "$setElementOrder/containers": [{"name": "c0"}, {"name": "c1"}],
            "containers": [{"name": "c1", "image": "nginx:1.28"}],
        },
    }
    now = "2024-05-01T12:00:00Z"
    created = update(None, POD, schema, manager="kubectl-create", api_version="v1", now=now)
    applied = apply(created, POD, schema, manager="kubectl", api_version="v1", now=now)
    changed = copy.deepcopy(POD)
    changed["spec"]["containers"][1]["image"] = "nginx:1.28"
    print(f"per request on a 2-container Pod ({len(body)} bytes of JSON), median of {n}:")
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("decode JSON (duplicate tracking)", lambda: decode_json(body)),
        ("decode YAML (libyaml)", lambda: decode_yaml(yaml_body)),
        ("validate fields + prune", lambda: validate_fields(schema, decode_json(body))),
        (
            "json patch (2 ops)",
            lambda: json_patch(
                POD,
                [
                    {"op": "replace", "path": "/metadata/labels/tier", "value": "b"},
                    {"op": "add", "path": "/spec/nodeName", "value": "n1"},
                ],
            ),
        ),
        ("merge patch", lambda: merge_patch(POD, {"metadata": {"labels": {"x": "y"}}})),
        ("strategic merge patch", lambda: strategic_merge_patch(POD, smp, schema)),
        ("managed fields of a create", lambda: update(None, POD, schema, manager="m", api_version="v1", now=now)),
        (
            "managed fields of an update",
            lambda: update(applied, changed, schema, manager="m", api_version="v1", now=now),
        ),
        (
            "server-side apply (re-apply, changed image)",
            lambda: apply(applied, changed, schema, manager="kubectl", api_version="v1", now=now, force=True),
        ),
    ]
    for name, fn in cases:
        print(f"  {name:45s} {median_us(fn, n):8.0f} us")


if __name__ == "__main__":
    main()
