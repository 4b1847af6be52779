"""NodeRestriction: the admission half of the Node authorizer, as upstream's plugin
(plugin/pkg/admission/noderestriction). The authorizer decides from the request line; this sees
the objects, so it is where an agent (`system:node:<name>` in `system:nodes`) is held to:

- its own Node: created or updated under its own name only, never with a configSource, never
  changing its taints, never setting, changing or removing a label in the
  `node-restriction.kubernetes.io/` namespace or any other kubernetes.io / k8s.io label outside
  the kubelet's own set (so it cannot steer workloads to itself);
- pods: only mirror pods bound to itself and owned (as controller) by its Node, referencing no
  service account, secret, configmap, claim or cluster trust bundle; delete only pods bound to
  itself; pods/status only of pods bound to itself, without touching their labels or resource
  claim statuses; pods/eviction only of pods bound to itself;
- leases only `kube-node-lease/<node>`, CSINodes only its own;
- service-account tokens only bound to a pod (by name and uid) that runs on it.

Pure: the caller resolves what the stored objects say (the pod for a delete or eviction, the
requesting node's uid for a mirror pod) and turns a Refusal into a 403 (404 when `not_found`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.auth.user import UserInfo, node_identity
from nodeagent.core.wellknown import CONFIG_MIRROR

NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"

# k8s.io/kubelet/pkg/apis/well_known_labels.go: the labels a kubelet may set on its Node
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os",
    "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch"})
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


@dataclass(frozen=True)
class NodeRequest:
    """What admission knows of one write: `obj` the new object (the pod for a delete), `old` the
    stored one (None on create); `node_uid` the requesting node's Node uid, None when it has none."""

    operation: str  # CREATE | UPDATE | DELETE
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    obj: Mapping[str, Any] | None
    old: Mapping[str, Any] | None = None
    node_uid: str | None = None


@dataclass(frozen=True)
class Refusal:
    message: str
    not_found: bool = False  # the object it hinges on does not exist: 404, as upstream returns it


