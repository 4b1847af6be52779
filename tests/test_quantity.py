"""Quantity semantics, with vectors from apimachinery's pkg/api/resource/quantity_test.go."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from nodeagent.core.quantity import (
    MAX_INT64,
    MIN_INT64,
    NANO,
    Quantity,
    QuantityField,
    parse_quantity,
)

MAX_ALLOWED = MAX_INT64  # apimachinery's maxAllowed


def dec(mantissa: int, exp10: int) -> Fraction:
    """Like decQuantity's value: mantissa * 10^exp10."""
    return Fraction(mantissa) * Fraction(10) ** exp10


def qty(mantissa: int, exp10: int, fmt: str) -> Quantity:
    """A Quantity built directly (not parsed), like the Go tests' decQuantity."""
    nanos = dec(mantissa, exp10) * NANO
    assert nanos.denominator == 1
    return Quantity(int(nanos), fmt)  # type: ignore[arg-type]


# (input, expected value, expected format): TestQuantityParse
PARSE = [
    ("0", dec(0, 0), "DecimalSI"),
    ("0n", dec(0, 0), "DecimalSI"),
    ("0u", dec(0, 0), "DecimalSI"),
    ("0m", dec(0, 0), "DecimalSI"),
    ("0Ki", dec(0, 0), "BinarySI"),
    ("0k", dec(0, 0), "DecimalSI"),
    ("0Mi", dec(0, 0), "BinarySI"),
    ("0M", dec(0, 0), "DecimalSI"),
    ("0Gi", dec(0, 0), "BinarySI"),
    ("0G", dec(0, 0), "DecimalSI"),
    ("0Ti", dec(0, 0), "BinarySI"),
    ("0T", dec(0, 0), "DecimalSI"),
    ("1", dec(1, 0), "DecimalSI"),
    ("1Ki", dec(1024, 0), "BinarySI"),
    ("8Ki", dec(8 * 1024, 0), "BinarySI"),
    ("7Mi", dec(7 * 1024**2, 0), "BinarySI"),
    ("6Gi", dec(6 * 1024**3, 0), "BinarySI"),
    ("5Ti", dec(5 * 1024**4, 0), "BinarySI"),
    ("4Pi", dec(4 * 1024**5, 0), "BinarySI"),
    ("3Ei", dec(3 * 1024**6, 0), "BinarySI"),
    ("10Ti", dec(10 * 1024**4, 0), "BinarySI"),
    ("100Ti", dec(100 * 1024**4, 0), "BinarySI"),
    ("5n", dec(5, -9), "DecimalSI"),
    ("4u", dec(4, -6), "DecimalSI"),
    ("3m", dec(3, -3), "DecimalSI"),
    ("9", dec(9, 0), "DecimalSI"),
    ("8k", dec(8, 3), "DecimalSI"),
    ("50k", dec(5, 4), "DecimalSI"),
    ("7M", dec(7, 6), "DecimalSI"),
    ("6G", dec(6, 9), "DecimalSI"),
    ("5T", dec(5, 12), "DecimalSI"),
    ("40T", dec(4, 13), "DecimalSI"),
    ("300T", dec(3, 14), "DecimalSI"),
    ("2P", dec(2, 15), "DecimalSI"),
    ("1E", dec(1, 18), "DecimalSI"),
    ("1E-3", dec(1, -3), "DecimalExponent"),
    ("1e3", dec(1, 3), "DecimalExponent"),
    ("1E6", dec(1, 6), "DecimalExponent"),
    ("1e9", dec(1, 9), "DecimalExponent"),
    ("1E12", dec(1, 12), "DecimalExponent"),
    ("1e15", dec(1, 15), "DecimalExponent"),
    ("1E18", dec(1, 18), "DecimalExponent"),
    ("1e14", dec(1, 14), "DecimalExponent"),
    ("1e13", dec(1, 13), "DecimalExponent"),
    ("100.035k", dec(100035, 0), "DecimalSI"),
    ("0.001", dec(1, -3), "DecimalSI"),
    ("0.0005k", dec(5, -1), "DecimalSI"),
    ("0.005", dec(5, -3), "DecimalSI"),
    ("0.05", dec(5, -2), "DecimalSI"),
    ("0.5", dec(5, -1), "DecimalSI"),
    ("0.00050k", dec(5, -1), "DecimalSI"),
    ("0.00500", dec(5, -3), "DecimalSI"),
    ("0.05000", dec(5, -2), "DecimalSI"),
    ("0.50000", dec(5, -1), "DecimalSI"),
    ("0.5e0", dec(5, -1), "DecimalExponent"),
    ("0.5e-1", dec(5, -2), "DecimalExponent"),
    ("0.5e-2", dec(5, -3), "DecimalExponent"),
    ("10.035M", dec(10035, 3), "DecimalSI"),
    ("1.2e3", dec(12, 2), "DecimalExponent"),
    ("1.3E+6", dec(13, 5), "DecimalExponent"),
    ("1.40e9", dec(14, 8), "DecimalExponent"),
    ("1.53E12", dec(153, 10), "DecimalExponent"),
    ("1.6e15", dec(16, 14), "DecimalExponent"),
    ("1.7E18", dec(17, 17), "DecimalExponent"),
    ("9.01", dec(901, -2), "DecimalSI"),
    ("8.1k", dec(81, 2), "DecimalSI"),
    ("7.123456M", dec(7123456, 0), "DecimalSI"),
    ("6.987654321G", dec(6987654321, 0), "DecimalSI"),
    ("5.444T", dec(5444, 9), "DecimalSI"),
    ("40.1T", dec(401, 11), "DecimalSI"),
    ("300.2T", dec(3002, 11), "DecimalSI"),
    ("2.5P", dec(25, 14), "DecimalSI"),
    ("1.01E", dec(101, 16), "DecimalSI"),
    # things that saturate or round
    ("3.001n", dec(4, -9), "DecimalSI"),
    ("1.1E-9", dec(2, -9), "DecimalExponent"),
    ("0.0000000001", dec(1, -9), "DecimalSI"),
    ("0.0000000005", dec(1, -9), "DecimalSI"),
    ("0.00000000050", dec(1, -9), "DecimalSI"),
    ("0.5e-9", dec(1, -9), "DecimalExponent"),
    ("0.9n", dec(1, -9), "DecimalSI"),
    ("0.00000012345", dec(124, -9), "DecimalSI"),
    ("0.00000012354", dec(124, -9), "DecimalSI"),
    ("9Ei", dec(MAX_ALLOWED, 0), "BinarySI"),
    ("9223372036854775807Ki", dec(MAX_ALLOWED, 0), "BinarySI"),
    ("12E", dec(12, 18), "DecimalSI"),
    # fractional binary
    ("100.035Ki", dec(10243584, -2), "BinarySI"),
    ("0.5Mi", dec(512 * 1024, 0), "BinarySI"),
    ("0.05Gi", dec(536870912, -1), "BinarySI"),
    ("0.025Ti", dec(274877906944, -1), "BinarySI"),
    # things written by trolls
    ("0.000000000001Ki", dec(2, -9), "DecimalSI"),  # rounds up, changes format
    (".001", dec(1, -3), "DecimalSI"),
    (".0001k", dec(100, -3), "DecimalSI"),
    ("1.", dec(1, 0), "DecimalSI"),
    ("1.G", dec(1, 9), "DecimalSI"),
]


