"""The Node authorizer: what an agent (`system:node:<name>` in `system:nodes`) may do, as
kube-apiserver's, with AuthorizeNodeWithSelectors on (the upstream default since 1.32):

- nodes: create; get/list/watch only its own Node (list and watch pinned to it with
  fieldSelector metadata.name=<node>); update/patch it and its status;
- pods: get those bound to it; list/watch with fieldSelector spec.nodeName=<node>; create and
  delete (mirror pods: NodeRestriction checks the body); update/patch status and create
  evictions of pods bound to it;
- secrets, configmaps, persistentvolumeclaims (and their status), persistentvolumes, resource
  claims and serviceaccounts/token: only objects its pods reference (the graph below);
- leases in kube-node-lease: get/update/patch/delete its own (create: NodeRestriction);
  csinodes the same; events and everything else: the system:node rules.

Where upstream leaves a name check to the NodeRestriction admission plugin although the name
is known at authorization (update/patch of a Node or its status; pod status, delete and
eviction), it is checked here, with NodeRestriction's wording: an agent can touch nothing of
another node. auth/noderestriction.py is the admission half, which sees the objects (the name a
create's body carries, labels, taints, mirror pods).

The graph is fed by the server from its watches of pods and persistentvolumeclaims, as the
upstream graph populator: each pod bound to a node links the node to the pod and to every
secret, configmap, claim, resource claim and service account the pod references.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from nodeagent.cluster.auth.attributes import ALLOW, NO_OPINION, Attributes, AuthorizationDecision, Verdict
from nodeagent.cluster.auth.rbac.bootstrap import node_rules
from nodeagent.cluster.auth.rbac.rules import parse_rules, rules_allow
from nodeagent.cluster.auth.requestinfo import exact_field_value
from nodeagent.cluster.auth.user import node_identity

NODE_LEASE_NAMESPACE = "kube-node-lease"

SECRET, CONFIGMAP, PVC, PV, SERVICE_ACCOUNT, RESOURCE_CLAIM = (
    "secret", "configmap", "persistentvolumeclaim", "persistentvolume", "serviceaccount", "resourceclaim")

Ref = tuple[str, str, str]  # (type, namespace, name)


def _dict(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


def _deny(reason: str = "") -> AuthorizationDecision:
    return AuthorizationDecision(Verdict.NO_OPINION, reason)


def _names(items: object, *path: str) -> Iterator[str]:
    """Strings at `path` inside each dict of a list (missing levels are skipped)."""
    if not isinstance(items, list):
        return
    for item in items:
        cur: object = item
        for key in path:
            cur = cur.get(key) if isinstance(cur, Mapping) else None
        if isinstance(cur, str) and cur:
            yield cur


_SECRET_VOLUMES = (("secret", "secretName"), ("azureFile", "secretName"), ("cephfs", "secretRef", "name"),
                   ("cinder", "secretRef", "name"), ("flexVolume", "secretRef", "name"),
                   ("iscsi", "secretRef", "name"), ("rbd", "secretRef", "name"), ("scaleIO", "secretRef", "name"),
                   ("storageos", "secretRef", "name"), ("csi", "nodePublishSecretRef", "name"))


def pod_references(pod: Mapping[str, Any]) -> set[Ref]:
    """Everything a pod references that its node may read (upstream graph_populator AddPod)."""
    meta, spec, status = _dict(pod, "metadata"), _dict(pod, "spec"), _dict(pod, "status")
    ns = str(meta.get("namespace") or "default")
    refs: set[Ref] = set()
    sa = spec.get("serviceAccountName") or "default"
    if isinstance(sa, str):
        refs.add((SERVICE_ACCOUNT, ns, sa))
    refs.update((SECRET, ns, n) for n in _names(spec.get("imagePullSecrets"), "name"))
    containers = [c for kind in ("initContainers", "containers", "ephemeralContainers")
                  for c in _list(spec, kind) if isinstance(c, Mapping)]
    env = [e for c in containers for e in _list(c, "env")]
    env_from = [e for c in containers for e in _list(c, "envFrom")]
    refs.update((SECRET, ns, n) for n in _names(env, "valueFrom", "secretKeyRef", "name"))
    refs.update((CONFIGMAP, ns, n) for n in _names(env, "valueFrom", "configMapKeyRef", "name"))
    refs.update((SECRET, ns, n) for n in _names(env_from, "secretRef", "name"))
    refs.update((CONFIGMAP, ns, n) for n in _names(env_from, "configMapRef", "name"))
    volumes = [v for v in _list(spec, "volumes") if isinstance(v, Mapping)]
    for path in _SECRET_VOLUMES:
        refs.update((SECRET, ns, n) for n in _names(volumes, *path))
    refs.update((CONFIGMAP, ns, n) for n in _names(volumes, "configMap", "name"))
    sources = [src for v in volumes for src in _list(_dict(v, "projected"), "sources")]
    refs.update((SECRET, ns, n) for n in _names(sources, "secret", "name"))
    refs.update((CONFIGMAP, ns, n) for n in _names(sources, "configMap", "name"))
    refs.update((PVC, ns, n) for n in _names(volumes, "persistentVolumeClaim", "claimName"))
    for v in volumes:
        if v.get("ephemeral") is not None and isinstance(v.get("name"), str):
            refs.add((PVC, ns, f"{meta.get('name')}-{v['name']}"))
    refs.update((RESOURCE_CLAIM, ns, n) for n in _names(status.get("resourceClaimStatuses"), "resourceClaimName"))
    return refs


class NodeGraph:
    """Which node each bound pod runs on and what those pods reference (kept by watch events)."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], tuple[str, str, frozenset[Ref]]] = {}  # -> (node, uid, refs)
        self._refs: dict[Ref, Counter[str]] = {}
        self._pvc_volume: dict[tuple[str, str], str] = {}
        self._pv_claims: dict[str, set[tuple[str, str]]] = {}

    def put_pod(self, pod: Mapping[str, Any]) -> None:
        meta, spec = _dict(pod, "metadata"), _dict(pod, "spec")
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        self.delete_pod(*key)
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node or not key[1]:
            return  # unbound: no node may see it yet
        refs = frozenset(pod_references(pod))
        self._pods[key] = (node, str(meta.get("uid") or ""), refs)
        for r in refs:
            self._refs.setdefault(r, Counter())[node] += 1

    def delete_pod(self, namespace: str, name: str) -> None:
        old = self._pods.pop((namespace, name), None)
        if old is None:
            return
        node, _, refs = old
        for r in refs:
            c = self._refs[r]
            c[node] -= 1
            if c[node] <= 0:
                del c[node]
            if not c:
                del self._refs[r]

    def put_claim(self, pvc: Mapping[str, Any]) -> None:
        meta = _dict(pvc, "metadata")
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self.delete_claim(*key)
        volume = _dict(pvc, "spec").get("volumeName")
        if isinstance(volume, str) and volume:
            self._pvc_volume[key] = volume
            self._pv_claims.setdefault(volume, set()).add(key)

    def delete_claim(self, namespace: str, name: str) -> None:
        volume = self._pvc_volume.pop((namespace, name), None)
        if volume is not None:
            claims = self._pv_claims[volume]
            claims.discard((namespace, name))
            if not claims:
                del self._pv_claims[volume]

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """A watch event of a Pod or a PersistentVolumeClaim."""
        kind = obj.get("kind")
        meta = _dict(obj, "metadata")
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        deleted = event_type == "DELETED"
        if kind == "Pod":
            if deleted:
                self.delete_pod(ns or "default", name)
            else:
                self.put_pod(obj)
        elif kind == "PersistentVolumeClaim":
            if deleted:
                self.delete_claim(ns, name)
            else:
                self.put_claim(obj)

    def node_of_pod(self, namespace: str, name: str) -> str | None:
        found = self._pods.get((namespace, name))
        return found[0] if found else None

    def related(self, node: str, kind: str, namespace: str, name: str) -> bool:
        """Whether `node` reaches the object: it runs the pod, or one of its pods references it."""
        if kind == "pod":
            return self.node_of_pod(namespace, name) == node
        if kind == PV:
            return any(self._count(node, (PVC, ns, n)) > 0 for ns, n in self._pv_claims.get(name, ()))
        return self._count(node, (kind, namespace, name)) > 0

    def _count(self, node: str, ref: Ref) -> int:
        counts = self._refs.get(ref)
        return counts[node] if counts is not None else 0


