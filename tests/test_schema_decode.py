"""Decoding request bodies: duplicates noted, only plain JSON comes out, malformed input is a DecodeError."""

from __future__ import annotations

import pytest

from nodeagent.cluster.schema.decode import MAX_DEPTH, DecodeError, decode, decode_json, decode_yaml


def test_json_duplicates_in_document_order_nested_after_their_repeat() -> None:
    d = decode_json(b'{"a":1,"a":2,"b":{"c":1,"c":[1,{"x":1,"x":2}]}}')
    assert d.value == {"a": 2, "b": {"c": [1, {"x": 2}]}}
    assert d.duplicate_fields() == ["a", "b.c", "b.c[1].x"]


def test_json_without_duplicates_records_none() -> None:
    d = decode_json('{"a": [{"b": 1}]}')
    assert d.dup_keys == {} and d.duplicate_fields() == []


def test_yaml_duplicates_name_the_line_and_timestamps_stay_strings() -> None:
    d = decode_yaml("a: 1\nb:\n  c: 2\n  c: 3\nt: 2020-01-01\nn: 1.5\n1: x\ntrue: y\nnull: z\n")
    assert d.value == {"a": 1, "b": {"c": 3}, "t": "2020-01-01", "n": 1.5, "1": "x", "true": "y", "null": "z"}
    assert d.duplicate_fields() == ['line 4: key "c" already set in map']


def test_yaml_merge_keys_and_small_aliases_work() -> None:
    assert decode_yaml("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n").value == {"base": {"x": 1}, "d": {"x": 1, "y": 2}}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"NaN", "invalid character 'N'"),
        (b"[Infinity]", "invalid character 'I'"),
        (b"1e400", "out of range"),
        (b"-1e400", "out of range"),
        (b"1" * 500, "too long"),
        (b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5), "nested deeper"),
        (b"[" * 100000, "invalid JSON"),
        (b'{"a":', "invalid JSON: Expecting value at line 1 column 6"),
        (b"", "invalid JSON"),
        (b"{'a': 1}", "invalid JSON"),
    ],
)
def test_json_malformed(raw: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match="^.*" + message.replace("(", r"\(").replace("[", r"\[")):
        decode_json(raw)


def test_json_big_integers_beyond_int64_become_floats() -> None:
    assert decode_json(b"[9223372036854775807, 99999999999999999999]").value == [9223372036854775807, 1e20]


def test_invalid_utf8_and_lone_surrogates_become_replacement_characters() -> None:
    assert decode_json(b'["\xff", "\\ud800x", "\\ud83d\\ude00"]').value == ["\ufffd", "\ufffdx", "\U0001f600"]


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefg", "bcdefgh", strict=True)
)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("a: !!binary aGVsbG8=", "bytes value"),
        ("a: !!timestamp 2020-01-01", "date value"),
        ("a: [*x]", "undefined alias"),
        ("&a [*a]", "nested deeper"),
        ("a: 1\n---\nb: 2", "expected a single document"),
        ("? [1, 2]\n: x", "mapping key must be a scalar"),
        ("a: .inf", "cannot be represented in JSON"),
        ("a: [1", "yaml:"),
        ("\t- x", "yaml:"),
        (BOMB, "expands to more than"),
    ],
)
def test_yaml_malformed(raw: str, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode_yaml(raw)


def test_decode_by_media_type() -> None:
    assert decode(b"a: 1", "application/yaml").value == {"a": 1}
    assert decode(b"a: 1", "application/apply-patch+yaml; charset=utf-8").value == {"a": 1}
    assert decode(b'{"a": 1}', "application/json").value == {"a": 1}
    with pytest.raises(DecodeError):
        decode(b"a: 1", "application/merge-patch+json")
