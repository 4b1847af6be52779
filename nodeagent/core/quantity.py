"""Kubernetes resource quantities ("100m", "1.5Gi", "1e3"), with apimachinery's semantics.

Why exact: requests are summed, compared and subtracted (allocatable, admission, eviction), and a
float would make "0.1 + 0.2 cpu" disagree with the API server. A Quantity is an integer count of
nano-units plus the suffix family it prints in; Python ints do not overflow.

Behaviour follows k8s.io/apimachinery pkg/api/resource (ParseQuantity, CanonicalizeBytes, Add, Sub,
Value, MilliValue):
- grammar: [+-]? (digits | digits. | .digits | digits.digits) suffix, suffix one of
  n u m "" k M G T P E (DecimalSI), Ki Mi Gi Ti Pi Ei (BinarySI), or e/E + integer (DecimalExponent);
- anything finer than 1n rounds away from zero to the next nano ("0.9n" -> 1n, "-0.9n" -> -1n);
- a BinarySI value is capped (in magnitude) at 2^63-1 when parsed; decimal values are not capped;
- a parsed BinarySI value between 0 and 1 becomes DecimalSI;
- printing: the largest exponent (a multiple of 3) that shows no fractional digits; BinarySI prints a
  whole number of bytes >= 1024 with the largest binary suffix and falls back to DecimalSI otherwise;
  DecimalSI beyond E prints "e<exp>"; zero prints "0".
Deliberate differences, each where apimachinery is buggy or unbounded:
- the scanner there accepts some digit-less numbers ("-", ".", "Mi" parse as 0, yet "Pi" fails);
  we follow its documented grammar, which needs a digit;
- BinarySI beyond Ei keeps the Ei suffix ("1024Ei") instead of dropping the exponent;
- to bound work, a mantissa may have at most 1000 significant digits and a decimal value must be
  below 10^1000 in magnitude (apimachinery would build numbers of any size);
- value() and milli_value() saturate at the int64 bounds (apimachinery's int64 path does; its
  big-decimal path overflows, which it documents as undefined).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, GetCoreSchemaHandler, GetJsonSchemaHandler, PlainSerializer
from pydantic_core import core_schema

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]
FORMATS: tuple[str, ...] = ("DecimalSI", "BinarySI", "DecimalExponent")

NANO = 10**9
MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)
MAX_DIGITS = 1000  # significant digits accepted in a mantissa
MAX_DECIMAL_EXP = 1000  # a value must be below 10**MAX_DECIMAL_EXP in magnitude
_MAX_NANOS = 10 ** (MAX_DECIMAL_EXP + 9)

_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXP_TO_DECIMAL_SUFFIX = {e: s for s, e in _DECIMAL_SUFFIX.items()}
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>[numkMGTPE]|[KMGTPE]i|[eE](?P<exp>[+-]?[0-9]+))?",
    re.ASCII,
)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)


def _ceil_div(num: int, den: int) -> int:
    """ceil(num / den) for num >= 0, den > 0."""
    return -(-num // den)


def _away_from_zero_div(nanos: int, unit: int) -> int:
    """nanos / unit rounded away from zero, as apimachinery's int64 path does."""
    magnitude = _ceil_div(abs(nanos), unit)
    return -magnitude if nanos < 0 else magnitude


