"""The client verbs of `nodeagent`: status, pods, apply, delete, logs, events.

Each talks to a running agent through nodeagent.cli.client (its Unix socket by default) and renders
with nodeagent.cli.render. Every failure is one `nodeagent: ...` line on stderr and exit status 1;
Ctrl-C is exit 130; neither ever shows a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO, TypeAlias

import yaml

from nodeagent.agent.config.settings import UNIX_SOCKET_NAME, load_config, load_default_config
from nodeagent.cli import render
from nodeagent.cli.client import Client, ClientError, Target
from nodeagent.daemonkit.configfile import ConfigError
from nodeagent.daemonkit.yamlerrors import YamlProblem

DEFAULT_CONFIG = "/etc/nodeagent/config.yaml"
FOLLOW_WINDOW = 1000  # lines re-read per poll to find where the previous poll ended
POLL_INTERVAL = 1.0
_sleep = time.sleep  # tests replace it
Command = Callable[[argparse.Namespace, Client], int]
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class UsageError(Exception):
    """Bad arguments or local input (a manifest file, a token file): one line, exit 1."""


# ---- connection ----
def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read token file {path}: {getattr(e, 'strerror', None) or e}") from None
    if not token:
        raise UsageError(f"token file {path} is empty")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise UsageError(f"token file {path} must hold one token without spaces or control characters")
    return token


def socket_path_from_config(config_path: str | None, default_path: str = DEFAULT_CONFIG) -> str:
    """The `unixSocket` of the config file (unset there: `<stateDir>/nodeagent.sock`), the file
    being /etc/nodeagent/config.yaml if it exists, else the embedded defaults."""
    path = config_path or (default_path if os.path.exists(default_path) else None)
    try:
        config = load_config(path) if path else load_default_config()
    except ConfigError as e:
        raise UsageError(f"{e.source}: {e.errors[0] if e.errors else 'invalid config'}") from None
    if config.unix_socket is None:
        raise UsageError(f"{path or 'the embedded defaults'}: unixSocket is null (no socket): "
                         "use --server URL with --token-file")
    return config.unix_socket


def target_from_args(args: argparse.Namespace) -> Target:
    tls = [flag for flag, value in (("--cacert", args.cacert), ("--cert", args.cert),
                                    ("--key", args.key), ("--token-file", args.token_file)) if value]
    if args.server is None:
        if tls:
            raise UsageError(f"{tls[0]} needs --server (the Unix socket needs no credentials)")
        socket = args.socket or socket_path_from_config(args.config)
        return Target(socket_path=socket)
    if args.socket or args.config:
        raise UsageError("give --server or --socket/--config, not both")
    token = _read_token(args.token_file) if args.token_file else None
    return Target(url=args.server, token=token, cacert=args.cacert, cert=args.cert, key=args.key)


def _connection_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")
    g.add_argument("--config", metavar="FILE",
                   help=f"agent config whose unixSocket to use (unset there: stateDir/{UNIX_SOCKET_NAME}) "
                        f"(default: {DEFAULT_CONFIG} if it exists, else the embedded defaults)")
    g.add_argument("--socket", metavar="PATH", help="the agent's Unix socket (overrides --config)")
    g.add_argument("--server", metavar="URL", help="talk HTTP(S) to URL instead of the Unix socket")
    g.add_argument("--token-file", metavar="FILE", help="bearer token for --server")
    g.add_argument("--cacert", metavar="FILE", help="CA bundle to verify an https --server")
    g.add_argument("--cert", metavar="FILE", help="client certificate for an https --server")
    g.add_argument("--key", metavar="FILE", help="client key for --cert")
    return p


def _runs(command: Command) -> Callable[[argparse.Namespace], int]:
    """Wrap a verb: build the client, turn every expected failure into one stderr line."""
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args, Client(target_from_args(args)))
        except (ClientError, UsageError) as e:
            print(f"nodeagent: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:  # `nodeagent pods | head`: stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
    run.__doc__ = command.__doc__
    return run


def parser_for(sub: SubParsers, name: str, command: Command, help_: str,
               description: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_, description=description, parents=[_connection_options()])
    p.set_defaults(func=_runs(command))
    return p


def pod_ref(ref: str, namespace: str | None) -> tuple[str, str]:
    """NS/NAME, or NAME in -n NS (default "default")."""
    if "/" in ref:
        ns, _, name = ref.partition("/")
        if not ns or not name or "/" in name:
            raise UsageError(f"{ref!r} is not NAMESPACE/NAME")
        if namespace and namespace != ns:
            raise UsageError(f"{ref!r} names namespace {ns!r} but -n says {namespace!r}")
        return ns, name
    if not ref:
        raise UsageError("a pod name is required")
    return namespace or "default", ref


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def _write(text: str, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    stream.write(text)
    stream.flush()


# ---- status, pods, events ----
def cmd_status(args: argparse.Namespace, client: Client) -> int:
    """The node's conditions and resources, and its pods."""
    node = client.node()
    pods = _items(client.pod_list())
    _write(render.format_status(node, pods, time.time()))
    return 0


