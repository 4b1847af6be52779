"""The autoscaling.k8s.io/v1 VPA types' schemas, in the shape of kubernetes-validate's `$defs`.

They are CRDs upstream, so the Kubernetes definitions file does not carry them; these follow the
CRD's openAPIV3Schema (vertical-pod-autoscaler/deploy/vpa-v1-crd-gen.yaml), so `kubectl explain`,
kubectl's client-side validation and the server's field validation (unknown fields) know them.
"""

from __future__ import annotations

from typing import Any

PREFIX = "io.k8s.autoscaler.vertical-pod-autoscaler.pkg.apis.autoscaling.k8s.io.v1."
META = "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1."
QUANTITY = {"$ref": "#/$defs/io.k8s.apimachinery.pkg.api.resource.Quantity"}
GROUP, VERSION = "autoscaling.k8s.io", "v1"


def _s(description: str) -> dict[str, Any]:
    return {"description": description, "type": ["string", "null"]}


def _ref(name: str, description: str = "") -> dict[str, Any]:
    return {"$ref": f"#/$defs/{PREFIX}{name}", "description": description}


def _list(item: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"description": description, "type": ["array", "null"], "items": item}


def _obj(description: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "type": ["object", "null"], "properties": properties}
    if required:
        out["required"] = list(required)
    return out


def _resources(description: str) -> dict[str, Any]:
    return {"description": description, "type": ["object", "null"], "additionalProperties": QUANTITY}


def _top(kind: str, description: str, spec: str, status: str) -> dict[str, Any]:
    out = _obj(description, {
        "apiVersion": {**_s("APIVersion defines the versioned schema of this representation of an object."),
                       "enum": [f"{GROUP}/{VERSION}"]},
        "kind": {**_s("Kind is a string value representing the REST resource this object represents."),
                 "enum": [kind]},
        "metadata": {"$ref": META + "ObjectMeta", "description": "Standard object metadata."},
        "spec": _ref(spec, "Specification of the behavior."),
        "status": _ref(status, "Current information."),
    })
    out["x-kubernetes-group-version-kind"] = [{"group": GROUP, "kind": kind, "version": VERSION}]
    return out


def _list_kind(kind: str) -> dict[str, Any]:
    out = _obj(f"{kind}List is a list of {kind} objects.", {
        "apiVersion": {**_s("APIVersion"), "enum": [f"{GROUP}/{VERSION}"]},
        "kind": {**_s("Kind"), "enum": [f"{kind}List"]},
        "items": {"description": "items", "type": "array", "items": {"$ref": f"#/$defs/{PREFIX}{kind}"}},
        "metadata": {"$ref": META + "ListMeta", "description": "Standard list metadata."},
    }, ("items",))
    out["x-kubernetes-group-version-kind"] = [{"group": GROUP, "kind": f"{kind}List", "version": VERSION}]
    return out


def _histogram() -> dict[str, Any]:
    return _obj("HistogramCheckpoint contains data needed to reconstruct the histogram.", {
        "referenceTimestamp": _s("Reference timestamp for samples collected within this histogram."),
        "bucketWeights": {"description": "Map from bucket index to bucket weight.", "type": ["object", "null"],
                          "additionalProperties": {"type": "integer"}},
        "totalWeight": {"description": "Sum of samples to be used as denominator for weights from BucketWeights.",
                        "type": ["number", "null"]},
    })


