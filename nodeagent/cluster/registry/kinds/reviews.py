"""SelfSubjectAccessReview and SubjectAccessReview (authorization.k8s.io/v1): create only, never
stored; the answer is the authorizer's (what `kubectl auth can-i` asks)."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from nodeagent.cluster.auth.attributes import Attributes, Verdict
from nodeagent.cluster.auth.user import UserInfo
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.authorization import Authorizer
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.strategy import Obj, Strategy
from nodeagent.core.errors import FieldError

GROUP = "authorization.k8s.io"


class SelfSubjectAccessReviewStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(GROUP, "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews",
                                                "selfsubjectaccessreview", False, verbs=("create",))


class SubjectAccessReviewStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(GROUP, "v1", "SubjectAccessReview", "subjectaccessreviews",
                                                "subjectaccessreview", False, verbs=("create",))


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


class ReviewStore:
    """The `create` of an access review: the spec's attributes, the authorizer's decision as status."""

    def __init__(self, strategy: Strategy, authorizer: Authorizer) -> None:
        self.strategy, self.info, self.authorizer = strategy, strategy.info, authorizer

    async def create(self, namespace: str | None, body: Any, ctx: Context) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of the request must be a {self.info.kind} object")
        obj = copy.deepcopy(body)
        obj["apiVersion"], obj["kind"] = self.info.api_version, self.info.kind
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise errors.invalid(self.info.kind, GROUP, "", [FieldError("spec", "Required value")])
        ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if (ra is None) == (nra is None) or not isinstance(ra or nra, dict):
            raise errors.invalid(self.info.kind, GROUP, "", [FieldError(
                "spec.resourceAttributes", "Invalid value: exactly one of nonResourceAttributes or resourceAttributes "
                                           "must be specified")])
        if self.info.kind == "SubjectAccessReview":
            user = _str(spec.get("user"))
            groups = tuple(g for g in spec.get("groups") or () if isinstance(g, str))
            if not user and not groups:
                raise errors.invalid(self.info.kind, GROUP, "", [FieldError(
                    "spec.user", "Invalid value: at least one of user or group must be specified")])
        else:
            user, groups = ctx.user, ctx.groups
        who = UserInfo(user, groups=groups)
        if isinstance(ra, dict):
            attrs = Attributes(who, _str(ra.get("verb")), namespace=_str(ra.get("namespace")),
                               api_group=_str(ra.get("group")), resource=_str(ra.get("resource")),
                               subresource=_str(ra.get("subresource")), name=_str(ra.get("name")))
        else:
            assert isinstance(nra, dict)
            attrs = Attributes(who, _str(nra.get("verb")), resource_request=False, path=_str(nra.get("path")))
        decision = self.authorizer.authorize(attrs)
        status: dict[str, Any] = {"allowed": decision.allowed}
        if decision.verdict is Verdict.DENY:
            status["denied"] = True
        if decision.reason:
            status["reason"] = decision.reason
        obj["status"] = status
        return obj