def _dict(obj: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


def _namespace_of(label: str) -> str:
    return label.split("/", 1)[0] if "/" in label else ""


def _within(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def is_kubelet_label(label: str) -> bool:
    """upstream IsKubeletLabel: a label the kubelet itself may set."""
    ns = _namespace_of(label)
    return label in KUBELET_LABELS or any(_within(ns, allowed) for allowed in KUBELET_LABEL_NAMESPACES)


def forbidden_labels(labels: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """The added, changed or removed labels a node may not touch (sorted, as upstream lists them)."""
    modified = {k for k, v in labels.items() if k not in old or old[k] != v}
    modified |= {k for k in old if k not in labels}
    return sorted(label for label in modified if _forbidden_label(label))


def _forbidden_label(label: str) -> bool:
    """A node-restriction label, or a kubernetes.io / k8s.io one outside the kubelet's set."""
    ns = _namespace_of(label)
    if _within(ns, NODE_RESTRICTION_NAMESPACE):
        return True
    return (_within(ns, "kubernetes.io") or _within(ns, "k8s.io")) and not is_kubelet_label(label)


def node_restriction(user: UserInfo, req: NodeRequest) -> Refusal | None:
    """Why a node may not make this write, or None (also None for anyone who is not a node)."""
    node = node_identity(user)
    if node is None:
        return None
    if not node:
        return Refusal(f'could not determine node from user "{user.name}"')
    g, r = req.group, req.resource
    if g == "" and r == "pods":
        if req.subresource == "":
            return _pod(node, req)
        if req.subresource == "status":
            return _pod_status(node, req)
        if req.subresource == "eviction":
            return _pod_eviction(node, req)
        return Refusal(f"unexpected pod subresource \"{req.subresource}\", only 'status' and 'eviction' are allowed")
    if g == "" and r == "nodes":
        return _node(node, req)
    if g == "" and r == "serviceaccounts" and req.subresource == "token" and req.operation == "CREATE":
        return _token(node, req)
    if g == "coordination.k8s.io" and r == "leases":
        if req.namespace != NODE_LEASE_NAMESPACE:
            return Refusal(f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
        if _name(req) != node:
            return Refusal("can only access node lease with the same name as the requesting node")
    if g == "storage.k8s.io" and r == "csinodes" and _name(req) != node:
        return Refusal("can only access CSINode with the same name as the requesting node")
    return None


def _name(req: NodeRequest) -> str:
    """The object's name: the body's on create (the request line has none), else the request's."""
    if req.operation == "CREATE":
        return str(_dict(req.obj, "metadata").get("name") or "")
    return req.name


def _pod(node: str, req: NodeRequest) -> Refusal | None:
    if req.operation == "CREATE":
        return _mirror_pod(node, req)
    if req.operation == "DELETE":
        if req.obj is None:
            return Refusal(f'pods "{req.name}" not found', not_found=True)
        if _dict(req.obj, "spec").get("nodeName") != node:
            return Refusal(f'node "{node}" can only delete pods with spec.nodeName set to itself')
        return None
    return Refusal(f'unexpected operation "{req.operation}", node "{node}" can only create and delete mirror pods')


def _mirror_pod(node: str, req: NodeRequest) -> Refusal | None:
    pod = req.obj or {}
    meta, spec = _dict(pod, "metadata"), _dict(pod, "spec")
    if CONFIG_MIRROR not in _dict(meta, "annotations"):
        return Refusal(f'pod does not have "{CONFIG_MIRROR}" annotation, node "{node}" can only create mirror pods')
    if spec.get("nodeName") != node:
        return Refusal(f'node "{node}" can only create pods with spec.nodeName set to itself')
    owners = _list(meta, "ownerReferences")
    if len(owners) > 1:
        return Refusal(f'node "{node}" can only create pods with a single owner reference set to itself')
    if not owners or not isinstance(owners[0], Mapping):
        return Refusal(f'node "{node}" can only create pods with an owner reference set to itself')
    owner = owners[0]
    if owner.get("apiVersion") != "v1" or owner.get("kind") != "Node" or owner.get("name") != node:
        return Refusal(f'node "{node}" can only create pods with an owner reference set to itself')
    if owner.get("controller") is not True:
        return Refusal(f'node "{node}" can only create pods with a controller owner reference set to itself')
    if owner.get("blockOwnerDeletion") is True:
        return Refusal(f'node "{node}" must not set blockOwnerDeletion on an owner reference')
    if req.node_uid is None:
        return Refusal(f'nodes "{node}" not found', not_found=True)
    if owner.get("uid") != req.node_uid:
        return Refusal(f"node {node} UID mismatch: expected {owner.get('uid')} got {req.node_uid}")
    if spec.get("serviceAccountName"):
        return Refusal(f'node "{node}" can not create pods that reference a service account')
    for kind, found in (("secrets", _references(spec, "secret")), ("configmaps", _references(spec, "configMap"))):
        if any(True for _ in found):
            return Refusal(f'node "{node}" can not create pods that reference {kind}')
    volumes = [v for v in _list(spec, "volumes") if isinstance(v, Mapping)]
    if any("clusterTrustBundle" in src for v in volumes for src in _list(_dict(v, "projected"), "sources")
           if isinstance(src, Mapping)):
        return Refusal(f'node "{node}" can not create pods that reference clustertrustbundles')
    if any(v.get("persistentVolumeClaim") is not None for v in volumes):
        return Refusal(f'node "{node}" can not create pods that reference persistentvolumeclaims')
    return None


_SECRET_VOLUME_REFS = (("secret", "secretName"), ("azureFile", "secretName"), ("cephfs", "secretRef"),
                       ("cinder", "secretRef"), ("flexVolume", "secretRef"), ("iscsi", "secretRef"),
                       ("rbd", "secretRef"), ("scaleIO", "secretRef"), ("storageos", "secretRef"),
                       ("csi", "nodePublishSecretRef"))


def _references(spec: Mapping[str, Any], what: str) -> Iterator[object]:
    """Every secret (what="secret") or configmap ("configMap") the pod names (podutil's visitors)."""
    containers = [c for kind in ("initContainers", "containers", "ephemeralContainers")
                  for c in _list(spec, kind) if isinstance(c, Mapping)]
    ref_key = "secretKeyRef" if what == "secret" else "configMapKeyRef"
    from_key = "secretRef" if what == "secret" else "configMapRef"
    for c in containers:
        for env in _list(c, "env"):
            if isinstance(env, Mapping) and _dict(_dict(env, "valueFrom"), ref_key):
                yield env
        for env in _list(c, "envFrom"):
            if isinstance(env, Mapping) and _dict(env, from_key):
                yield env
    volumes = [v for v in _list(spec, "volumes") if isinstance(v, Mapping)]
    if what == "secret":
        yield from (s for s in _list(spec, "imagePullSecrets") if isinstance(s, Mapping) and s.get("name"))
        yield from (v for v in volumes for kind, key in _SECRET_VOLUME_REFS if _dict(v, kind).get(key))
    else:
        yield from (v for v in volumes if _dict(v, "configMap").get("name"))
    for v in volumes:
        yield from (s for s in _list(_dict(v, "projected"), "sources") if isinstance(s, Mapping) and s.get(what))


def _pod_status(node: str, req: NodeRequest) -> Refusal | None:
    if req.operation != "UPDATE":
        return Refusal(f'unexpected operation "{req.operation}"')
    old, new = req.old or {}, req.obj or {}
    if _dict(old, "spec").get("nodeName") != node:
        return Refusal(f'node "{node}" can only update pod status for pods with spec.nodeName set to itself')
    if dict(_dict(_dict(old, "metadata"), "labels")) != dict(_dict(_dict(new, "metadata"), "labels")):
        return Refusal(f'node "{node}" cannot update labels through pod status')
    if _claims(old) != _claims(new):
        return Refusal(f'node "{node}" cannot update resource claim statues')
    return None


def _claims(pod: Mapping[str, Any]) -> list[tuple[object, object]]:
    return [(c.get("name"), c.get("resourceClaimName")) for c in _list(_dict(pod, "status"), "resourceClaimStatuses")
            if isinstance(c, Mapping)]


def _pod_eviction(node: str, req: NodeRequest) -> Refusal | None:
    if req.operation != "CREATE":
        return Refusal(f"unexpected operation {req.operation}")
    if req.old is None:
        return Refusal(f'pods "{req.name}" not found', not_found=True)
    if _dict(req.old, "spec").get("nodeName") != node:
        return Refusal(f"node {node} can only evict pods with spec.nodeName set to itself")
    return None


def _token(node: str, req: NodeRequest) -> Refusal | None:
    """A node's TokenRequest must be bound to a pod running on it (`old`: that pod as stored),
    so a node cannot mint tokens of accounts its pods do not run as, nor outlive them."""
    ref = _dict(_dict(req.obj, "spec"), "boundObjectRef")
    if ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod" or not ref.get("name"):
        return Refusal("node requested token not bound to a pod")
    if not ref.get("uid"):
        return Refusal("node requested token with a pod binding without a uid")
    if req.old is None:
        return Refusal(f'pods "{ref["name"]}" not found', not_found=True)
    if ref["uid"] != _dict(req.old, "metadata").get("uid"):
        return Refusal(f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                       "The object might have been deleted and then recreated")
    if _dict(req.old, "spec").get("nodeName") != node:
        return Refusal("node requested token bound to a pod scheduled on a different node")
    return None


def _node(node: str, req: NodeRequest) -> Refusal | None:
    requested = _name(req)
    if requested != node:
        return Refusal(f'node "{node}" is not allowed to modify node "{requested}"')
    new_spec = _dict(req.obj, "spec")
    new_labels = _dict(_dict(req.obj, "metadata"), "labels")
    if req.operation == "CREATE":
        if new_spec.get("configSource") is not None:
            return Refusal(f'node "{node}" is not allowed to create pods with a non-nil configSource')
        if bad := forbidden_labels(new_labels, {}):
            return Refusal(f'node "{node}" is not allowed to set the following labels: {", ".join(bad)}')
    elif req.operation == "UPDATE":
        old_spec = _dict(req.old, "spec")
        if new_spec.get("configSource") is not None and new_spec.get("configSource") != old_spec.get("configSource"):
            return Refusal(f'node "{node}" is not allowed to update configSource to a new non-nil configSource')
        if (new_spec.get("taints") or []) != (old_spec.get("taints") or []):
            return Refusal(f'node "{node}" is not allowed to modify taints')
        if bad := forbidden_labels(new_labels, _dict(_dict(req.old, "metadata"), "labels")):
            return Refusal(f"is not allowed to modify labels: {', '.join(bad)}")
    return None
