"""Label and field selectors as Kubernetes parses and matches them (apimachinery labels, fields).

Label selectors: comma-separated requirements, each `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
`k notin (a,b)`, `k` (exists), `!k` (does not exist), `k>1`, `k<1` (integer comparisons).
`!=` and `notin` also match objects without the key, as in Kubernetes. Field selectors:
comma-separated `k=v`, `k==v`, `k!=v` terms; `\\`, `,` and `=` in a value are escaped with a
backslash. A missing field reads as "". Both raise SelectorError with the Kubernetes wording
(the API answers 400 BadRequest with it).

Hand-written: no maintained Python package parses the Kubernetes selector grammar (the official
client only builds selector strings); the grammar is small and table-tested here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from nodeagent.core.names import label_value_errors, qualified_name_errors

LabelOperator = Literal["=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt"]
FieldOperator = Literal["=", "==", "!="]


class SelectorError(ValueError):
    """A selector that does not parse; str() is the message the API server gives."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: LabelOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        value = labels.get(self.key)
        if op in ("=", "==", "in"):
            return value is not None and value in self.values
        if op in ("!=", "notin"):
            return value is None or value not in self.values
        if value is None:
            return False
        try:
            have = int(value)
        except ValueError:
            return False
        want = int(self.values[0])
        return have > want if op == "gt" else have < want

    def __str__(self) -> str:
        op, key = self.operator, self.key
        if op == "exists":
            return key
        if op == "!":
            return f"!{key}"
        if op in ("in", "notin"):
            return f"{key} {op} ({','.join(self.values)})"
        sym = {"gt": ">", "lt": "<"}.get(op, op)
        return f"{key}{sym}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector: every requirement must hold (AND). Empty matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


# ---- label selector lexer and parser (labels/selector.go) -------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<op>==|!=|=|>|<|!|\(|\)|,)|(?P<word>[^\s=!<>(),]+))")
_KEYWORDS = {"in": "in", "notin": "notin"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:  # pragma: no cover - the pattern accepts every character class
            raise SelectorError(f"unable to parse requirement: unexpected character at {pos}")
        pos = m.end()
        if m.group("op"):
            out.append(("op", m.group("op")))
        else:
            word = m.group("word")
            out.append(("kw", word) if word in _KEYWORDS else ("word", word))
    return out


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str] | None:
        tok = self.peek()
        self.i += 1
        return tok

    def fail(self, found: tuple[str, str] | None, expected: str) -> SelectorError:
        shown = found[1] if found else ""
        return SelectorError(f"unable to parse requirement: found '{shown}', expected: {expected}")

    def parse(self) -> LabelSelector:
        reqs: list[Requirement] = []
        if not self.toks:
            return LabelSelector()
        while True:
            reqs.append(self.requirement())
            tok = self.take()
            if tok is None:
                break
            if tok != ("op", ","):
                raise self.fail(tok, "',' or 'end of string'")
            if self.peek() is None:
                raise self.fail(None, "identifier after ','")
        return LabelSelector(tuple(reqs))

    def requirement(self) -> Requirement:
        tok = self.take()
        if tok == ("op", "!"):
            key_tok = self.take()
            if key_tok is None or key_tok[0] != "word":
                raise self.fail(key_tok, "identifier after '!'")
            return _requirement(key_tok[1], "!", ())
        if tok is None or tok[0] != "word":
            raise self.fail(tok, "identifier")
        key = tok[1]
        nxt = self.peek()
        if nxt is None or nxt == ("op", ","):
            return _requirement(key, "exists", ())
        self.i += 1
        if nxt[0] == "kw":
            return _requirement(key, "in" if nxt[1] == "in" else "notin", self.value_set())
        if nxt[0] == "op" and nxt[1] in ("=", "==", "!=", ">", "<"):
            value = self.peek()
            if value is None or value[0] == "op":  # `k=` means the empty value
                if value is not None and value != ("op", ","):
                    raise self.fail(value, "identifier")
                single = ""
            else:
                self.i += 1
                single = value[1]
            op: LabelOperator = {">": "gt", "<": "lt"}.get(nxt[1], nxt[1])  # type: ignore[assignment]
            return _requirement(key, op, (single,))
        raise self.fail(nxt, "'=', '!=', '==', 'in', notin'")

    def value_set(self) -> tuple[str, ...]:
        tok = self.take()
        if tok != ("op", "("):
            raise self.fail(tok, "'('")
        values: list[str] = []
        expect_value = True
        while True:
            tok = self.take()
            if tok is None:
                raise self.fail(None, "')'")
            if tok == ("op", ")"):
                if expect_value and values:
                    values.append("")  # `(a,)`: a trailing empty value, as Kubernetes reads it
                break
            if tok == ("op", ","):
                if expect_value:
                    values.append("")
                expect_value = True
                continue
            if tok[0] == "op" or not expect_value:
                raise self.fail(tok, "',' or ')'")
            values.append(tok[1])
            expect_value = False
        return tuple(values)


