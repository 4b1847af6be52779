"""Label and field selectors: every operator, Kubernetes' matching rules, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.core.selectors import (
    SelectorError,
    escape_field_value,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "rank": "5", "empty": ""}


@pytest.mark.parametrize(("selector", "matches"), [
    ("", True),
    ("app=web", True),
    ("app==web", True),
    ("app=db", False),
    ("app!=db", True),
    ("app!=web", False),
    ("missing!=x", True),          # != matches objects without the key
    ("app in (web,db)", True),
    ("app in (db)", False),
    ("missing in (x)", False),
    ("app notin (db)", True),
    ("app notin (web,db)", False),
    ("missing notin (x)", True),   # notin matches objects without the key
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("rank>4", True),
    ("rank>5", False),
    ("rank<6", True),
    ("rank<5", False),
    ("app>1", False),              # a non-integer value never compares
    ("missing>1", False),
    ("empty=", True),
    ("app=web,tier=front", True),
    ("app=web,tier=back", False),
    ("  app = web , tier in ( front , back ) ", True),
    ("example.com/key!=x", True),
])
def test_label_selector_matching(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is matches


@pytest.mark.parametrize("selector", [
    "app=web,",
    ",app=web",
    "app=(web)",
    "app in web",
    "app in (web",
    "app in ()",
    "app notin ()",
    "!",
    "app=a b",
    "rank>a",
    "rank>",
    "Bad Key=1",
    "app=has space,",
    "app=-bad-",
    "a//b=c",
])
def test_label_selector_errors(selector: str) -> None:
    with pytest.raises(SelectorError, match="unable to parse requirement"):
        parse_label_selector(selector)


def test_label_selector_round_trips_through_str() -> None:
    text = "app=web,tier in (back,front),!legacy,rank>3,env notin (dev)"
    sel = parse_label_selector(text)
    assert parse_label_selector(str(sel)) == sel


FIELDS = {"metadata.name": "web-1", "metadata.namespace": "default", "spec.nodeName": "", "status.phase": "Running"}


@pytest.mark.parametrize(("selector", "matches"), [
    ("", True),
    ("metadata.name=web-1", True),
    ("metadata.name==web-1", True),
    ("metadata.name!=web-1", False),
    ("metadata.name!=web-2", True),
    ("spec.nodeName=", True),                  # unbound pods: kubectl's and the scheduler's query
    ("spec.nodeName!=", False),
    ("status.phase=Running,metadata.namespace=default", True),
    ("status.phase=Running,metadata.namespace=kube-system", False),
    ("absent=", True),                         # a missing field reads as ""
])
def test_field_selector_matching(selector: str, matches: bool) -> None:
    assert parse_field_selector(selector).matches(FIELDS) is matches


def test_field_selector_escapes() -> None:
    sel = parse_field_selector(r"a=x\,y\=z\\,b!=c")
    assert [(t.field, t.operator, t.value) for t in sel.terms] == [("a", "=", "x,y=z\\"), ("b", "!=", "c")]
    assert sel.fields() == {"a", "b"}
    assert sel.value_of("a") == "x,y=z\\"
    assert sel.value_of("b") is None


@pytest.mark.parametrize("selector", ["metadata.name", "a=b=c", r"a=b\q"])
def test_field_selector_errors(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_field_selector(selector)


@given(st.text(max_size=30))
def test_field_value_escaping_round_trips(value: str) -> None:
    sel = parse_field_selector("f=" + escape_field_value(value))
    assert sel.terms[0].value == value


@given(st.text(max_size=40))
def test_label_selector_never_crashes(text: str) -> None:
    try:
        parse_label_selector(text)
    except SelectorError:
        pass
