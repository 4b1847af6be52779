"""Fuzz every kind the API serves: no payload to create, update or patch gets a 500, and the
server keeps serving. Payloads are JSON values shaped like each kind (right keys, wrong types
and odd values), so the strategies' validation paths are reached, not just the decoder's."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kube.fixtures import make_registry

from nodeagent.cluster.apiserver.kubeapi import create_kube_app
from nodeagent.cluster.apiserver.resources import ApiSettings
from nodeagent.cluster.registry.kinds import BUILTIN, REVIEWS

KINDS = [cls.info for cls in BUILTIN + REVIEWS]
SCALE = ["scale", "scale-put"]  # the kinds with a /scale get it fuzzed; the others answer 404
FIELDS = ["spec", "status", "data", "binaryData", "stringData", "type", "immutable", "value", "globalDefault",
          "preemptionPolicy", "description", "rules", "roleRef", "subjects", "involvedObject", "regarding", "note",
          "reason", "message", "count", "secrets", "hard", "limits", "containers", "holderIdentity",
          "leaseDurationSeconds", "unschedulable", "taints", "finalizers", "resourceAttributes", "aggregationRule",
          "selector", "template", "replicas", "strategy", "updateStrategy", "rollingUpdate", "maxSurge",
          "maxUnavailable", "minAvailable", "matchLabels", "matchExpressions", "labels", "metadata", "schedule",
          "jobTemplate", "completions", "parallelism", "completionMode", "revision", "restartPolicy", "image"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                    st.sampled_from(["", "-1", "1e308", "100Mi", "Always", "Normal", "NoSchedule", "v1", "a/b",
                                     "rbac.authorization.k8s.io", "Role", "ClusterRole", "Pod", "Container",
                                     "25%", "101%", "RollingUpdate", "Recreate", "OnDelete", "Never", "In",
                                     "@hourly", "* * * * *", "Indexed", "Scale", "autoscaling/v1"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from([*FIELDS, "name", "kind", "apiGroup", "verbs", "cpu", "memory", "key",
                                     "effect", "command", "requests", "max", "min", "x"]), inner,
                    max_size=4)), max_leaves=12)
metadata = st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.just("fuzz"), st.text(max_size=8), st.integers()),
    "generateName": st.one_of(st.just("fz-"), st.integers()),
    "labels": st.one_of(st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2), values),
    "annotations": values, "finalizers": values, "ownerReferences": values, "resourceVersion": values})
bodies = st.one_of(values, st.fixed_dictionaries(
    {"metadata": st.one_of(metadata, values)},
    optional=dict.fromkeys(FIELDS[:12], values) | {"apiVersion": st.sampled_from(["v1", "x/y", ""]),
                                                 "kind": st.sampled_from(["Pod", "Nope", ""])}))


def _path(info, name: str | None = None) -> str:
    base = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
    ns = "namespaces/default/" if info.namespaced else ""
    return f"{base}/{ns}{info.plural}" + (f"/{name}" if name else "")


@pytest.mark.parametrize("info", KINDS, ids=lambda i: f"{i.group or 'core'}/{i.plural}")
def test_no_payload_is_a_500(info) -> None:
    loop = asyncio.new_event_loop()
    try:
        reg, store, clock = loop.run_until_complete(make_registry())
        client = TestClient(TestServer(create_kube_app(reg, ApiSettings(clock)), loop=loop), loop=loop)
        loop.run_until_complete(client.start_server())
        loop.run_until_complete(_seed(client, info))
        failures: list[str] = []

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(body=bodies, how=st.sampled_from(["create", "update", "merge", "strategic", "json", "apply", "status", *SCALE]))
        def run(body, how) -> None:
            failures.extend(loop.run_until_complete(_one(client, info, body, how)))

        run()
        assert not failures, failures[:3]
        assert loop.run_until_complete(client.get("/healthz")).status == 200
        loop.run_until_complete(client.close())
        loop.run_until_complete(reg.close())
    finally:
        loop.close()


async def _seed(client: TestClient, info) -> None:
    seed: dict = {"metadata": {"name": "fuzz"}}
    if info.plural == "pods":
        seed["spec"] = {"containers": [{"name": "c", "command": ["x"]}]}
    elif info.plural == "priorityclasses":
        seed["value"] = 1
    elif info.group in ("apps", "batch") and info.plural != "controllerrevisions":
        tmpl = {"metadata": {"labels": {"app": "fuzz"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}],
                         "restartPolicy": "Never" if info.group == "batch" else "Always"}}
        spec: dict = {"template": tmpl} if info.plural == "jobs" else {"selector": {"matchLabels": {"app": "fuzz"}},
                                                                        "template": tmpl}
        seed["spec"] = {"schedule": "@hourly", "jobTemplate": {"spec": {"template": tmpl}}} \
            if info.plural == "cronjobs" else spec
    elif info.plural == "controllerrevisions":
        seed["revision"] = 1
    elif info.plural == "horizontalpodautoscalers":
        seed["spec"] = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "fuzz"},
                        "maxReplicas": 2}
    elif info.plural == "verticalpodautoscalers":
        seed["spec"] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "fuzz"}}
    elif info.plural == "limitranges":
        seed["spec"] = {"limits": []}
    elif info.plural in ("rolebindings", "clusterrolebindings"):
        seed["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}
    if info.plural not in ("selfsubjectaccessreviews", "subjectaccessreviews"):
        resp = await client.post(_path(info), json=seed)
        assert resp.status == 201, await resp.text()


async def _one(client, info, body, how) -> list[str]:
    data = json.dumps(body)
    if how == "create":
        resp = await client.post(_path(info), data=data, headers={"Content-Type": "application/json"})
    elif how == "scale":
        resp = await client.patch(_path(info, "fuzz") + "/scale", data=data,
                                  headers={"Content-Type": "application/merge-patch+json"})
    elif how == "scale-put":
        resp = await client.put(_path(info, "fuzz") + "/scale", data=data, headers={"Content-Type": "application/json"})
    elif how in ("update", "status"):
        path = _path(info, "fuzz") + ("/status" if how == "status" else "")
        resp = await client.put(path, data=data, headers={"Content-Type": "application/json"})
    else:
        ctype = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json", "apply": "application/apply-patch+yaml"}[how]
        query = "?fieldManager=fuzz" if how == "apply" else ""
        resp = await client.patch(_path(info, "fuzz") + query, data=data, headers={"Content-Type": ctype})
    text = await resp.text()
    if resp.status >= 500:
        return [f"{how} {info.plural} {data[:300]} -> {resp.status} {text[:300]}"]
    return []