def _requirement(key: str, op: LabelOperator, values: tuple[str, ...]) -> Requirement:
    """NewRequirement's checks: a qualified key, label values, value counts per operator."""
    if errs := qualified_name_errors(key):
        raise SelectorError(f"unable to parse requirement: key: Invalid value: \"{key}\": {'; '.join(errs)}")
    if op in ("in", "notin") and not values:
        raise SelectorError("unable to parse requirement: values: Required value: for 'in', 'notin' "
                            "operators, values set can't be empty")
    if op in ("=", "==", "!=") and len(values) != 1:
        raise SelectorError("unable to parse requirement: values: Invalid value: exact-match "
                            "compatibility requires one single value")
    if op in ("gt", "lt"):
        if len(values) != 1 or not re.fullmatch(r"-?[0-9]+", values[0]):
            shown = values[0] if values else ""
            raise SelectorError(f"unable to parse requirement: values[0]: Invalid value: \"{shown}\": "
                                "for 'Gt', 'Lt' operators, the value must be an integer")
        return Requirement(key, op, values)
    for i, v in enumerate(values):
        if errs := label_value_errors(v):
            raise SelectorError(f"unable to parse requirement: values[{i}][{key}]: Invalid value: "
                                f"\"{v}\": {'; '.join(errs)}")
    return Requirement(key, op, tuple(sorted(set(values))) if op in ("in", "notin") else values)


def parse_label_selector(text: str) -> LabelSelector:
    """Parse `text` (the labelSelector query parameter); SelectorError when it is malformed."""
    return _LabelParser(text).parse()


# ---- field selectors (fields/selector.go) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    operator: FieldOperator
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        have = fields.get(self.field, "")
        return have != self.value if self.operator == "!=" else have == self.value


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(t.matches(fields) for t in self.terms)

    def fields(self) -> frozenset[str]:
        return frozenset(t.field for t in self.terms)

    def value_of(self, field: str) -> str | None:
        """The value an `=`/`==` term requires of `field` (e.g. metadata.name for a get-like watch)."""
        for t in self.terms:
            if t.field == field and t.operator != "!=":
                return t.value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, escaped = [], [], False
    for ch in text:
        if escaped:
            cur.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:
        cur.append("\\")
    parts.append("".join(cur))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence in {value!r}")
            out.append(value[i + 1])
            i += 2
            continue
        if ch in ",=":
            raise SelectorError(f"invalid field selector: unescaped {ch!r} in value {value!r}")
        out.append(ch)
        i += 1
    return "".join(out)


def _split_term(term: str) -> tuple[str, FieldOperator, str] | None:
    """The leftmost unescaped operator; `!=` and `==` win over `=` where they start."""
    i = 0
    while i < len(term):
        ch = term[i]
        if ch == "\\":
            i += 2
            continue
        if term.startswith("!=", i):
            return term[:i], "!=", term[i + 2:]
        if term.startswith("==", i):
            return term[:i], "==", term[i + 2:]
        if ch == "=":
            return term[:i], "=", term[i + 1:]
        i += 1
    return None


def parse_field_selector(text: str) -> FieldSelector:
    """Parse `text` (the fieldSelector query parameter); SelectorError when it is malformed."""
    if not text.strip():
        return FieldSelector()
    terms: list[FieldTerm] = []
    for part in _split_unescaped(text, ","):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = split
        terms.append(FieldTerm(field.strip(), op, _unescape(value)))
    return FieldSelector(tuple(terms))


def escape_field_value(value: str) -> str:
    """fields.EscapeValue: the inverse of the unescaping above."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
