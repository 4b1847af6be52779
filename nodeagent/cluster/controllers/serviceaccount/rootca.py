"""The root-CA publisher's decision (pkg/controller/certificates/rootcacertpublisher/publisher.go):
an active namespace holds the ConfigMap `kube-root-ca.crt` whose `ca.crt` is the CA bundle that
verifies the API server's serving certificate, with upstream's description annotation; a missing
one is created, one whose data or annotation differ is updated (other fields kept)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.actions import Create, Plan, Update
from nodeagent.cluster.controllers.common.meta import annotations_of, name
from nodeagent.cluster.controllers.serviceaccount.accounts import active

CONFIGMAP = "kube-root-ca.crt"
DATA_KEY = "ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints "
               "such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across "
               "distributions of Kubernetes clusters.")


def decide(namespace: Mapping[str, Any] | None, configmap: Mapping[str, Any] | None, root_ca: str) -> Plan:
    """`configmap`: the namespace's `kube-root-ca.crt` in the cache (None: absent)."""
    plan = Plan()
    if namespace is None or not active(namespace):
        return plan
    data = {DATA_KEY: root_ca}
    if configmap is None:
        plan.add(Create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": CONFIGMAP, "namespace": name(namespace),
                                      "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}},
                         "data": data}, reason="MissingRootCA"))
        return plan
    if configmap.get("data") == data and annotations_of(configmap).get(DESCRIPTION_ANNOTATION):
        return plan
    fixed: dict[str, Any] = copy.deepcopy(dict(configmap))
    fixed["data"] = data
    meta = fixed.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), DESCRIPTION_ANNOTATION: DESCRIPTION}
    plan.add(Update(fixed, reason="StaleRootCA"))
    return plan