@pytest.mark.parametrize(("text", "value", "fmt"), PARSE)
def test_parse_table(text: str, value: Fraction, fmt: str) -> None:
    q = parse_quantity(text)
    assert (q.as_fraction(), q.format) == (value, fmt)


@pytest.mark.parametrize(("text", "value", "fmt"), PARSE)
def test_parse_table_with_signs(text: str, value: Fraction, fmt: str) -> None:
    neg, pos = parse_quantity("-" + text), parse_quantity("+" + text)
    assert (neg.as_fraction(), neg.format) == (-value, fmt)
    assert (pos.as_fraction(), pos.format) == (value, fmt)


# (quantity, canonical, alternate spelling that must print canonically): TestQuantityString
STRING = [
    (qty(1024**3, 0, "BinarySI"), "1Gi", "1024Mi"),
    (qty(300 * 1024**2, 0, "BinarySI"), "300Mi", "307200Ki"),
    (qty(6 * 1024, 0, "BinarySI"), "6Ki", ""),
    (qty(1001 * 1024**3, 0, "BinarySI"), "1001Gi", "1025024Mi"),
    (qty(1024**4, 0, "BinarySI"), "1Ti", "1024Gi"),
    (qty(5, 0, "BinarySI"), "5", "5000m"),
    (qty(500, -3, "BinarySI"), "500m", "0.5"),
    (qty(1, 9, "DecimalSI"), "1G", "1000M"),
    (qty(1000, 6, "DecimalSI"), "1G", "0.001T"),
    (qty(1000000, 3, "DecimalSI"), "1G", ""),
    (qty(1000000000, 0, "DecimalSI"), "1G", ""),
    (qty(1, -3, "DecimalSI"), "1m", "1000u"),
    (qty(80, -3, "DecimalSI"), "80m", ""),
    (qty(1080, -3, "DecimalSI"), "1080m", "1.08"),
    (qty(108, -2, "DecimalSI"), "1080m", "1080000000n"),
    (qty(10800, -4, "DecimalSI"), "1080m", ""),
    (qty(300, 6, "DecimalSI"), "300M", ""),
    (qty(1, 12, "DecimalSI"), "1T", ""),
    (qty(1, 18, "DecimalSI"), "1E", ""),
    (qty(1, 21, "DecimalSI"), "1e21", "1000E"),
    (qty(5, 21, "DecimalSI"), "5e21", "5000E"),
    (qty(1, 24, "DecimalSI"), "1e24", "1000000E"),
    (qty(1234567, 6, "DecimalSI"), "1234567M", ""),
    (qty(1234567, -3, "BinarySI"), "1234567m", ""),
    (qty(3, 3, "DecimalSI"), "3k", ""),
    (qty(1025, 0, "BinarySI"), "1025", ""),
    (qty(0, 0, "DecimalSI"), "0", ""),
    (qty(0, 0, "BinarySI"), "0", ""),
    (qty(1, 9, "DecimalExponent"), "1e9", ".001e12"),
    (qty(1, -3, "DecimalExponent"), "1e-3", "0.001e0"),
    (qty(1, -9, "DecimalExponent"), "1e-9", "1000e-12"),
    (qty(80, -3, "DecimalExponent"), "80e-3", ""),
    (qty(300, 6, "DecimalExponent"), "300e6", ""),
    (qty(1, 12, "DecimalExponent"), "1e12", ""),
    (qty(1, 3, "DecimalExponent"), "1e3", ""),
    (qty(3, 3, "DecimalExponent"), "3e3", ""),
    (qty(0, 0, "DecimalExponent"), "0", "00"),
    (qty(1, -9, "DecimalSI"), "1n", ""),
    (qty(80, -9, "DecimalSI"), "80n", ""),
    (qty(1080, -9, "DecimalSI"), "1080n", ""),
    (qty(108, -8, "DecimalSI"), "1080n", ""),
    (qty(10800, -10, "DecimalSI"), "1080n", ""),
    (qty(1, -6, "DecimalSI"), "1u", ""),
    (qty(80, -6, "DecimalSI"), "80u", ""),
    (qty(1080, -6, "DecimalSI"), "1080u", ""),
]


