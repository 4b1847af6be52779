"""What a YAML parse failure says, in one wording for every reader of YAML (request bodies,
config files, static pod files, the CLI's manifests): `invalid YAML: <context, problem> (line L,
column C)`, with the 1-based position PyYAML marks, when it marks one."""

from __future__ import annotations

from dataclasses import dataclass

import yaml


@dataclass(frozen=True)
class YamlProblem:
    what: str  # PyYAML's context and problem ("while parsing ..., expected ..."), else its message
    line: int | None = None  # 1-based
    column: int | None = None

    @classmethod
    def of(cls, error: BaseException) -> YamlProblem:
        """From a yaml.YAMLError (marked or not) or the RecursionError a deep document raises."""
        if isinstance(error, yaml.MarkedYAMLError):
            what = ", ".join(p for p in (error.context, error.problem) if p) or str(error)
            mark = error.problem_mark
            if mark is not None:
                return cls(what, mark.line + 1, mark.column + 1)
            return cls(what)
        return cls(str(error))

    @property
    def where(self) -> str:
        """"line L, column C", or "" when PyYAML gave no position."""
        return f"line {self.line}, column {self.column}" if self.line is not None else ""

    def __str__(self) -> str:
        return f"invalid YAML: {self.what} ({self.where})" if self.where else f"invalid YAML: {self.what}"
