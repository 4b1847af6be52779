"""ConfigMap, Secret and ServiceAccount (core/v1): data for pods; keys are checked as Kubernetes does
(IsConfigMapKey), Secret values are base64, `stringData` is folded into `data` on write, and an
`immutable: true` object keeps its data forever."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.strategy import Obj, Strategy
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError
from nodeagent.core.names import invalid

_KEY = re.compile(r"[-._a-zA-Z0-9]+")
MAX_DATA = 1024 * 1024
SECRET_REDACTED = "<secret contents redacted>"  # kube-apiserver's text in place of a Secret's value


def _key_errors(path: str, key: str) -> list[FieldError]:
    if len(key) > 253:
        return [FieldError(path, invalid(key, "must be no more than 253 characters"))]
    if not _KEY.fullmatch(key):
        return [FieldError(path, invalid(key, "a valid config key must consist of alphanumeric characters, '-', '_' "
                                              "or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for "
                                              "validation is '[-._a-zA-Z0-9]+')"))]
    if key in (".", "..") or key.startswith(".."):
        return [FieldError(path, invalid(key, "must not be '.' or '..' or start with '..'"))]
    return []


def _map_errors(obj: Obj, field: str, *, base64_values: bool, secret: bool = False) -> tuple[list[FieldError], int]:
    """Errors of a data map; a Secret's values are never echoed (the key says what is wrong)."""
    value = obj.get(field)
    if value is None:
        return [], 0
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        shown = SECRET_REDACTED if secret else str(value)[:60]
        return [FieldError(field, invalid(shown, "must be a map of string keys to string values"))], 0
    errs, size = [], 0
    for k, v in value.items():
        errs += _key_errors(f"{field}[{k}]", k)
        if base64_values:
            try:
                size += len(base64.b64decode(v, validate=True))
            except (binascii.Error, ValueError):
                errs.append(FieldError(f"{field}[{k}]", invalid(SECRET_REDACTED, "illegal base64 data")))
        else:
            size += len(v)
    return errs, size


def _immutable_errors(new: Obj, old: Obj, fields: tuple[str, ...]) -> list[FieldError]:
    errs = []
    if old.get("immutable") is True:
        if new.get("immutable") is not True:
            errs.append(FieldError("immutable", "Forbidden: field is immutable when `immutable` is set"))
        for f in fields:
            if new.get(f) != old.get(f):
                errs.append(FieldError(f, "Forbidden: field is immutable when `immutable` is set"))
    return errs


class ConfigMapStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo("", "v1", "ConfigMap", "configmaps", "configmap", True,
                                                short_names=("cm",))
    columns = (NAME, Column("Data", type="integer", description="Data contains the configuration data."), AGE)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs, size = _map_errors(obj, "data", base64_values=False)
        more, bsize = _map_errors(obj, "binaryData", base64_values=True)
        errs += more
        if not errs and set(obj.get("data") or {}) & set(obj.get("binaryData") or {}):
            errs.append(FieldError("data", "Invalid value: duplicate of key present in binaryData"))
        if size + bsize > MAX_DATA:
            errs.append(FieldError("", f"Too long: must have at most {MAX_DATA} bytes"))
        if "immutable" in obj and obj["immutable"] is not None and not isinstance(obj["immutable"], bool):
            errs.append(FieldError("immutable", invalid(obj["immutable"], "must be a boolean")))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return self.validate(new) + _immutable_errors(new, old, ("data", "binaryData"))

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        n = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
        return [obj["metadata"].get("name", ""), n, age(obj, now_wall)]


class SecretStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo("", "v1", "Secret", "secrets", "secret", True)
    field_labels = frozenset({"type"})
    columns = (NAME, Column("Type", description="Used to facilitate programmatic handling of secret data."),
               Column("Data", type="integer", description="Data contains the secret data."), AGE)

    def default(self, obj: Obj) -> None:
        obj.setdefault("type", "Opaque")
        string_data = obj.get("stringData")
        if isinstance(string_data, dict) and all(isinstance(v, str) for v in string_data.values()):
            data = obj.get("data")
            if data is None:
                data = obj["data"] = {}
            if isinstance(data, dict):
                for k, v in string_data.items():
                    data[k] = base64.b64encode(v.encode()).decode()
                del obj["stringData"]

    def validate(self, obj: Obj) -> list[FieldError]:
        errs, size = _map_errors(obj, "data", base64_values=True, secret=True)
        more, _ = _map_errors(obj, "stringData", base64_values=False, secret=True)
        errs += more
        if not isinstance(obj.get("type"), str) or not obj.get("type"):
            errs.append(FieldError("type", "Required value"))
        if size > MAX_DATA:
            errs.append(FieldError("data", f"Too long: must have at most {MAX_DATA} bytes"))
        if "immutable" in obj and obj["immutable"] is not None and not isinstance(obj["immutable"], bool):
            errs.append(FieldError("immutable", invalid(obj["immutable"], "must be a boolean")))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs = self.validate(new) + _immutable_errors(new, old, ("data",))
        if new.get("type") != old.get("type"):
            errs.append(FieldError("type", "Invalid value: field is immutable"))
        return errs

    def fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        return {**super().fields(obj), "type": str(obj.get("type") or "")}

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        return [obj["metadata"].get("name", ""), obj.get("type", ""), len(obj.get("data") or {}), age(obj, now_wall)]


class ServiceAccountStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount",
                                                True, short_names=("sa",))
    columns = (NAME, Column("Secrets", type="integer", description="Secrets is a list of the secrets in the same "
                                                                   "namespace that pods running using this "
                                                                   "ServiceAccount are allowed to use."), AGE)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = []
        for f in ("secrets", "imagePullSecrets"):
            v = obj.get(f)
            if v is not None and not (isinstance(v, list) and all(isinstance(x, dict) for x in v)):
                errs.append(FieldError(f, invalid(str(v)[:60], "must be a list of object references")))
        auto = obj.get("automountServiceAccountToken")
        if auto is not None and not isinstance(auto, bool):
            errs.append(FieldError("automountServiceAccountToken", invalid(auto, "must be a boolean")))
        return errs

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        return [obj["metadata"].get("name", ""), len(obj.get("secrets") or []), age(obj, now_wall)]