def _items(listing: dict[str, Any]) -> list[dict[str, Any]]:
    items = listing.get("items")
    if not isinstance(items, list):
        raise ClientError("the agent answered a list without items")
    return [i for i in items if isinstance(i, dict)]


def _dump(obj: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(obj, indent=2) + "\n"
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)


def cmd_pods(args: argparse.Namespace, client: Client) -> int:
    """The pods, as a table or as the PodList JSON/YAML."""
    listing = client.pod_list(args.namespace)
    if args.output in ("json", "yaml"):
        _write(_dump(listing, args.output))
        return 0
    pods = _items(listing)
    if not pods:
        where = f' in namespace "{args.namespace}"' if args.namespace else ""
        print(f"No pods{where}.", file=sys.stderr)
        return 0
    _write(render.format_pods(pods, time.time(), wide=args.output == "wide"))
    return 0


def cmd_events(args: argparse.Namespace, client: Client) -> int:
    """Recent events, oldest first."""
    listing = client.events()
    if args.output in ("json", "yaml"):
        _write(_dump(listing, args.output))
        return 0
    events = _items(listing)
    if not events:
        print("No events.", file=sys.stderr)
        return 0
    _write(render.format_events(events, time.time()))
    return 0


# ---- apply, delete ----
def _json_value(value: Any) -> Any:
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__} value cannot be sent as JSON")


def read_manifests(path: str, stdin: TextIO | None = None) -> list[dict[str, Any]]:
    """Every object in a YAML or JSON file (`-` for stdin): several documents, `kind: List`."""
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = (stdin or sys.stdin).read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {source}: {getattr(e, 'strerror', None) or e}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except (yaml.YAMLError, RecursionError) as e:
        raise UsageError(f"{source}: {YamlProblem.of(e)}") from None
    objects: list[dict[str, Any]] = []
    for i, doc in enumerate(docs, 1):
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for obj in items if isinstance(items, list) else [items]:
            if not isinstance(obj, dict):
                raise UsageError(f"{source}: document {i} is not an object (a pod manifest)")
            try:
                objects.append(json.loads(json.dumps(obj, default=_json_value, allow_nan=False)))
            except (TypeError, ValueError) as e:
                raise UsageError(f"{source}: document {i}: {e}") from None
    if not objects:
        raise UsageError(f"{source}: no objects to apply")
    return objects


def _name_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return str(name) if name else "<unnamed>"


def cmd_apply(args: argparse.Namespace, client: Client) -> int:
    """Create each pod in the files; report each; exit 1 if any failed."""
    objects = [obj for path in args.filename for obj in read_manifests(path)]
    failed = 0
    for obj in objects:
        name = _name_of(obj)
        try:
            pod = client.create_pod(obj, args.namespace)
        except ClientError as e:
            if e.code is None:  # the agent is unreachable: the rest would fail the same way
                raise
            failed += 1
            message = e.message if f'"{name}"' in e.message else f"pod/{name}: {e.message}"
            print(f"nodeagent: {message}", file=sys.stderr)
            continue
        _write(f"pod/{render.clean(_name_of(pod) if _name_of(pod) != '<unnamed>' else name)} created\n")
    return 1 if failed else 0


def cmd_delete(args: argparse.Namespace, client: Client) -> int:
    """Begin terminating each pod; the agent stops its containers in the background."""
    refs = [pod_ref(r, args.namespace) for r in args.pods]
    failed = 0
    for ns, name in refs:
        try:
            client.delete_pod(ns, name, args.grace_period)
        except ClientError as e:
            if e.code is None:
                raise
            failed += 1
            print(f"nodeagent: {e.message}", file=sys.stderr)
            continue
        _write(f"pod/{render.clean(name)} deleted\n")
    return 1 if failed else 0


# ---- logs ----
def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _overlap(seen: list[str], lines: list[str]) -> int:
    """The largest m with seen[-m:] == lines[:m]: how many of `lines` were already shown."""
    for m in range(min(len(seen), len(lines)), 0, -1):
        if seen[-1] == lines[m - 1] and seen[-m:] == lines[:m]:
            return m
    return 0


class LogFollower:
    """Turns successive reads of a log's last `window` lines into only the lines not yet shown.

    While the log is shorter than the window every read holds all of it and counting is exact.
    Beyond that the new lines are those after the longest overlap with the previous read; a log
    whose last `window` lines repeat exactly (one line printed over and over) cannot be told
    apart from an unchanged one, which is the limit of following by polling the tail.
    """

    def __init__(self, window: int = FOLLOW_WINDOW) -> None:
        self.window = window
        self.seen: list[str] | None = None

    def reset(self) -> None:
        """The container started a new run (a new log file): everything read next is new."""
        self.seen = None

    def feed(self, lines: list[str]) -> list[str]:
        """The lines of this read that the previous reads did not hold."""
        seen, self.seen = self.seen, lines[-self.window:]
        if seen is None:
            return lines
        if len(lines) < self.window:  # the whole log: count exactly
            n = len(seen)
            return lines[n:] if n < self.window and lines[:n] == seen else lines  # else: began again
        return lines[_overlap(seen, lines):]


