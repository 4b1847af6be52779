"""SelfSubjectReview (`authentication.k8s.io/v1`, `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`):
who the server thinks the caller is, what `kubectl auth whoami` asks. Create only, never stored; the
answer is the auth room's `self_subject_review` of the authenticated user (its username, uid, groups
and extra). Without authentication (plain HTTP on loopback) the caller is anonymous, as a
kube-apiserver with anonymous access names it."""

from __future__ import annotations

from typing import Any, ClassVar

from nodeagent.cluster.auth.reviews import self_subject_review
from nodeagent.cluster.auth.user import ALL_UNAUTHENTICATED, ANONYMOUS, UserInfo
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.kinds.reviews import ReviewStore
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.strategy import Obj, Strategy
from nodeagent.core.clock import Clock

GROUP = "authentication.k8s.io"


class SelfSubjectReviewStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(GROUP, "v1", "SelfSubjectReview", "selfsubjectreviews",
                                                "selfsubjectreview", False, verbs=("create",))


class SelfSubjectReviewStore(ReviewStore):
    """The `create` of a SelfSubjectReview: the body's content is ignored (upstream reads nothing of
    it), the status is the requesting user."""

    def __init__(self, registry: Registry, clock: Clock) -> None:
        super().__init__(SelfSubjectReviewStrategy(), registry.authorizer)
        self.clock = clock

    async def create(self, namespace: str | None, body: Any, ctx: Context) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a SelfSubjectReview object")
        user = ctx.principal if isinstance(ctx.principal, UserInfo) else \
            UserInfo(ctx.user or ANONYMOUS, groups=ctx.groups or (ALL_UNAUTHENTICATED,))
        return self_subject_review(user, self.clock.wall())


def add_self_subject_review(registry: Registry, clock: Clock) -> None:
    """Serve selfsubjectreviews (in discovery under authentication.k8s.io/v1)."""
    store = SelfSubjectReviewStore(registry, clock)
    registry.catalog.add(store.info)
    registry.reviews[(store.info.group, store.info.version, store.info.plural)] = store
