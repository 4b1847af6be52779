"""Kubernetes' $(VAR) expansion (third_party/forked/golang/expansion), used for env values,
command and args: "$(NAME)" becomes the value of a defined NAME and stays as written otherwise;
"$$" is a literal "$". Pure; shared by env resolution (core.downward) and the spawn shim's argv.
"""

from __future__ import annotations

from collections.abc import Mapping


def expand(text: str, env: Mapping[str, str]) -> str:
    """Replace $(VAR) references to defined names; "$$" is "$"; everything else stays as written."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)