def _saturate(value: int) -> int:
    return max(MIN_INT64, min(MAX_INT64, value))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Quantity:
    """An exact quantity: `nanos` nano-units, printed in `format`'s suffix family."""

    nanos: int
    format: Format = "DecimalSI"

    def __post_init__(self) -> None:
        if type(self.nanos) is not int:
            raise TypeError(f"Quantity nanos must be an int, got {self.nanos!r}")
        if self.format not in FORMATS:
            raise ValueError(f"unknown quantity format {self.format!r} (want one of {', '.join(FORMATS)})")
        if abs(self.nanos) >= _MAX_NANOS:
            raise ValueError(f"quantity out of range: magnitude must be below 10^{MAX_DECIMAL_EXP}")

    # --- constructors -------------------------------------------------------------------------
    @classmethod
    def from_value(cls, n: int, fmt: Format = "DecimalSI") -> Quantity:
        """A whole number of units (bytes, cores), like resource.NewQuantity."""
        return cls(_as_int(n) * NANO, fmt)

    @classmethod
    def from_milli(cls, m: int, fmt: Format = "DecimalSI") -> Quantity:
        """A number of milli-units (millicores), like resource.NewMilliQuantity."""
        return cls(_as_int(m) * (NANO // 1000), fmt)

    # --- accessors ----------------------------------------------------------------------------
    def value(self) -> int:
        """Whole units, rounded away from zero, saturated to int64 ("500m" -> 1)."""
        return _saturate(_away_from_zero_div(self.nanos, NANO))

    def milli_value(self) -> int:
        """Milli-units, rounded away from zero, saturated to int64 ("1.5" -> 1500)."""
        return _saturate(_away_from_zero_div(self.nanos, NANO // 1000))

    def as_fraction(self) -> Fraction:
        """The exact value in units, for ratios such as a percentage of capacity."""
        return Fraction(self.nanos, NANO)

    def is_zero(self) -> bool:
        return self.nanos == 0

    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def __bool__(self) -> bool:
        return self.nanos != 0

    # --- arithmetic (format rules follow apimachinery's Add/Sub/Neg/Mul) -------------------------
    def __add__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.nanos + other.nanos, other.format if self.nanos == 0 else self.format)

    def __sub__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.nanos - other.nanos, other.format if self.nanos == 0 else self.format)

    def __neg__(self) -> Quantity:
        return Quantity(-self.nanos, self.format)

    def __pos__(self) -> Quantity:
        return self

    def __abs__(self) -> Quantity:
        return Quantity(abs(self.nanos), self.format)

    def __mul__(self, other: object) -> Quantity:
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return Quantity(self.nanos * other, self.format)

    __rmul__ = __mul__

    # --- comparison: by value, whatever the format --------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos == other.nanos

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos < other.nanos

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos <= other.nanos

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos > other.nanos

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos >= other.nanos

    # --- text ---------------------------------------------------------------------------------
    def __str__(self) -> str:
        return _canonical(self.nanos, self.format)

    def __repr__(self) -> str:
        return f"<Quantity {self} {self.format}>"

    # --- pydantic: a bare `Quantity` field accepts what QuantityField accepts --------------------
    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            coerce_quantity,
            serialization=core_schema.plain_serializer_function_ser_schema(str, return_schema=core_schema.str_schema()),
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {"anyOf": [{"type": "string"}, {"type": "number"}]}


def _as_int(n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"expected an int, got {n!r}")
    return n


def _canonical(nanos: int, fmt: str) -> str:
    """apimachinery's CanonicalizeBytes over an exact nano count."""
    if nanos == 0:
        return "0"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)
    if fmt == "BinarySI" and magnitude >= 1024 * NANO and magnitude % NANO == 0:
        whole, power = magnitude // NANO, 0
        while whole % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
            whole, power = whole // 1024, power + 1
        return f"{sign}{whole}{_BINARY_SUFFIXES[power]}"
    digits = str(magnitude)
    mantissa = digits.rstrip("0")
    exponent = -9 + len(digits) - len(mantissa)
    pad = exponent % 3  # lower the exponent to a multiple of 3
    mantissa, exponent = mantissa + "0" * pad, exponent - pad
    if fmt != "DecimalExponent" and exponent in _EXP_TO_DECIMAL_SUFFIX:
        suffix = _EXP_TO_DECIMAL_SUFFIX[exponent]
    else:
        suffix = f"e{exponent}" if exponent else ""
    return f"{sign}{mantissa}{suffix}"


def parse_quantity(text: str) -> Quantity:
    """Parse a quantity string exactly as the API server would; ValueError names the text."""
    if not isinstance(text, str):
        raise ValueError(f"quantity must be a string, got {text!r}")
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        number = _NUMBER.match(text)
        why = f"unknown suffix {text[number.end():]!r}" if number else "does not start with a number"
        raise ValueError(
            f"invalid quantity {text!r}: {why}; want [+-]<number><suffix>, suffix one of "
            f"n u m k M G T P E, Ki Mi Gi Ti Pi Ei, e<exponent>"
        )
    frac = match["frac"] or ""
    suffix = match["suffix"] or ""
    fmt: Format
    if match["exp"] is not None:
        fmt, binary, exp10 = "DecimalExponent", 0, _exponent(text, match["exp"])
    elif suffix in _BINARY_SUFFIX:
        fmt, binary, exp10 = "BinarySI", _BINARY_SUFFIX[suffix], 0
    else:
        fmt, binary, exp10 = "DecimalSI", 0, _DECIMAL_SUFFIX[suffix]
    digits = (match["int"] + frac).lstrip("0")
    exp10 -= len(frac)
    stripped = digits.rstrip("0")
    exp10 += len(digits) - len(stripped)  # trailing zeros move into the exponent
    if not stripped:
        return Quantity(0, fmt)
    if len(stripped) > MAX_DIGITS:
        raise ValueError(f"invalid quantity {text!r}: more than {MAX_DIGITS} significant digits")
    nanos = _to_nanos(text, int(stripped), len(stripped), exp10, binary)
    if fmt == "BinarySI":
        nanos = min(nanos, MAX_INT64 * NANO)  # apimachinery caps binary quantities at 2^63-1
        if nanos < NANO:
            fmt = "DecimalSI"  # a fraction of a byte: do not round, print decimal
    return Quantity(-nanos if match["sign"] == "-" else nanos, fmt)


def _exponent(text: str, exp: str) -> int:
    """The e<exp> exponent; like strconv.ParseInt it must fit an int64."""
    if len(exp.lstrip("+-").lstrip("0")) > 19 or not MIN_INT64 <= int(exp) <= MAX_INT64:
        raise ValueError(f"invalid quantity {text!r}: exponent out of range")
    return int(exp)


def _to_nanos(text: str, mantissa: int, ndigits: int, exp10: int, binary: int) -> int:
    """ceil(mantissa * 2^binary * 10^exp10 * 10^9) for a positive mantissa, without huge powers."""
    top = ndigits + exp10  # mantissa * 10^exp10 < 10^top
    if binary:
        if top - 1 >= 19:  # at least 10^19 > 2^63: capped by the caller
            return MAX_INT64 * NANO + 1
        if top + 19 + 9 <= 0:  # below 2^60 * 10^-28 < 1n
            return 1
    else:
        if top - 1 >= MAX_DECIMAL_EXP:
            raise ValueError(f"invalid quantity {text!r}: out of range (must be below 10^{MAX_DECIMAL_EXP})")
        if top + 9 <= 0:  # below 1n
            return 1
    shift = exp10 + 9
    scaled = mantissa << binary
    if shift >= 0:
        return int(scaled * 10**shift)
    return _ceil_div(scaled, 10**-shift)


def coerce_quantity(value: object) -> Quantity:
    """Pydantic input: a Quantity, a quantity string, or a JSON number (as its decimal text)."""
    if isinstance(value, Quantity):
        return value
    if isinstance(value, str):
        return parse_quantity(value)
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}: want a string like '100m' or '1Gi', or a number")
    if isinstance(value, int):
        return Quantity.from_value(value)
    if isinstance(value, float):
        return parse_quantity(repr(value))  # shortest exact decimal text of the float
    raise ValueError(f"invalid quantity {value!r}: want a string like '100m' or '1Gi', or a number")


QuantityField = Annotated[Quantity, BeforeValidator(coerce_quantity), PlainSerializer(str, return_type=str)]
"""Use as a pydantic field type: `requests: dict[str, QuantityField]`; serializes to str(q)."""