@pytest.mark.parametrize(("q", "expect", "alternate"), STRING)
def test_canonical_string(q: Quantity, expect: str, alternate: str) -> None:
    assert str(q) == expect
    assert parse_quantity(expect) == q
    assert str(parse_quantity(expect)) == expect
    if alternate:
        assert str(parse_quantity(alternate)) == expect
    if q:
        assert str(-q) == "-" + expect


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        # TestQuantityParseEmit
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        # the examples
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        ("0.1", "100m"),
        ("1e3", "1e3"),
        ("0.5Ki", "512"),
        ("1.5Ki", "1536"),
        ("1.1Ki", "1126400m"),  # not a whole byte: DecimalSI
        ("100.035Ki", "102435840m"),
        ("0.5Mi", "512Ki"),
        ("-0", "0"),
        ("0Gi", "0"),
        ("0.0e7", "0"),
        ("1.2e3", "1200"),  # exponent 0 has no suffix
        ("1.3E+6", "1300e3"),
        ("1E100", "10e99"),  # decimal is not capped; exponent lowered to a multiple of 3
        ("1e-05", "10e-6"),
        ("9Ei", "9223372036854775807"),
        ("00012.50k", "12500"),
    ],
)
def test_parse_emit(text: str, expect: str) -> None:
    assert str(parse_quantity(text)) == expect
    if expect != "0":
        assert str(parse_quantity("-" + text)) == "-" + expect


