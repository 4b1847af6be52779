"""What the control plane's daemon verbs share (`nodeagent server ...` in controlplane_commands,
`nodeagent scheduler ...` in server_commands): loading the config file (every problem printed with
the file's name), `check-config`'s JSON, and running the daemon with its logging set up and a
one-line error when it cannot start."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from nodeagent.daemonkit.configfile import ConfigError, LoggingConfig


class DaemonConfig(Protocol):
    @property
    def logging(self) -> LoggingConfig: ...

    def to_dict(self) -> dict[str, Any]: ...


C = TypeVar("C", bound=DaemonConfig)


def load(path: str | None, load_file: Callable[[str], C], parse: Callable[[Any, str], C]) -> C | None:
    """The config at `path` (no path: the built-in defaults); None after printing its problems."""
    try:
        return load_file(path) if path else parse({}, "defaults")
    except ConfigError as exc:
        for line in exc.errors:
            print(f"{exc.source}: {line}", file=sys.stderr)
        return None


def check_config(config: DaemonConfig | None, problem: str | None = None) -> int:
    """`check-config`: print the effective config as JSON, or the problem (exit status 1)."""
    if config is None:
        return 1
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    print(json.dumps(config.to_dict(), indent=2))
    return 0


def run(name: str, config: DaemonConfig, main: Callable[[], Coroutine[Any, Any, None]],
        log_processors: Sequence[Callable[..., Any]] = ()) -> int:
    """Set up logging (with `log_processors` last before the renderer), run `main()` until it returns;
    `nodeagent <name>: <error>` and exit status 1 when it cannot run (a port taken, an unreadable
    file, an unusable database)."""
    import asyncio

    from nodeagent.daemonkit.logsetup import configure_logging

    configure_logging(config.logging.level, config.logging.format, log_processors)
    try:
        asyncio.run(main())
    except (OSError, ValueError) as exc:
        print(f"nodeagent {name}: {exc}", file=sys.stderr)
        return 1
    return 0
