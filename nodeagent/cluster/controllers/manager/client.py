"""What the controller-manager needs of the API, as protocols: the control plane hands it a client
over its registry (in-process calls as `system:kube-controller-manager`, admission applied), so
this package imports no layer above the controllers. Errors are `ApiError` carrying the Status
code and reason the registry answered."""

from __future__ import annotations

from typing import Any, Protocol

Obj = dict[str, Any]
USER = "system:kube-controller-manager"
FIELD_MANAGER = "kube-controller-manager"


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message = code, reason, message

    @property
    def not_found(self) -> bool:
        return self.code == 404

    @property
    def conflict(self) -> bool:
        return self.code == 409 and self.reason == "Conflict"

    @property
    def already_exists(self) -> bool:
        return self.code == 409 and self.reason == "AlreadyExists"


class Resource(Protocol):
    async def get(self, namespace: str, name: str) -> Obj: ...

    async def create(self, namespace: str, obj: Obj) -> Obj: ...

    async def update(self, namespace: str, obj: Obj, subresource: str = "") -> Obj: ...

    async def patch(
        self, namespace: str, name: str, patch: Obj, patch_type: str, subresource: str = ""
    ) -> Obj: ...

    async def delete(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> None: ...


class Client(Protocol):
    def resource(self, api_version: str, kind: str) -> Resource:
        """The resource serving this kind (KeyError when none does)."""
        ...

    def namespaced(self, api_version: str, kind: str) -> bool | None:
        """The REST mapper: whether the kind is namespaced, None when it is not served."""
        ...


class Recorder(Protocol):
    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None: ...
