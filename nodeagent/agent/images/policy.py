"""imagePullPolicy: Kubernetes' defaulting and the kubelet's pull decision (pure).

Defaulting (pkg/apis/core/v1 SetDefaults_Container): a reference whose tag is `latest`, or that
has neither tag nor digest (so it means `:latest`), gets Always; any other tag, or a digest, gets
IfNotPresent. The decision (kubelet image manager shouldPullImage): Always pulls (a cheap check
of the manifest digest when the image is there), IfNotPresent pulls only when absent, Never never
pulls and an absent image is the container state ErrImageNeverPull.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from nodeagent.agent.images.reference import DEFAULT_TAG, ImageRef
from nodeagent.core.errors import FieldError
from nodeagent.core.names import quote

PullPolicy = Literal["Always", "IfNotPresent", "Never"]
PULL_POLICIES: tuple[PullPolicy, ...] = ("Always", "IfNotPresent", "Never")


class Decision(Enum):
    PULL = "pull"  # fetch it (Always: resolve the tag first; an unchanged digest costs no download)
    USE_PRESENT = "use-present"  # the image is here and the policy does not ask for a check
    NEVER_PULL = "never-pull"  # absent under Never: ErrImageNeverPull


def default_pull_policy(ref: ImageRef) -> PullPolicy:
    """Kubernetes' default for a container whose imagePullPolicy is unset (a digest-only
    reference has no tag: IfNotPresent)."""
    if ref.tag == DEFAULT_TAG:
        return "Always"
    return "IfNotPresent"


def resolve_pull_policy(policy: object, ref: ImageRef, field: str = "imagePullPolicy") -> PullPolicy:
    """The given policy, or the default when unset/empty; FieldError for anything else."""
    if policy is None or policy == "":
        return default_pull_policy(ref)
    if policy not in PULL_POLICIES:
        supported = ", ".join(quote(p) for p in PULL_POLICIES)
        raise FieldError(field, f"Unsupported value: {quote(policy)}: supported values: {supported}")
    return next(p for p in PULL_POLICIES if p == policy)


def decide(policy: PullPolicy, present: bool) -> Decision:
    """What to do for a container about to start, given whether the image is in the store."""
    if policy == "Never":
        return Decision.USE_PRESENT if present else Decision.NEVER_PULL
    if policy == "IfNotPresent" and present:
        return Decision.USE_PRESENT
    return Decision.PULL


__all__ = ["PULL_POLICIES", "Decision", "PullPolicy", "decide", "default_pull_policy", "resolve_pull_policy"]