class NodeAuthorizer:
    """The Node authorizer (module docstring). NoOpinion for everyone who is not a node."""

    def __init__(self, graph: NodeGraph) -> None:
        self.graph = graph
        self._rules = parse_rules(node_rules())

    def authorize(self, attrs: Attributes) -> AuthorizationDecision:
        node = node_identity(attrs.user)
        if node is None:
            return NO_OPINION
        if not node:
            return _deny(f'unknown node for user "{attrs.user.name}"')
        if attrs.resource_request:
            g, r = attrs.api_group, attrs.resource
            if g == "":
                if r in ("secrets", "configmaps"):
                    return self._read_namespaced(node, SECRET if r == "secrets" else CONFIGMAP, attrs)
                if r == "persistentvolumeclaims":
                    if attrs.subresource == "status":
                        return self._status_update(node, PVC, attrs)
                    return self._get(node, PVC, attrs)
                if r == "persistentvolumes":
                    return self._get(node, PV, attrs)
                if r == "serviceaccounts":
                    return self._create_token(node, attrs)
                if r == "nodes":
                    return self._node(node, attrs)
                if r == "pods":
                    return self._pod(node, attrs)
            elif g == "resource.k8s.io" and r == "resourceclaims":
                return self._get(node, RESOURCE_CLAIM, attrs)
            elif g == "coordination.k8s.io" and r == "leases":
                return self._lease(node, attrs)
            elif g == "storage.k8s.io" and r == "csinodes":
                return self._csinode(node, attrs)
        return ALLOW if rules_allow(attrs, self._rules) else NO_OPINION

    def _related(self, node: str, kind: str, attrs: Attributes) -> AuthorizationDecision:
        if not attrs.name:
            return _deny("No Object name found")
        if self.graph.related(node, kind, attrs.namespace, attrs.name):
            return ALLOW
        return _deny(f"no relationship found between node '{node}' and this object")

    def _status_update(self, node: str, kind: str, attrs: Attributes) -> AuthorizationDecision:
        if attrs.verb not in ("update", "patch"):
            return _deny("can only get/update/patch this type")
        return self._related(node, kind, attrs)

    def _get(self, node: str, kind: str, attrs: Attributes) -> AuthorizationDecision:
        if attrs.verb != "get":
            return _deny("can only get individual resources of this type")
        if attrs.subresource:
            return _deny("cannot get subresource")
        return self._related(node, kind, attrs)

    def _read_namespaced(self, node: str, kind: str, attrs: Attributes) -> AuthorizationDecision:
        if attrs.verb not in ("get", "list", "watch"):
            return _deny("can only read resources of this type")
        if attrs.subresource:
            return _deny("cannot read subresource")
        if not attrs.namespace:
            return _deny("can only read namespaced object of this type")
        return self._related(node, kind, attrs)

    def _create_token(self, node: str, attrs: Attributes) -> AuthorizationDecision:
        if attrs.verb != "create" or not attrs.name:
            return _deny("can only create tokens for individual service accounts")
        if attrs.subresource != "token":
            return _deny("can only create token subresource of serviceaccount")
        return self._related(node, SERVICE_ACCOUNT, attrs)

    def _lease(self, node: str, attrs: Attributes) -> AuthorizationDecision:
        if attrs.verb not in ("get", "create", "update", "patch", "delete"):
            return _deny("can only get, create, update, patch, or delete a node lease")
        if attrs.namespace != NODE_LEASE_NAMESPACE:
            return _deny(f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
        if attrs.verb != "create" and attrs.name != node:
            return _deny("can only access node lease with the same name as the requesting node")
        return ALLOW

    def _csinode(self, node: str, attrs: Attributes) -> AuthorizationDecision:
        if attrs.verb not in ("get", "create", "update", "patch", "delete"):
            return _deny("can only get, create, update, patch, or delete a CSINode")
        if attrs.subresource:
            return _deny("cannot authorize CSINode subresources")
        if attrs.verb != "create" and attrs.name != node:
            return _deny("can only access CSINode with the same name as the requesting node")
        return ALLOW

    def _node(self, node: str, attrs: Attributes) -> AuthorizationDecision:
        verb, sub = attrs.verb, attrs.subresource
        if sub == "" and verb == "create":
            return ALLOW  # the name is in the body: NodeRestriction
        if (sub == "" and verb in ("update", "patch")) or (sub == "status" and verb in ("update", "patch")):
            if attrs.name == node:
                return ALLOW
            return _deny(f'node "{node}" is not allowed to modify node "{attrs.name}"')
        if sub == "" and verb in ("get", "list", "watch"):
            if attrs.name == node:
                return ALLOW
            if not attrs.name:
                return _deny(f"node '{node}' cannot read all nodes, only its own Node object")
            return _deny(f"node '{node}' cannot read '{attrs.name}', only its own Node object")
        return NO_OPINION

    def _pod(self, node: str, attrs: Attributes) -> AuthorizationDecision:
        verb, sub = attrs.verb, attrs.subresource
        if sub == "":
            if verb == "get":
                return self._get(node, "pod", attrs)
            if verb in ("list", "watch"):
                if exact_field_value(attrs.field_selector, "spec.nodeName") == node:
                    return ALLOW
                if attrs.name:
                    return self._related(node, "pod", attrs)
                return _deny("can only list/watch pods with spec.nodeName field selector")
            if verb == "create":
                return ALLOW  # mirror pods bound to itself: NodeRestriction
            if verb == "delete":
                return self._bound(node, attrs, f'node "{node}" can only delete pods with spec.nodeName set to itself')
        elif sub == "status" and verb in ("update", "patch"):
            return self._bound(node, attrs, f'node "{node}" can only update pod status for pods with spec.nodeName '
                                            "set to itself")
        elif sub == "eviction" and verb == "create":
            return self._bound(node, attrs, f'node "{node}" can only evict pods with spec.nodeName set to itself')
        return NO_OPINION

    def _bound(self, node: str, attrs: Attributes, message: str) -> AuthorizationDecision:
        if attrs.name and self.graph.node_of_pod(attrs.namespace, attrs.name) == node:
            return ALLOW
        return _deny(message)