INVALID = [
    # TestQuantityParse's invalid list
    "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 ",
    # the list
    "", "--1", "+-1", "1Mi1", "Mi", ".", "-.", "-", "+", "1e", "1ee3", "1E+", "e3",
    "1 Mi", "\t1", "1\n", "1e3.5", "1ki", "1KI", "1mi", "1Kib", "1k1", "1.5.", "١", "1٠", "１",
    "1e99999999999999999999",  # exponent does not fit an int64 (strconv.ParseInt fails)
]


@pytest.mark.parametrize("text", INVALID)
def test_invalid(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_quantity(text)
    assert repr(text) in str(info.value)


def test_non_string_is_value_error() -> None:
    with pytest.raises(ValueError, match="string"):
        parse_quantity(5)  # type: ignore[arg-type]


def test_limits_on_absurd_sizes() -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_quantity("1e1000")
    assert parse_quantity("9e999").as_fraction() == 9 * Fraction(10) ** 999
    with pytest.raises(ValueError, match="significant digits"):
        parse_quantity("1" * 1001)
    assert parse_quantity("1" * 1000 + "0" * 5 + "e-995") == parse_quantity("1" * 1000 + "e-990")
    assert str(parse_quantity("0." + "0" * 100_000 + "1")) == "1n"  # tiny rounds up, no huge power
    assert str(parse_quantity("1e-9223372036854775808")) == "1e-9"
    assert parse_quantity("1" + "0" * 5000 + "Ki").as_fraction() == MAX_ALLOWED  # capped


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [
        ("500m", 1, 500),
        ("9.01", 10, 9010),
        ("-9.01", -10, -9010),  # away from zero (TestQuantityRoundUp)
        ("1n", 1, 1),
        ("-1n", -1, -1),
        ("1.5", 2, 1500),
        ("-1.5", -2, -1500),
        ("1Mi", 1024 * 1024, 1024 * 1024 * 1000),
        ("1.0001m", 1, 2),
        ("0", 0, 0),
        ("9Ei", MAX_INT64, MAX_INT64),  # milli saturates
        ("-9Ei", -MAX_INT64, MIN_INT64),
        ("1E100", MAX_INT64, MAX_INT64),
        ("-1E100", MIN_INT64, MIN_INT64),
    ],
)
def test_value_and_milli_value(text: str, value: int, milli: int) -> None:
    q = parse_quantity(text)
    assert (q.value(), q.milli_value()) == (value, milli)


@pytest.mark.parametrize(
    ("nanos", "value", "milli"),
    # TestScaledValue: 1 at nano, micro, milli and unit scale
    [(1, 1, 1), (1000, 1, 1), (10**6, 1, 1), (10**9, 1, 1000), (2 * 10**9, 2, 2000)],
)
def test_scaled_values(nanos: int, value: int, milli: int) -> None:
    q = Quantity(nanos)
    assert (q.value(), q.milli_value()) == (value, milli)


@pytest.mark.parametrize(
    ("m", "fmt", "expect"),
    [(1, "DecimalSI", "1m"), (1000, "DecimalSI", "1"), (1234000, "DecimalSI", "1234"),
     (1024, "BinarySI", "1024m"), (1024 * 1024, "BinarySI", "1048576m"), (1000000, "DecimalExponent", "1e3")],
)
def test_from_milli(m: int, fmt: str, expect: str) -> None:
    q = Quantity.from_milli(m, fmt)  # type: ignore[arg-type]
    assert str(q) == expect and q.format == fmt
    assert q.milli_value() == m
    assert parse_quantity(expect).milli_value() == m


