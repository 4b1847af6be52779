"""kube-apiserver's static token file: parsing as upstream (Go csv), errors naming the line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.cluster.auth.tokenfile import TokenFile, TokenFileError, parse_token_file
from nodeagent.cluster.auth.user import UserInfo

PARSE_CASES = [
    # (text, [(token, user, uid, groups)])
    ("abc,alice,1\n", [("abc", "alice", "1", ())]),
    ('abc,alice,1,"system:masters,dev"\n', [("abc", "alice", "1", ("system:masters", "dev"))]),
    ("abc,alice,1,ops\n", [("abc", "alice", "1", ("ops",))]),
    ("abc,alice,1,ops,ignored,columns\n", [("abc", "alice", "1", ("ops",))]),
    ("abc,alice,1,\n", [("abc", "alice", "1", ())]),  # an empty groups column: no groups
    ('abc,alice,1,"a,,b"\n', [("abc", "alice", "1", ("a", "b"))]),
    ("\nabc,alice,1\n\nxyz,bob,2\n", [("abc", "alice", "1", ()), ("xyz", "bob", "2", ())]),  # blank lines skipped
    ("abc,alice,1", [("abc", "alice", "1", ())]),  # no final newline
    ("abc,alice,1\r\nxyz,bob,2\r\n", [("abc", "alice", "1", ()), ("xyz", "bob", "2", ())]),  # CRLF
    ("\ufeffabc,alice,1\n", [("abc", "alice", "1", ())]),  # a BOM is not part of the token
    ('"a""b",alice,1\n', [('a"b', "alice", "1", ())]),  # quoted, with an escaped quote
    ("abc,alice,\n", [("abc", "alice", "", ())]),  # an empty uid is allowed (upstream too)
    ("", []),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_CASES)
def test_parse(text: str, expected: list[tuple[str, str, str, tuple[str, ...]]]) -> None:
    entries, warnings = parse_token_file(text, "/etc/tokens.csv")
    assert [(e.token, e.user.name, e.user.uid, e.user.groups) for e in entries] == expected
    assert warnings == []


ERROR_CASES = [
    ("abc,alice\n", "/t.csv line 1: must have at least 3 columns (token, user name, user uid), found 2"),
    ("ok,bob,1\nabc\n", "/t.csv line 2: must have at least 3 columns (token, user name, user uid), found 1"),
    ("# comment\n", "/t.csv line 1: must have at least 3 columns"),  # Go's csv has no comments
    ("abc,,1\n", "/t.csv line 1: the user name (column 2) must not be empty"),
    ("abc,alice,1\nabc,bob,2\n", "/t.csv line 2: duplicate token (also on line 1)"),
    ("a b,alice,1\n", "/t.csv line 1: the token contains white space"),
    ('"abc,alice,1\n', "/t.csv line"),  # unterminated quote
]


@pytest.mark.parametrize(("text", "message"), ERROR_CASES)
def test_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(TokenFileError) as exc:
        parse_token_file(text, "/t.csv")
    assert str(exc.value).startswith(message)


def test_empty_token_is_skipped_with_a_warning() -> None:
    entries, warnings = parse_token_file(",alice,1\nabc,bob,2\n", "/t.csv")
    assert [e.user.name for e in entries] == ["bob"]
    assert warnings == ["/t.csv line 1: empty token, line skipped"]


def test_token_file_authenticates_and_keeps_no_plain_token_for_lookups(tmp_path) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text('s3cret,alice,u-1,"system:masters"\nother,bob,u-2\n')
    tf = TokenFile.load(str(path))
    assert len(tf) == 2
    assert tf.authenticate_token("s3cret") == UserInfo("alice", "u-1", ("system:masters",))
    assert tf.authenticate_token("S3CRET") is None
    assert tf.authenticate_token("") is None
    assert tf.token_for_user("bob") == "other"
    assert tf.token_for_user("carol") is None
    assert "s3cret" not in repr(vars(tf)["_by_digest"])


def test_unreadable_token_file_names_the_path(tmp_path) -> None:
    with pytest.raises(TokenFileError, match="cannot read token file .*missing.csv"):
        TokenFile.load(str(tmp_path / "missing.csv"))


@given(st.text(alphabet=st.sampled_from('ab,"\n\r \t#\ufeff'), max_size=60))
def test_any_text_parses_or_fails_clearly(text: str) -> None:
    try:
        entries, _ = parse_token_file(text, "/t.csv")
    except TokenFileError as e:
        assert str(e).startswith("/t.csv line ")
        return
    assert all(e.token and e.user.name for e in entries)
