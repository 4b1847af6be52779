"""structlog configuration: JSON lines when stdout is not a terminal (journald), console otherwise."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "info", fmt: str = "auto",
                      processors: Sequence[structlog.typing.Processor] = ()) -> None:
    """Set up structlog; events read `event_name key=value` (console) or one JSON object a line.

    `processors` run last before the renderer, so whatever they take out of an event is out of every
    line: the control plane passes its redaction there (daemonkit knows nothing of Secrets)."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            *processors,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    """A logger on whatever sys.stderr is now, not on the stream of configure time: a command
    run in-process (a test's capture) may close that stream when it ends."""
    return structlog.PrintLogger(sys.stderr)
