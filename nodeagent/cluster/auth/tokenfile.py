"""kube-apiserver's static token file (--token-auth-file): CSV lines `token,user,uid[,"g1,g2"]`.

Read as upstream reads it (Go's encoding/csv: quoted fields, no comments, no trimming, more than
four columns allowed and ignored, blank lines skipped), with stricter errors where upstream only
warns, because a token file is a security boundary and a silent surprise there is worse than a
refused start: a duplicate token (upstream: warn, the last line wins) and an empty user name
are errors, each naming its line. An empty token is skipped with a warning, as upstream.

Tokens are kept only as SHA-256 digests for lookups, so a memory dump or a log of this object
shows no token; `token_for_user` re-reads nothing and exists for `nodeagent server kubeconfig`.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass

import structlog

from nodeagent.cluster.auth.user import UserInfo

log = structlog.get_logger(__name__)


class TokenFileError(ValueError):
    """A token file that cannot be used; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    line: int
    token: str
    user: UserInfo


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_token_file(text: str, source: str) -> tuple[list[TokenEntry], list[str]]:
    """The entries of a token file's text, and warnings (`<source> line N: ...`) to log."""
    text = text.removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    entries: list[TokenEntry] = []
    warnings: list[str] = []
    seen: dict[str, int] = {}
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise TokenFileError(f"{source} line {reader.line_num}: {e}") from None
        line = reader.line_num
        if not record:
            continue
        where = f"{source} line {line}"
        if len(record) < 3:
            raise TokenFileError(f"{where}: must have at least 3 columns (token, user name, user uid), "
                                 f"found {len(record)}")
        token, name, uid = record[0], record[1], record[2]
        if token == "":
            warnings.append(f"{where}: empty token, line skipped")
            continue
        if any(c.isspace() for c in token):
            raise TokenFileError(f"{where}: the token contains white space (a bearer token cannot carry it)")
        if name == "":
            raise TokenFileError(f"{where}: the user name (column 2) must not be empty")
        if token in seen:
            raise TokenFileError(f"{where}: duplicate token (also on line {seen[token]})")
        seen[token] = line
        groups = tuple(g for g in record[3].split(",") if g) if len(record) >= 4 else ()
        entries.append(TokenEntry(line, token, UserInfo(name=name, uid=uid, groups=groups)))
    return entries, warnings


class TokenFile:
    """Bearer tokens from a token file; `authenticate_token` gives the user or None (not one of
    ours: the chain turns that into 401 if no other authenticator knows the token)."""

    def __init__(self, entries: list[TokenEntry], source: str = "") -> None:
        self.source = source
        self._by_digest = {_digest(e.token): e.user for e in entries}
        self._by_user: dict[str, str] = {}
        for e in entries:
            self._by_user.setdefault(e.user.name, e.token)

    @classmethod
    def load(cls, path: str) -> TokenFile:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise TokenFileError(f"cannot read token file {path}: {getattr(e, 'strerror', None) or e}") from None
        entries, warnings = parse_token_file(text, path)
        for w in warnings:
            log.warning("token_file_warning", problem=w)
        return cls(entries, path)

    def __len__(self) -> int:
        return len(self._by_digest)

    def authenticate_token(self, token: str) -> UserInfo | None:
        return self._by_digest.get(_digest(token))

    def token_for_user(self, name: str) -> str | None:
        """The first token of user `name` in the file (for a kubeconfig), or None."""
        return self._by_user.get(name)
