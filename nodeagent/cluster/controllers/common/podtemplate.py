"""The pod a controller creates from its template (controller.GetPodFromTemplate)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.meta import name, namespace

Obj = Mapping[str, Any]


def pod_from_template(
    template: Obj, owner: Obj, controller_ref: Mapping[str, Any] | None, generate_name: str | None = None
) -> dict[str, Any]:
    """controller.GetPodFromTemplate: labels, annotations and finalizers of the template, the
    owner's name plus '-' as generateName, the controller reference, a copy of the spec."""
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {"generateName": generate_name or f"{name(owner)}-", "namespace": namespace(owner)}
    if tmeta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    if controller_ref is not None:
        meta["ownerReferences"] = [dict(controller_ref)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": copy.deepcopy(dict(template.get("spec") or {})),
    }
