"""What the agent sends the control plane, as pure functions: the Node it creates, the status
patch it sends every nodeStatusUpdateFrequency, the node Lease and its renewals, and the back-off
between failed attempts.

The agent's own Node (node/reporter.py) carries nodeagent's extras (`status.usage`, cgroup keys in
nodeInfo); the server gets the Kubernetes shape only, so a Strict client reading it back sees no
unknown field: NodeSystemInfo's ten keys, `daemonEndpoints.kubeletEndpoint.Port` (the agent's API
port, which kube-apiserver dials for logs and exec) and the `nodeagent.io/api-url` annotation.
"""

from __future__ import annotations

import datetime
from typing import Any

from nodeagent.core.wellknown import API_URL as URL_ANNOTATION

NODE_LEASE_NAMESPACE = "kube-node-lease"
BACKOFF_INITIAL_S = 0.2  # the kubelet's nodelease controller: 200 ms, doubled up to 7 s
BACKOFF_MAX_S = 7.0
_STATUS_KEYS = ("capacity", "allocatable", "conditions", "addresses", "images")


def node_system_info(info: dict[str, str]) -> dict[str, str]:
    """The agent's nodeInfo in core/v1 NodeSystemInfo's shape (all ten keys, as the kubelet sends)."""
    version = info.get("agentVersion", "")
    if version and not version.startswith("v"):
        version = f"v{version}"
    return {
        "machineID": info.get("machineID", ""),
        "systemUUID": info.get("systemUUID", ""),
        "bootID": info.get("bootID", ""),
        "kernelVersion": info.get("kernelVersion", ""),
        "osImage": info.get("osImage", ""),
        "containerRuntimeVersion": f"nodeagent://{version}" if version else "",
        "kubeletVersion": version,
        "kubeProxyVersion": "",
        "operatingSystem": info.get("operatingSystem", "linux"),
        "architecture": info.get("architecture", ""),
    }


def node_status(node: dict[str, Any], port: int) -> dict[str, Any]:
    """`status` of the Node for the server, from the agent's own Node object."""
    status = node.get("status") or {}
    out = {k: status[k] for k in _STATUS_KEYS if k in status}
    out["nodeInfo"] = node_system_info(status.get("nodeInfo") or {})
    out["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    return out


def node_metadata(node: dict[str, Any], api_url: str) -> dict[str, Any]:
    """name, labels and the API URL annotation (how the server reaches this agent's own API)."""
    meta = node.get("metadata") or {}
    return {"name": meta["name"], "labels": dict(meta.get("labels") or {}),
            "annotations": {**(meta.get("annotations") or {}), URL_ANNOTATION: api_url}}


def node_for_create(node: dict[str, Any], port: int, api_url: str) -> dict[str, Any]:
    """The Node to POST to /api/v1/nodes (status included, as the kubelet's registerWithAPIServer)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": node_metadata(node, api_url),
            "spec": {}, "status": node_status(node, port)}


def status_patch(node: dict[str, Any], port: int) -> dict[str, Any]:
    """The merge patch for nodes/<name>/status: whole lists (conditions, addresses), since the
    agent owns the node's status; a merge patch replaces a list, so a vanished address goes."""
    return {"status": node_status(node, port)}


def status_fingerprint(patch: dict[str, Any]) -> dict[str, Any]:
    """The status patch without the conditions' lastHeartbeatTime (it moves every round): equal
    fingerprints mean nothing changed."""
    status = dict(patch.get("status") or {})
    status["conditions"] = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"}
                            for c in status.get("conditions") or []]
    return status


def status_needs_sending(changed: bool, since_last: float | None, report_frequency: float) -> bool:
    """The kubelet's rule (tryUpdateNodeStatus): send when something changed, when nothing was sent
    yet on this connection, or when nodeStatusReportFrequency has passed since the last one."""
    return changed or since_last is None or since_last >= report_frequency


def metadata_patch(node: dict[str, Any], api_url: str) -> dict[str, Any]:
    """The merge patch for nodes/<name> when the Node existed already: labels and the URL annotation
    are set (other labels, e.g. added by kubectl label, are kept)."""
    meta = node_metadata(node, api_url)
    return {"metadata": {"labels": meta["labels"], "annotations": meta["annotations"]}}


def micro_time(epoch: float) -> str:
    """metav1.MicroTime: RFC 3339 in UTC with microseconds (`2026-12-06T20:10:00.123456Z`)."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_for_create(node_name: str, duration_s: int, now: float, node_uid: str | None = None) -> dict[str, Any]:
    """The node Lease (kube-node-lease/<node>), owned by the Node when its uid is known, as the
    kubelet's nodelease controller makes it (so deleting the Node deletes its Lease)."""
    meta: dict[str, Any] = {"name": node_name, "namespace": NODE_LEASE_NAMESPACE}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": node_name, "leaseDurationSeconds": duration_s, "renewTime": micro_time(now)}}


def renewed_lease(lease: dict[str, Any], node_name: str, duration_s: int, now: float,
                  node_uid: str | None = None) -> dict[str, Any]:
    """The Lease to PUT: the one read (its resourceVersion guards the update) with a new renewTime,
    our holder and duration, and the owner reference added if it was missing."""
    meta = dict(lease.get("metadata") or {})
    if node_uid and not meta.get("ownerReferences"):
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}]
    spec = {**(lease.get("spec") or {}), "holderIdentity": node_name, "leaseDurationSeconds": duration_s,
            "renewTime": micro_time(now)}
    return {**lease, "metadata": meta, "spec": spec}


def lease_renew_interval(duration_s: int) -> float:
    """The kubelet renews every quarter of the lease duration (nodelease.renewIntervalFraction 0.25)."""
    return duration_s * 0.25


def lease_retry_delay(failures: int, duration_s: int) -> float:
    """The wait after the n-th failed round of the node's sync: the kubelet's 200 ms doubled up to
    7 s, but never longer than the renew interval. Upstream caps at 7 s whatever the lease; with a
    lease shorter than ~9 s (a test cluster, or a fast node-loss setup) a server back after an
    outage would then see the lease lapse before the agent asked again, and mark the node Unknown
    and taint it although the agent is fine."""
    return backoff_delay(failures, maximum=min(BACKOFF_MAX_S, max(lease_renew_interval(duration_s), BACKOFF_INITIAL_S)))


def backoff_delay(failures: int, initial: float = BACKOFF_INITIAL_S, maximum: float = BACKOFF_MAX_S) -> float:
    """The wait after the n-th consecutive failure (n >= 1): initial doubled each time, capped."""
    if failures <= 0:
        return 0.0
    return float(min(maximum, initial * (2 ** min(failures - 1, 32))))