@pytest.mark.parametrize(
    ("n", "fmt", "expect"),
    [(1, "DecimalSI", "1"), (1000, "DecimalSI", "1k"), (1234000, "DecimalSI", "1234k"), (1024, "BinarySI", "1Ki"),
     (1000000, "DecimalExponent", "1e6"), (1024 * 1024, "BinarySI", "1Mi"), (-3 * 1024**3, "BinarySI", "-3Gi")],
)
def test_from_value(n: int, fmt: str, expect: str) -> None:
    q = Quantity.from_value(n, fmt)  # type: ignore[arg-type]
    assert str(q) == expect and q.value() == n and parse_quantity(expect).value() == n


def test_from_value_defaults_and_bad_format() -> None:
    assert Quantity.from_value(1000).format == "DecimalSI"
    with pytest.raises(ValueError, match="format"):
        Quantity.from_value(1, "Binary")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Quantity.from_value(1.5)  # type: ignore[arg-type]


def test_binary_beyond_int64_prints_exactly() -> None:
    # 0 - mostNegative in BinarySI prints 8Ei (TestZeroSubMostNegativeInheritsFormat) ...
    assert str(Quantity.from_value(2**63, "BinarySI")) == "8Ei"
    assert str(Quantity(0, "DecimalSI") - Quantity.from_value(-(2**63), "BinarySI")) == "8Ei"
    # ... but parsing caps it, as apimachinery does (#140674)
    assert parse_quantity("8Ei").value() == MAX_INT64
    # beyond Ei the suffix stays Ei (apimachinery would drop the exponent and print "1")
    assert str(Quantity.from_value(2**70, "BinarySI")) == "1024Ei"


@pytest.mark.parametrize(
    ("x", "y", "expect"),
    [("0", "0", 0), ("100m", "50m", 1), ("50m", "100m", -1), ("10000T", "100Gi", 1),
     ("1Ki", "1024", 0), ("1k", "1e3", 0), ("-1", "1n", -1), ("1E100", "9Ei", 1)],
)
def test_compare(x: str, y: str, expect: int) -> None:
    a, b = parse_quantity(x), parse_quantity(y)
    assert ((a > b) - (a < b)) == expect
    assert (a == b) == (expect == 0) and (a <= b) == (expect <= 0) and (a >= b) == (expect >= 0)
    if expect == 0:
        assert hash(a) == hash(b)


def test_ordering_and_hashing() -> None:
    values = [parse_quantity(t) for t in ["1Gi", "1G", "100m", "-1", "0", "1Ki", "1024", "1e3", "1k"]]
    assert [str(q) for q in sorted(values)] == ["-1", "0", "100m", "1e3", "1k", "1Ki", "1024", "1G", "1Gi"]
    assert len(set(values)) == 7
    assert max(values) == parse_quantity("1073741824")
    assert parse_quantity("1") != 1  # no silent comparison with plain numbers
    with pytest.raises(TypeError):
        _ = parse_quantity("1") < 1  # type: ignore[operator]


def test_frozen() -> None:
    q = parse_quantity("1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.nanos = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("a", "b", "total", "fmt"),
    # TestAdd / TestQuantityAddZeroPreservesSuffix: left's format, unless left is zero
    [("10", "1e1", "20", "DecimalSI"), ("10", "1Ki", "1034", "DecimalSI"), ("1Ki", "10", "1034", "BinarySI"),
     ("0", "50", "50", "DecimalSI"), ("0", "1Gi", "1Gi", "BinarySI"), ("1Gi", "0", "1Gi", "BinarySI"),
     ("100m", "0", "100m", "DecimalSI"), ("0", "100m", "100m", "DecimalSI"), ("1Gi", "1Gi", "2Gi", "BinarySI"),
     ("1Gi", "-1Gi", "0", "BinarySI"), ("1e3", "1", "1001", "DecimalExponent"), ("0.1", "0.2", "300m", "DecimalSI")],
)
def test_add(a: str, b: str, total: str, fmt: str) -> None:
    result = parse_quantity(a) + parse_quantity(b)
    assert (str(result), result.format) == (total, fmt)


