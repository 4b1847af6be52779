"""`nodeagent server run --config FILE` and `nodeagent server check-config --config FILE`."""

from __future__ import annotations

import argparse
import json
import sys

from nodeagent.cluster.serverconfig import ServerConfig, load_server_config, parse_server_config
from nodeagent.daemonkit.configfile import ConfigError


def _load(path: str | None) -> ServerConfig | None:
    try:
        return load_server_config(path) if path else parse_server_config({}, "defaults")
    except ConfigError as exc:
        for line in exc.errors:
            print(f"{exc.source}: {line}", file=sys.stderr)
        return None


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from nodeagent.cluster.controlplane import ControlPlane
    from nodeagent.daemonkit.logsetup import configure_logging

    config = _load(args.config)
    if config is None:
        return 1
    configure_logging(config.logging.level, config.logging.format)
    try:
        asyncio.run(ControlPlane(config).run())
    except (OSError, ValueError) as exc:  # port taken, unusable storage path
        print(f"nodeagent server: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_config(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        return 1
    print(json.dumps(config.to_dict(), indent=2))
    return 0


def add_server(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "server", help="the control plane: the Kubernetes API (kubectl and client libraries work against it)",
        description="The control plane: serves the Kubernetes API over the cluster's store.")
    sub = parser.add_subparsers(dest="server_command", metavar="COMMAND", required=True)
    run = sub.add_parser("run", help="serve the API until SIGTERM/SIGINT")
    run.add_argument("--config", metavar="FILE", help="server config file (default: built-in defaults)")
    run.set_defaults(func=_run)
    check = sub.add_parser("check-config", help="validate a server config and print it as JSON")
    check.add_argument("--config", metavar="FILE", help="server config file")
    check.set_defaults(func=_check_config)
