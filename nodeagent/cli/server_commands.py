"""`nodeagent scheduler run --config FILE` and `nodeagent scheduler check-config --config FILE`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from nodeagent.cli import daemons

if TYPE_CHECKING:  # the agent's process imports this module too: the scheduler's code stays out of it
    from nodeagent.cluster.config import SchedulerConfig


def _load(path: str | None) -> SchedulerConfig | None:
    from nodeagent.cluster.config import load_scheduler_config, parse_scheduler_config

    return daemons.load(path, load_scheduler_config, parse_scheduler_config)


def _check(config: SchedulerConfig, source: str) -> str | None:
    """Problems only visible with the whole config: unsafe binding, unreadable files."""
    from nodeagent.daemonkit.auth import check_bind_safety
    unsafe = check_bind_safety(config.address, config.authentication, tls=config.tls_cert_file is not None)
    return f"{source}: address: {unsafe}" if unsafe else None


def _run(args: argparse.Namespace) -> int:
    from nodeagent.cluster.server import build_scheduler

    config = _load(args.config)
    if config is None:
        return 1
    if (problem := _check(config, args.config or "defaults")) is not None:
        print(problem, file=sys.stderr)
        return 1

    async def main() -> None:
        service = build_scheduler(config)
        await service.run()

    return daemons.run("scheduler", config, main)  # port taken, unreadable token file, bad database


def _check_config(args: argparse.Namespace) -> int:
    config = _load(args.config)
    problem = _check(config, args.config or "defaults") if config is not None else None
    return daemons.check_config(config, problem)


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