@pytest.mark.parametrize(
    ("a", "b", "diff", "fmt"),
    # TestSub / TestQuantitySubZeroPreservesSuffix
    [("10", "1e1", "0", "DecimalSI"), ("10", "1", "9", "DecimalSI"), ("10Ki", "1", "10239", "BinarySI"),
     ("0", "50", "-50", "DecimalSI"), ("50", "0", "50", "DecimalSI"), ("0", "0", "0", "DecimalSI"),
     ("0", "1Gi", "-1Gi", "BinarySI"), ("1Gi", "0", "1Gi", "BinarySI"), ("0", "100m", "-100m", "DecimalSI"),
     ("1Gi", "512Mi", "512Mi", "BinarySI")],
)
def test_sub(a: str, b: str, diff: str, fmt: str) -> None:
    result = parse_quantity(a) - parse_quantity(b)
    assert (str(result), result.format) == (diff, fmt)


def test_neg_and_mul() -> None:
    assert str(-qty(901, -2, "DecimalSI")) == "-9010m"  # TestQuantityNeg
    assert str(-parse_quantity("-1Gi")) == "1Gi" and (-parse_quantity("1Gi")).format == "BinarySI"
    assert str(-parse_quantity("0")) == "0"
    assert str(parse_quantity("10") * 10) == "100"
    assert str(parse_quantity("10Ki") * -1) == "-10Ki"
    assert str(3 * parse_quantity("512Mi")) == "1536Mi"
    assert str(parse_quantity("-50") * -50) == "2500"
    assert str(parse_quantity("1") * 0) == "0"
    big = Quantity.from_value(MAX_INT64) * 2  # exact, no overflow (TestMul)
    assert big.as_fraction() == 2 * MAX_INT64
    with pytest.raises(TypeError):
        _ = parse_quantity("1") * 1.5  # type: ignore[operator]


def test_helpers() -> None:
    q = parse_quantity("1536Mi")
    assert q.as_fraction() / parse_quantity("2Gi").as_fraction() == Fraction(3, 4)
    assert parse_quantity("-5m").sign() == -1 and parse_quantity("0Ki").sign() == 0 and q.sign() == 1
    assert parse_quantity("0Ki").is_zero() and not q.is_zero()
    assert not parse_quantity("0") and bool(parse_quantity("1n"))
    assert repr(q) == "<Quantity 1536Mi BinarySI>"


# --- pydantic -------------------------------------------------------------------------------------
class Resources(BaseModel):
    model_config = {"frozen": True}
    requests: dict[str, QuantityField] = {}
    limit: Quantity | None = None


def test_pydantic_field() -> None:
    r = Resources(requests={"cpu": "1.5", "memory": 1024, "x": 0.5, "y": parse_quantity("1Gi"), "z": 1e3},
                  limit="1024Mi")
    assert {k: str(v) for k, v in r.requests.items()} == {"cpu": "1500m", "memory": "1024", "x": "500m",
                                                          "y": "1Gi", "z": "1k"}
    assert isinstance(r.requests["cpu"], Quantity) and str(r.limit) == "1Gi"
    assert r.model_dump() == {"requests": {"cpu": "1500m", "memory": "1024", "x": "500m", "y": "1Gi", "z": "1k"},
                              "limit": "1Gi"}
    assert Resources.model_validate_json(r.model_dump_json()) == r
    assert "requests" in Resources.model_json_schema()["properties"]


@pytest.mark.parametrize("bad", ["0.1mi", " 1", True, None, float("nan"), float("inf"), [1]])
def test_pydantic_rejects(bad: object) -> None:
    with pytest.raises(ValidationError) as info:
        Resources(requests={"cpu": bad})
    assert "invalid quantity" in str(info.value) and "requests.cpu" in str(info.value)
    if bad is not None:  # `limit` is Optional
        with pytest.raises(ValidationError, match="invalid quantity"):
            Resources(limit=bad)


# --- properties -----------------------------------------------------------------------------------
SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
DECIMAL_EXPONENTS = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
digits = st.text(alphabet="0123456789", max_size=25)
quantity_text = st.builds(
    lambda sign, whole, dot, frac, suffix, exp: sign + whole + dot + frac + (suffix if exp is None else exp),
    st.sampled_from(["", "+", "-"]), digits, st.sampled_from(["", "."]), digits, st.sampled_from(SUFFIXES),
    st.none() | st.builds(lambda e, s, n: e + s + str(n), st.sampled_from("eE"), st.sampled_from(["", "+", "-"]),
                          st.integers(0, 40)),
).filter(lambda t: any(c.isdigit() for c in t.split("e")[0].split("E")[0]))


