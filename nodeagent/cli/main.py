"""The `nodeagent` command: one argparse subcommand per verb, one small function per subcommand.

To add a verb: write `_add_<verb>(subparsers)` that registers it with `set_defaults(func=...)`
and append it to SUBCOMMANDS. Each handler takes the parsed args and returns the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from nodeagent.agent.config.settings import Config, config_warnings, load_config, load_default_config
from nodeagent.agent.config.thresholds import ALLOCATABLE_MEMORY_AVAILABLE, Threshold, format_percentage
from nodeagent.agent.node.allocatable import allocatable_for
from nodeagent.agent.node.capacity import Capacity, discover_capacity
from nodeagent.core.duration import format_go_duration
from nodeagent.core.quantity import Quantity
from nodeagent.daemonkit.configfile import ConfigError


def _quantities(values: dict[str, Quantity]) -> dict[str, str]:
    return {name: str(q) for name, q in values.items()}


def _threshold_json(threshold: Threshold, capacity: int) -> dict[str, Any]:
    value: dict[str, str] = (
        {"quantity": str(threshold.quantity)}
        if threshold.quantity is not None
        else {"percentage": threshold.value_text()}
    )
    min_reclaim: dict[str, str] | None = None
    if threshold.min_reclaim is not None:
        min_reclaim = {"quantity": str(threshold.min_reclaim)}
    elif threshold.min_reclaim_percentage is not None:
        min_reclaim = {"percentage": format_percentage(threshold.min_reclaim_percentage)}
    return {
        "signal": threshold.signal,
        "operator": threshold.operator,
        "value": value,
        "absolute": threshold.value_for(capacity),
        "gracePeriod": format_go_duration(threshold.grace_period),
        "minReclaim": min_reclaim,
        "hard": threshold.hard,
    }


def check_config_report(config: Config, capacity: Capacity) -> dict[str, Any]:
    """The check-config JSON: effective config, thresholds, capacity and allocatable."""
    cap = capacity.as_quantities()
    resources = allocatable_for(capacity, config)
    allocatable, enforced = resources.allocatable, resources.pods_limits
    signal_capacity = {
        "memory": capacity.memory,
        "ephemeral-storage": capacity.ephemeral_storage,
        "inodes": capacity.inodes,
        "pids": capacity.pid_max,
    }

    def capacity_for(threshold: Threshold) -> int:
        if threshold.signal == ALLOCATABLE_MEMORY_AVAILABLE:  # measured against the pods cgroup
            return enforced["memory"].value()
        return signal_capacity[threshold.resource]

    return {
        "config": config.to_dict(),
        "thresholds": [_threshold_json(t, capacity_for(t)) for t in config.thresholds],
        "capacity": _quantities(cap),
        "machine": {"nodefsPath": config.nodefs_path, "inodes": capacity.inodes, "pidMax": capacity.pid_max},
        "allocatable": _quantities(allocatable),
        "enforcedAllocatable": _quantities(enforced),
        "warnings": config_warnings(config),
    }


def _load(args: argparse.Namespace) -> Config | None:
    """The config from --config (or the embedded defaults); None after printing one line per error."""
    try:
        return load_config(args.config) if args.config else load_default_config()
    except ConfigError as exc:
        for line in exc.errors:
            print(f"{exc.source}: {line}", file=sys.stderr)
        return None


def _check_config(args: argparse.Namespace) -> int:
    """Validate a config file and print what it means on this machine, as JSON."""
    config = _load(args)
    if config is None:
        return 1
    source = args.config or "defaults"
    try:
        capacity = discover_capacity(config.nodefs_path or config.state_dir, config.max_pods)
    except OSError as exc:
        print(f"{source}: cannot read this machine's capacity: {exc}", file=sys.stderr)
        return 1
    problems = allocatable_for(capacity, config).problems
    if problems:
        for problem in problems:
            print(f"{source}: allocatable.{problem}", file=sys.stderr)
        return 1
    report = check_config_report(config, capacity)
    for warning in report["warnings"]:
        print(f"{source}: warning: {warning}", file=sys.stderr)
    print(json.dumps(report, indent=2))
    return 0


def _add_check_config(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "check-config",
        help="validate a config file and print the effective settings as JSON",
        description="Validate FILE (default: the embedded defaults) and print the effective config, "
        "eviction thresholds, this machine's capacity and the resulting allocatable as JSON. "
        "Exit 1 with one `FILE: key: message` line per problem on stderr.",
    )
    parser.add_argument("--config", metavar="FILE", help="config file (default: the embedded defaults.yaml)")
    parser.set_defaults(func=_check_config)


def _run(args: argparse.Namespace) -> int:
    """Start the agent on a config file and serve until SIGTERM/SIGINT."""
    import asyncio

    from nodeagent.agent.daemon import build_agent
    from nodeagent.daemonkit import stackdump
    from nodeagent.daemonkit.heap import cap_malloc_arenas
    from nodeagent.daemonkit.logsetup import configure_logging

    cap_malloc_arenas()  # before any thread allocates: every arena keeps freed memory of its own
    stackdump.install_thread_dump()  # kill -USR1: where a start-up that never gets ready is
    config = _load(args)
    if config is None:
        return 1
    configure_logging(config.logging.level, config.logging.format)
    try:
        agent = build_agent(config, config_path=args.config)
    except (OSError, ValueError) as exc:
        print(f"{args.config or 'defaults'}: cannot start: {exc}", file=sys.stderr)
        return 1
    try:
        asyncio.run(agent.run())
    except (OSError, ValueError) as exc:  # e.g. the port is taken, the socket is in use
        print(f"nodeagent: {exc}", file=sys.stderr)
        return 1
    return 0


def _add_run(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run", help="run the node agent",
        description="Run the node agent on FILE (default: the embedded defaults) until SIGTERM/SIGINT. "
        "Pods keep running when the agent stops and are re-adopted when it starts again.",
    )
    parser.add_argument("--config", metavar="FILE", help="config file (default: the embedded defaults.yaml)")
    parser.set_defaults(func=_run)


Subcommand = Callable[[argparse._SubParsersAction], None]  # type: ignore[type-arg]

# The agent's own verbs. `nodeagent run` builds its parser from these alone: the other verbs'
# modules (the API client, its renderers, exec's websocket client, image and control-plane
# commands) are never imported into the agent's long-lived process (~0.3 MiB of its RSS).
AGENT_SUBCOMMANDS: list[Subcommand] = [_add_check_config, _add_run]
AGENT_VERBS = frozenset({"check-config", "run"})


def all_subcommands() -> list[Subcommand]:
    """Every verb, in `--help` order; imports the client and control-plane verbs' modules."""
    from nodeagent.cli.client_commands import SUBCOMMANDS as CLIENT_SUBCOMMANDS
    from nodeagent.cli.controlplane_commands import add_server
    from nodeagent.cli.exec_command import add_exec
    from nodeagent.cli.image_commands import add_image
    from nodeagent.cli.server_commands import add_scheduler

    return [
        *AGENT_SUBCOMMANDS,
        *CLIENT_SUBCOMMANDS,  # status, pods, apply, delete, logs, events
        add_exec,  # exec NS/NAME -- CMD
        add_image,  # image pull | import | ls | rm
        add_scheduler,  # scheduler run | check-config
        add_server,  # server run | check-config
    ]


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser for `verb`'s command line: only the agent's verbs when `verb` is one of them
    (same usage and help for it), else every verb."""
    parser = argparse.ArgumentParser(prog="nodeagent", description="A kubelet-like node resource manager.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in AGENT_SUBCOMMANDS if verb in AGENT_VERBS else all_subcommands():
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: `nodeagent COMMAND ...`; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list[0] if args_list else None)
    args = parser.parse_args(args_list)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return int(func(args))
