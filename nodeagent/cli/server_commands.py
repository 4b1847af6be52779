"""`nodeagent scheduler run --config FILE` and `nodeagent scheduler check-config --config FILE`."""

from __future__ import annotations

import argparse
import json
import sys

from nodeagent.cluster.config import SchedulerConfig, load_scheduler_config, parse_scheduler_config
from nodeagent.daemonkit.configfile import ConfigError


def _load(path: str | None) -> SchedulerConfig | None:
    try:
        return load_scheduler_config(path) if path else parse_scheduler_config({}, "defaults")
    except ConfigError as exc:
        for line in exc.errors:
            print(f"{exc.source}: {line}", file=sys.stderr)
        return None


def _check(config: SchedulerConfig, source: str) -> str | None:
    """Problems only visible with the whole config: unsafe binding, unreadable files."""
    from nodeagent.daemonkit.auth import check_bind_safety
    unsafe = check_bind_safety(config.address, config.authentication, tls=config.tls_cert_file is not None)
    return f"{source}: address: {unsafe}" if unsafe else None


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from nodeagent.cluster.server import build_scheduler
    from nodeagent.daemonkit.logsetup import configure_logging

    config = _load(args.config)
    if config is None:
        return 1
    source = args.config or "defaults"
    if (problem := _check(config, source)) is not None:
        print(problem, file=sys.stderr)
        return 1
    configure_logging(config.logging.level, config.logging.format)

    async def main() -> None:
        service = build_scheduler(config)
        await service.run()

    try:
        asyncio.run(main())
    except (OSError, ValueError) as exc:  # port taken, unreadable token file, bad database
        print(f"nodeagent scheduler: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_config(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        return 1
    if (problem := _check(config, args.config or "defaults")) is not None:
        print(problem, file=sys.stderr)
        return 1
    print(json.dumps(config.to_dict(), indent=2))
    return 0


def add_scheduler(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "scheduler", help="the central scheduler (places pods on nodes)",
        description="The central scheduler: keeps the cluster's desired state (namespaces, pods, "
                    "priority classes, quotas), learns node status from the agents and places pods.")
    sub = parser.add_subparsers(dest="scheduler_command", metavar="COMMAND", required=True)
    run = sub.add_parser("run", help="run the scheduler until SIGTERM/SIGINT",
                         description="Serve the cluster API and schedule pods onto the agents.")
    run.add_argument("--config", metavar="FILE", help="scheduler config file (default: built-in defaults)")
    run.set_defaults(func=_run)
    check = sub.add_parser("check-config", help="validate a scheduler config and print it as JSON")
    check.add_argument("--config", metavar="FILE", help="scheduler config file")
    check.set_defaults(func=_check_config)