def reference(text: str) -> tuple[Fraction, str]:
    """An independent reading of a valid quantity: Fraction math, then apimachinery's rounding rules."""
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    number = ""
    while body and (body[0].isdigit() or body[0] == "."):
        number, body = number + body[0], body[1:]
    whole, _, frac = number.partition(".")
    value = Fraction(int(whole or "0")) + Fraction(int(frac or "0"), 10 ** len(frac))
    if body.endswith("i"):
        value, fmt = value * 1024 ** (SUFFIXES.index(body) - 9), "BinarySI"
    elif body[:1] in ("e", "E") and len(body) > 1:
        value, fmt = value * Fraction(10) ** int(body[1:]), "DecimalExponent"
    else:
        value, fmt = value * Fraction(10) ** DECIMAL_EXPONENTS[body], "DecimalSI"
    nanos = -(-value * NANO // 1)  # ceil on the magnitude
    if fmt == "BinarySI":
        nanos = min(nanos, MAX_INT64 * NANO)
        if 0 < nanos < NANO:
            fmt = "DecimalSI"
    return Fraction(sign * nanos, NANO), fmt


def assert_round_trip(q: Quantity) -> None:
    """parse(str(q)) == q, and str(parse(str(q))) == str(q) up to apimachinery's one exception."""
    again = parse_quantity(str(q))
    assert again == q and hash(again) == hash(q)
    if q.format == "BinarySI" and not str(q).endswith("i"):
        # printed without a binary suffix, it reads back as DecimalSI (as in apimachinery)
        assert str(again) == str(Quantity(q.nanos, "DecimalSI"))
    else:
        assert str(again) == str(q)
    assert str(parse_quantity(str(again))) == str(again)  # a fixed point after one parse


@settings(max_examples=400, deadline=None)
@given(quantity_text)
def test_parse_matches_reference(text: str) -> None:
    q = parse_quantity(text)
    assert (q.as_fraction(), q.format) == reference(text)


@settings(max_examples=300, deadline=None)
@given(quantity_text)
def test_round_trip_of_parsed(text: str) -> None:
    assert_round_trip(parse_quantity(text))


binary_nanos = st.integers(-MAX_INT64 * NANO, MAX_INT64 * NANO)  # beyond that, parse caps (apimachinery #140674)
generated = st.one_of(
    st.builds(Quantity, st.integers(-(10**40), 10**40), st.sampled_from(["DecimalSI", "DecimalExponent"])),
    st.builds(Quantity, binary_nanos, st.just("BinarySI")),
    st.builds(lambda n, p: Quantity.from_value(n * 1024**p, "BinarySI"), st.integers(-(2**20), 2**20),
              st.integers(0, 4)),
)


@settings(max_examples=400, deadline=None)
@given(generated)
def test_round_trip_of_generated(q: Quantity) -> None:
    assert_round_trip(q)


def test_binary_without_suffix_reads_back_as_decimal() -> None:
    q = parse_quantity("24.4140625Ki")  # 25000 bytes, not a multiple of 1024
    assert (str(q), q.format) == ("25000", "BinarySI")
    assert (str(parse_quantity(str(q))), parse_quantity(str(q)).format) == ("25k", "DecimalSI")


@settings(max_examples=200, deadline=None)
@given(generated, generated)
def test_arithmetic_is_exact(a: Quantity, b: Quantity) -> None:
    assert (a + b).as_fraction() == a.as_fraction() + b.as_fraction()
    assert (a + b) - b == a and a - a == Quantity(0)
    assert (a < b) == (a.as_fraction() < b.as_fraction())
    assert -(-a) == a and (-a).format == a.format  # noqa: B002


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet="0123456789.+-eEinumkKMGTP \t٠١", max_size=30)))
def test_any_text_parses_or_raises_value_error(text: str) -> None:
    try:
        q = parse_quantity(text)
    except ValueError as exc:
        assert repr(text) in str(exc)
    else:
        assert isinstance(q, Quantity) and parse_quantity(str(q)) == q