def _run_key(pod: dict[str, Any], container: str | None) -> tuple[object, ...]:
    """Identifies one run of the followed container: the pod's uid and the restart count."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    match = [s for s in statuses if isinstance(s, dict) and (container is None or s.get("name") == container)]
    restarts = match[0].get("restartCount") if len(match) == 1 else None
    return (pod.get("metadata") or {}).get("uid"), restarts


def follow_log(client: Client, ns: str, name: str, container: str | None, tail: int | None,
               out: TextIO, interval: float = POLL_INTERVAL,
               sleep: Callable[[float], None] | None = None, window: int | None = None) -> int:
    """Print the log, then poll for new lines until the pod is gone or has finished (exit 0)."""
    sleep = sleep or _sleep
    follower = LogFollower(window or FOLLOW_WINDOW)
    pod = client.pod(ns, name)
    key = _run_key(pod, container)
    lines = _lines(client.log(ns, name, container,
                              None if tail is None else max(tail, follower.window)))
    follower.feed(lines)
    shown = lines if tail is None else lines[max(0, len(lines) - tail):]
    _write("".join(line + "\n" for line in shown), out)
    while (pod.get("status") or {}).get("phase") not in render.TERMINAL_PHASES:
        sleep(interval)
        try:
            pod = client.pod(ns, name)
            if _run_key(pod, container) != key:
                key = _run_key(pod, container)
                follower.reset()
            text = client.log(ns, name, container, follower.window)
        except ClientError as e:
            if e.code == 404:  # the pod is gone
                return 0
            raise
        new = follower.feed(_lines(text))
        if new:
            _write("".join(line + "\n" for line in new), out)
    return 0


def cmd_logs(args: argparse.Namespace, client: Client) -> int:
    """A container's log; with -f, keep printing new lines."""
    ns, name = pod_ref(args.pod, args.namespace)
    if args.follow:
        return follow_log(client, ns, name, args.container, args.tail, sys.stdout,
                          interval=args.poll_interval)
    _write(client.log(ns, name, args.container, args.tail))
    return 0


# ---- argparse ----
def _add_status(sub: SubParsers) -> None:
    parser_for(sub, "status", cmd_status, "show the node, its resources and its pods",
            "Node name and conditions; capacity, allocatable, requested (the sum of active pods' "
            "requests) and used, per resource; then the pods.")


def _add_pods(sub: SubParsers) -> None:
    p = parser_for(sub, "pods", cmd_pods, "list the pods", "List the pods on the node.")
    p.add_argument("-n", "--namespace", help="only this namespace")
    p.add_argument("-o", "--output", choices=("wide", "json", "yaml"), help="output format")


def _add_apply(sub: SubParsers) -> None:
    p = parser_for(sub, "apply", cmd_apply, "create pods from manifests",
                "Create every pod in FILE (YAML or JSON; several documents or a `kind: List` "
                "allowed; `-` reads stdin). Prints `pod/NAME created` or the error for each.")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="manifest file, or - for stdin (repeatable)")
    p.add_argument("-n", "--namespace", help="namespace for pods that do not name one")


def _add_delete(sub: SubParsers) -> None:
    p = parser_for(sub, "delete", cmd_delete, "delete pods",
                "Delete pods given as NAMESPACE/NAME, or NAME with -n (default namespace: default).")
    p.add_argument("pods", nargs="+", metavar="NS/NAME")
    p.add_argument("-n", "--namespace", help="namespace for bare names")
    p.add_argument("--grace-period", type=_non_negative, metavar="N",
                   help="seconds to wait between SIGTERM and SIGKILL (default: the pod's own)")


def _add_logs(sub: SubParsers) -> None:
    p = parser_for(sub, "logs", cmd_logs, "print a container's log",
                "Print the log of a pod's container. With -f, keep printing new lines until the "
                "pod finishes or is deleted, or Ctrl-C.")
    p.add_argument("pod", metavar="NS/NAME")
    p.add_argument("-n", "--namespace", help="namespace for a bare NAME")
    p.add_argument("-c", "--container", help="container name (required if the pod has several)")
    p.add_argument("--tail", type=_non_negative, metavar="N", help="only the last N lines")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument("--poll-interval", type=float, default=POLL_INTERVAL, help=argparse.SUPPRESS)


def _add_events(sub: SubParsers) -> None:
    p = parser_for(sub, "events", cmd_events, "list recent events", "Recent events, oldest first.")
    p.add_argument("-o", "--output", choices=("json", "yaml"), help="output format")


SUBCOMMANDS = [_add_status, _add_pods, _add_apply, _add_delete, _add_logs, _add_events]

__all__ = [
    "SUBCOMMANDS",
    "LogFollower",
    "follow_log",
    "parser_for",
    "pod_ref",
    "read_manifests",
    "socket_path_from_config",
    "target_from_args",
]
