"""What every model of a Kubernetes object is built from: the frozen camelCase base model, the
field types shared by several kinds (validated strings, int32, IntOrString ports), and the dump to
a Kubernetes-shaped dict.

Defaulting and what is written back: a field the manifest left out takes its Kubernetes default
in the model (so code reads `probe.period_seconds`, never a None), but the models added for issue
11 (probes, lifecycle handlers, env sources, termination messages) list those fields in
`_written_when_set`: they are dumped only when the manifest set them, so a manifest reads back as
written and the shape of `to_dict()` the API and checkpoints already serve does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from nodeagent.core.names import (
    env_var_name_errors,
    invalid,
    quote,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_uid,
)
from nodeagent.core.quantity import Quantity


class KubeModel(BaseModel):
    """Frozen, unknown fields forbidden, camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel)

    # Defaulted fields written back only when the manifest set them (see the module docstring).
    _written_when_set: ClassVar[frozenset[str]] = frozenset()

    def omitted_fields(self) -> frozenset[str]:
        """Fields `dump` leaves out of this object."""
        return self._written_when_set - self.model_fields_set


def checked(check: Callable[[str], None]) -> AfterValidator:
    def run(value: str) -> str:
        check(value)
        return value

    return AfterValidator(run)


def one_of(*allowed: str) -> BeforeValidator:
    """Kubernetes' NotSupported error instead of pydantic's literal message."""

    def run(value: object) -> object:
        if not isinstance(value, str) or value not in allowed:
            raise PydanticCustomError(
                "not_supported",
                "Unsupported value: {value}: supported values: {supported}",
                {"value": quote(value), "supported": ", ".join(quote(a) for a in allowed)},
            )
        return value

    return BeforeValidator(run)


def zero_means(default: int) -> BeforeValidator:
    """Kubernetes defaulting of probe timings: an unset *or zero* value takes the default."""

    def run(value: object) -> object:
        return default if value == 0 and type(value) is int else value

    return BeforeValidator(run)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("invalid", "Invalid value: {v}: must not contain NUL", {"v": quote(value)})
    return value


def _env_name(value: str) -> str:
    errs = env_var_name_errors(value)
    if errs:
        raise PydanticCustomError("invalid", "{m}", {"m": invalid(value, "; ".join(errs))})
    return value


def _empty_to_none(value: object) -> object:
    return None if value == {} else value


Subdomain = Annotated[str, checked(validate_dns1123_subdomain)]
Label = Annotated[str, checked(validate_dns1123_label)]
Uid = Annotated[str, checked(validate_uid)]
Text = Annotated[str, AfterValidator(_no_nul)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Int32 = Annotated[int, Field(strict=True, ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]
UserId = Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)]
Opaque = Annotated[dict[str, Any] | None, BeforeValidator(_empty_to_none)]
# An IntOrString (a port by number or by name); "8080" is a name, as in Kubernetes.
IntOrString = Annotated[int, Field(strict=True)] | str


def dump(obj: object) -> object:
    """Kubernetes-shaped camelCase data: quantities as canonical strings, no None or empties."""
    if isinstance(obj, BaseModel):
        out: dict[str, object] = {}
        omitted = obj.omitted_fields() if isinstance(obj, KubeModel) else frozenset()
        for name, field in type(obj).model_fields.items():
            if name in omitted:
                continue
            value = getattr(obj, name)
            if value is None or (isinstance(value, (list, dict)) and not value):
                continue
            if isinstance(value, BaseModel) and value == field.default:
                continue  # e.g. resources: {} (parsing it back gives the same default)
            out[field.alias or name] = dump(value)
        return out
    if isinstance(obj, list):
        return [dump(v) for v in obj]
    if isinstance(obj, dict):
        return {k: dump(v) for k, v in obj.items()}
    if isinstance(obj, Quantity):
        return str(obj)
    if isinstance(obj, datetime):
        if obj.tzinfo is not None and obj.utcoffset() == UTC.utcoffset(None):
            return obj.replace(tzinfo=None).isoformat() + "Z"
        return obj.isoformat()
    return obj
