"""`nodeagent server run --config FILE` and `nodeagent server check-config --config FILE`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from nodeagent.cli import daemons

if TYPE_CHECKING:  # the agent's process imports this module too: the server's code stays out of it
    from nodeagent.cluster.serverconfig import ServerConfig


def _load(path: str | None) -> ServerConfig | None:
    from nodeagent.cluster.serverconfig import load_server_config, parse_server_config

    return daemons.load(path, load_server_config, parse_server_config)


def _run(args: argparse.Namespace) -> int:
    """Serve; every log line goes through the auth room's redaction last, so a Secret's values or a
    credential handed to a log call (the debug request log's bodies, a mistake) never reach the log."""
    from nodeagent.cluster.auth.redact import redact_processor
    from nodeagent.cluster.controlplane import ControlPlane
    from nodeagent.daemonkit.heap import cap_malloc_arenas, fix_mmap_threshold, freeze_startup_heap

    cap_malloc_arenas()  # before any thread allocates: every arena keeps freed memory of its own
    fix_mmap_threshold()  # a LIST's body and items go back to the system when freed (bench/README.md)
    config = _load(args.config)
    if config is None:
        return 1
    # once it listens, the start-up heap (modules, the 1.37 schema) leaves the cyclic collector's
    # reach: a full collection walked ~80,000 objects, 40-50 ms with the loop stopped
    def listening(_port: int) -> None:
        freeze_startup_heap()

    return daemons.run("server", config, lambda: ControlPlane(config).run(ready=listening),
                       log_processors=(redact_processor,))  # port taken, unusable storage path


def _check_config(args: argparse.Namespace) -> int:
    return daemons.check_config(_load(args.config))


def _kubeconfig(args: argparse.Namespace) -> int:
    """A kubeconfig for kubectl: the server's CA, and the user's token from the token file, or else a
    client certificate for the user (groups from --group) signed by the server's client CA."""
    import yaml

    from nodeagent.cluster.auth.kubeconfig import build_kubeconfig
    from nodeagent.cluster.auth.pki import default_hosts, ensure_pki, issue_client_certificate
    from nodeagent.cluster.auth.tokenfile import TokenFile
    from nodeagent.daemonkit.logsetup import configure_logging

    configure_logging()  # to stderr: stdout is the kubeconfig (first use creates the PKI, and says so)
    config = _load(args.config)
    if config is None:
        return 1
    if config.security is None:
        print(f"{args.config or 'defaults'}: security: not set: the server runs plain HTTP without "
              "authentication; kubectl needs only `--server " + config.url + "`", file=sys.stderr)
        return 1
    if config.port == 0:
        print(f"{args.config or 'defaults'}: port: 0 (any free port) cannot go into a kubeconfig", file=sys.stderr)
        return 1
    try:
        pki = ensure_pki(config.tls_dir, default_hosts(config.security.tls_san))
        token = None
        if config.security.token_auth_file:
            token = TokenFile.load(config.security.token_auth_file).token_for_user(args.user)
        if token is not None:
            doc = build_kubeconfig(config.url, pki.server_ca.cert_pem, user=args.user, token=token)
        else:
            cert = issue_client_certificate(pki.client_ca, args.user, tuple(args.group))
            doc = build_kubeconfig(config.url, pki.server_ca.cert_pem, user=args.user,
                                   client_cert_pem=cert.cert_pem, client_key_pem=cert.key_pem)
    except (OSError, ValueError) as exc:
        print(f"nodeagent server kubeconfig: {exc}", file=sys.stderr)
        return 1
    print(yaml.safe_dump(doc, sort_keys=False), end="")
    return 0


def add_server(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "server", help="the control plane: the Kubernetes API (kubectl and client libraries work against it)",
        description="The control plane: serves the Kubernetes API over the cluster's store.")
    sub = parser.add_subparsers(dest="server_command", metavar="COMMAND", required=True)
    run = sub.add_parser("run", help="serve the API until SIGTERM/SIGINT")
    run.add_argument("--config", metavar="FILE", help="server config file (default: built-in defaults)")
    run.set_defaults(func=_run)
    kc = sub.add_parser("kubeconfig", help="print a kubeconfig for kubectl (the server's CA and a credential)")
    kc.add_argument("--config", metavar="FILE", help="server config file")
    kc.add_argument("--user", default="admin", help="the user (default admin: a token of the token file, or a "
                                                    "client certificate)")
    kc.add_argument("--group", action="append", default=[],
                    help="a group of the client certificate (repeat; e.g. system:masters)")
    kc.set_defaults(func=_kubeconfig)
    check = sub.add_parser("check-config", help="validate a server config and print it as JSON")
    check.add_argument("--config", metavar="FILE", help="server config file")
    check.set_defaults(func=_check_config)
