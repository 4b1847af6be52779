"""Well-known names both daemons read or write: label and annotation keys, node taint keys, and
nodeagent's own API version, node condition types. Kubernetes keeps them in k8s.io/api/core/v1 (well_known_labels.go,
well_known_taints.go, annotation_key_constants.go); one definition here, so the agent writing a
key and the control plane reading it cannot drift apart."""

from __future__ import annotations

NODEAGENT_API_VERSION = "nodeagent.io/v1alpha1"  # the config files and the agent's own objects

# labels
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_OS = "kubernetes.io/os"
LABEL_ARCH = "kubernetes.io/arch"

# annotations
CONFIG_SOURCE = "kubernetes.io/config.source"  # where a pod came from: "api", "file", ...
CONFIG_MIRROR = "kubernetes.io/config.mirror"
CONFIG_HASH = "kubernetes.io/config.hash"
API_SERVER_SOURCE = "api"
FILE_SOURCE = "file"
API_URL = "nodeagent.io/api-url"  # on a Node: where the control plane reaches its agent
SERVER_UID = "nodeagent.io/server-uid"  # on an agent's pod: started for the control plane's pod of this uid
MANIFEST_PATH = "nodeagent.io/manifest-path"  # on a broken static pod's list entry: its file
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # kubectl's client-side apply

# pod condition types (the control plane sets them)
POD_SCHEDULED = "PodScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"  # its reason on a pod the node agent evicted

# node condition types (the agent reports them; the control plane taints nodes by them)
NODE_READY = "Ready"
NODE_MEMORY_PRESSURE = "MemoryPressure"
NODE_DISK_PRESSURE = "DiskPressure"
NODE_PID_PRESSURE = "PIDPressure"
PRESSURE_CONDITIONS = (NODE_MEMORY_PRESSURE, NODE_DISK_PRESSURE, NODE_PID_PRESSURE)

# node taints (keys; the control plane sets them from the node's conditions)
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
TAINT_DISK_PRESSURE = "node.kubernetes.io/disk-pressure"
TAINT_PID_PRESSURE = "node.kubernetes.io/pid-pressure"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NETWORK_UNAVAILABLE = "node.kubernetes.io/network-unavailable"