def vpa_definitions() -> dict[str, Any]:
    """The raw `$defs` entries of the VPA and checkpoint kinds and their parts."""
    recommendation = _obj("RecommendedContainerResources is the recommendation of resources computed by "
                          "autoscaler for a specific container.", {
                              "containerName": _s("Name of the container."),
                              "target": _resources("Recommended amount of resources."),
                              "lowerBound": _resources("Minimum recommended amount of resources."),
                              "upperBound": _resources("Maximum recommended amount of resources."),
                              "uncappedTarget": _resources("The most recent recommended resources target computed "
                                                           "by the autoscaler for the controlled pods, based only "
                                                           "on actual resource usage, not taking into account the "
                                                           "ContainerResourcePolicy."),
                          }, ("target",))
    condition = _obj("VerticalPodAutoscalerCondition describes the state of a VerticalPodAutoscaler at a certain "
                     "point.", {
                         "type": _s("type describes the current condition"),
                         "status": _s("status is the status of the condition (True, False, Unknown)"),
                         "lastTransitionTime": _s("lastTransitionTime is the last time the condition transitioned "
                                                  "from one status to another"),
                         "reason": _s("reason is the reason for the condition's last transition."),
                         "message": _s("message is a human-readable explanation containing details about the "
                                       "transition"),
                     }, ("status", "type"))
    container_policy = _obj("ContainerResourcePolicy controls how autoscaler computes the recommended resources "
                            "for a specific container.", {
                                "containerName": _s("Name of the container or DefaultContainerResourcePolicy, in "
                                                    "which case the policy is used by the containers that don't "
                                                    "have their own policy specified."),
                                "mode": _s("Whether autoscaler is enabled for the container. The default is Auto."),
                                "minAllowed": _resources("Specifies the minimal amount of resources that will be "
                                                         "recommended for the container."),
                                "maxAllowed": _resources("Specifies the maximum amount of resources that will be "
                                                         "recommended for the container."),
                                "controlledResources": _list({"type": "string"}, "Specifies the type of "
                                                             "recommendations that will be computed (and possibly "
                                                             "applied) by VPA. If not specified, the default of "
                                                             "[ResourceCPU, ResourceMemory] will be used."),
                                "controlledValues": _s("Specifies which resource values should be controlled. "
                                                       "The default is \"RequestsAndLimits\"."),
                            })
    return {
        PREFIX + "VerticalPodAutoscaler": _top("VerticalPodAutoscaler", "VerticalPodAutoscaler is the "
                                               "configuration for a vertical pod autoscaler, which automatically "
                                               "manages pod resources based on historical and real time resource "
                                               "utilization.", "VerticalPodAutoscalerSpec",
                                               "VerticalPodAutoscalerStatus"),
        PREFIX + "VerticalPodAutoscalerList": _list_kind("VerticalPodAutoscaler"),
        PREFIX + "VerticalPodAutoscalerSpec": _obj("VerticalPodAutoscalerSpec is the specification of the "
                                                   "behavior of the autoscaler.", {
            "targetRef": {"$ref": "#/$defs/io.k8s.api.autoscaling.v1.CrossVersionObjectReference",
                          "description": "TargetRef points to the controller managing the set of pods for the "
                                         "autoscaler to control."},
            "updatePolicy": _obj("Describes the rules on how changes are applied to the pods. If not specified, "
                                 "all fields in the `PodUpdatePolicy` are set to their default values.", {
                                     "updateMode": _s("Controls when autoscaler applies changes to the pod "
                                                      "resources. The default is 'Recreate'."),
                                     "minReplicas": {"description": "Minimal number of replicas which need to be "
                                                                    "alive for Updater to attempt pod eviction.",
                                                     "type": ["integer", "null"], "format": "int32"},
                                 }),
            "resourcePolicy": _obj("Controls how the autoscaler computes recommended resources.", {
                "containerPolicies": _list(container_policy, "Per-container resource policies."),
            }),
            "recommenders": _list(_obj("VerticalPodAutoscalerRecommenderSelector points to a specific Vertical "
                                       "Pod Autoscaler recommender.", {"name": _s("Name of the recommender "
                                                                                   "responsible for generating "
                                                                                   "recommendation for this "
                                                                                   "object.")}),
                                  "Recommender responsible for generating recommendation for this object."),
        }, ("targetRef",)),
        PREFIX + "VerticalPodAutoscalerStatus": _obj("VerticalPodAutoscalerStatus describes the runtime state of "
                                                     "the autoscaler.", {
            "recommendation": _obj("The most recently computed amount of resources recommended by the autoscaler "
                                   "for the controlled pods.", {
                                       "containerRecommendations": _list(recommendation, "Resources recommended "
                                                                                         "by the autoscaler for "
                                                                                         "each container."),
                                   }),
            "conditions": _list(condition, "Conditions is the set of conditions required for this autoscaler to "
                                           "scale its target, and indicates whether or not those conditions are "
                                           "met."),
            "observedGeneration": {"description": "The generation observed by the recommender.",
                                   "type": ["integer", "null"], "format": "int64"},
        }),
        PREFIX + "VerticalPodAutoscalerCheckpoint": _top("VerticalPodAutoscalerCheckpoint", "VerticalPodAutoscaler"
                                                         "Checkpoint is the checkpoint of the internal state of VPA "
                                                         "that is used for recovery after recommender's restart.",
                                                         "VerticalPodAutoscalerCheckpointSpec",
                                                         "VerticalPodAutoscalerCheckpointStatus"),
        PREFIX + "VerticalPodAutoscalerCheckpointList": _list_kind("VerticalPodAutoscalerCheckpoint"),
        PREFIX + "VerticalPodAutoscalerCheckpointSpec": _obj("VerticalPodAutoscalerCheckpointSpec is the "
                                                             "specification of the checkpoint object.", {
            "vpaObjectName": _s("Name of the VPA object that stored VerticalPodAutoscalerCheckpoint object."),
            "containerName": _s("Name of the checkpointed container."),
        }),
        PREFIX + "VerticalPodAutoscalerCheckpointStatus": _obj("VerticalPodAutoscalerCheckpointStatus contains "
                                                               "data of the checkpoint.", {
            "lastUpdateTime": _s("The time when the status was last refreshed."),
            "version": _s("Version of the format of the stored data."),
            "cpuHistogram": _histogram(),
            "memoryHistogram": _histogram(),
            "firstSampleStart": _s("Timestamp of the fist sample from the histograms."),
            "lastSampleStart": _s("Timestamp of the last sample from the histograms."),
            "totalSamplesCount": {"description": "Total number of samples in the histograms.",
                                  "type": ["integer", "null"]},
        }),
    }
