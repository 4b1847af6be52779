"""`nodeagent image pull|import|ls|rm`: the node's images, through a running agent's API
(nodeagent/agent/api/images.py), over its Unix socket like the other client verbs.

`pull` shows a progress line while the agent downloads (it polls GET /api/v1/images/pulls beside
the blocking POST): on a terminal one line rewritten in place, otherwise a line when the phase
changes. The final line names the image id, its size and the time taken.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any, TextIO
from urllib.parse import quote

from nodeagent.cli import render
from nodeagent.cli.client import Client, ClientError
from nodeagent.cli.client_commands import SubParsers, _connection_options, _dump, _items, _runs, _write

PROGRESS_INTERVAL = 0.2


def _image(client: Client, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = client.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                          content_type="application/json" if body is not None else None)
    try:
        value = json.loads(data)
    except ValueError:
        raise ClientError("the agent answered with something that is not JSON") from None
    if not isinstance(value, dict):
        raise ClientError("the agent answered an image that is not a JSON object")
    return value


def short_id(image_id: object) -> str:
    return str(image_id).removeprefix("sha256:")[:12]


def progress_line(item: dict[str, Any]) -> str:
    done = int(item.get("bytesDone") or 0)
    total = item.get("bytesTotal")
    amount = f"{render.human_bytes(done)}/{render.human_bytes(int(total))}" if total else render.human_bytes(done)
    return f"{item.get('image')}: {item.get('phase')} {amount} {float(item.get('seconds') or 0):.1f}s"


def _watch(client: Client, image_hint: str, done: threading.Event, out: TextIO) -> None:
    """Print the agent's progress for pulls until `done`; errors here never stop the pull."""
    tty = out.isatty()
    last = ""
    while not done.wait(PROGRESS_INTERVAL):
        try:
            items = _items(client.get_json("/api/v1/images/pulls"))
        except ClientError:
            continue
        mine = [i for i in items if image_hint in str(i.get("image"))] or items
        if not mine:
            continue
        line = progress_line(mine[0])
        if tty:
            out.write("\r\033[K" + line)
            out.flush()
        elif line.split(" ")[1] != last:
            out.write(line + "\n")
            out.flush()
        last = line if tty else line.split(" ")[1]
    if tty and last:
        out.write("\r\033[K")
        out.flush()


def cmd_pull(args: argparse.Namespace, client: Client) -> int:
    """Pull an image into the node's store (a progress line meanwhile)."""
    started = time.monotonic()
    done = threading.Event()
    hint = args.image.split("@")[0].split(":")[0].rsplit("/", 1)[-1]
    watcher = threading.Thread(target=_watch, args=(client, hint, done, sys.stderr), daemon=True)
    watcher.start()
    try:
        image = _image(client, "POST", "/api/v1/images/pull", {"image": args.image, "policy": args.policy})
    finally:
        done.set()
        watcher.join(timeout=2)
    name = (image.get("repoTags") or image.get("repoDigests") or [args.image])[0]
    _write(f"{render.clean(name)}: {short_id(image.get('id'))} {render.human_bytes(int(image.get('size') or 0))} "
           f"in {time.monotonic() - started:.1f}s\n")
    return 0


def cmd_import(args: argparse.Namespace, client: Client) -> int:
    """Import an OCI layout directory or a docker-archive tarball on this node."""
    path = os.path.abspath(args.path)
    fmt = args.format or ("oci" if os.path.isdir(path) else "docker-archive")
    image = _image(client, "POST", "/api/v1/images/import",
                   {"path": path, "format": fmt, "tag": args.tag, "ref": args.ref})
    name = (image.get("repoTags") or image.get("repoDigests") or ["<none>"])[0]
    _write(f"{render.clean(name)}: {short_id(image.get('id'))} {render.human_bytes(int(image.get('size') or 0))}\n")
    return 0


def format_images(items: list[dict[str, Any]], now: float) -> str:
    rows = []
    for item in sorted(items, key=lambda i: str((i.get("repoTags") or i.get("repoDigests") or [""])[0])):
        names = item.get("repoTags") or [n.split("@")[0] + "@" + short_id(n.split("@")[-1])
                                         for n in item.get("repoDigests") or []] or ["<none>"]
        rows.append([names[0], short_id(item.get("id")), render.human_bytes(int(item.get("size") or 0)),
                     render.age(item.get("lastUsed"), now), ",".join(item.get("inUseBy") or []) or "-"])
    return render.table(["IMAGE", "ID", "SIZE", "LAST USED", "IN USE BY"], rows)


def cmd_ls(args: argparse.Namespace, client: Client) -> int:
    """The node's images."""
    listing = _image(client, "GET", "/api/v1/images")
    if args.output in ("json", "yaml"):
        _write(_dump(listing, args.output))
        return 0
    items = _items(listing)
    if not items:
        print("No images.", file=sys.stderr)
        return 0
    _write(format_images(items, time.time()))
    return 0


def cmd_rm(args: argparse.Namespace, client: Client) -> int:
    """Remove images (refused for an image a container uses)."""
    failed = 0
    for name in args.images:
        try:
            image = _image(client, "DELETE", "/api/v1/images/" + quote(name, safe=""))
        except ClientError as e:
            if e.code is None:
                raise
            failed += 1
            print(f"nodeagent: {e.message}", file=sys.stderr)
            continue
        _write(f"deleted {render.clean(name)} ({short_id(image.get('id'))})\n")
    return 1 if failed else 0


def add_image(sub: SubParsers) -> None:
    p = sub.add_parser("image", help="pull, import, list and remove the node's images",
                       description="The node's container images, through the running agent.")
    verbs = p.add_subparsers(dest="image_command", metavar="VERB", required=True)
    pull = verbs.add_parser("pull", help="pull an image", parents=[_connection_options()],
                            description="Pull REF (registry/name:tag or @sha256:...) into the node's store.")
    pull.add_argument("image", metavar="REF")
    pull.add_argument("--policy", choices=("Always", "IfNotPresent", "Never"), default="Always",
                      help="Always (default): check the registry; IfNotPresent: only when absent")
    pull.set_defaults(func=_runs(cmd_pull))
    imp = verbs.add_parser("import", help="import an OCI layout or a docker-archive tarball",
                           parents=[_connection_options()],
                           description="Import PATH (on this node) for air-gapped nodes: an OCI image layout "
                                       "directory or a docker-archive tarball (`docker save`).")
    imp.add_argument("path", metavar="PATH")
    imp.add_argument("--format", choices=("oci", "docker-archive"), help="default: oci for a directory")
    imp.add_argument("--tag", metavar="REF", help="name the image")
    imp.add_argument("--ref", metavar="NAME", help="the image to take from a layout or archive holding several")
    imp.set_defaults(func=_runs(cmd_import))
    ls = verbs.add_parser("ls", help="list images", parents=[_connection_options()], description="The node's images.")
    ls.add_argument("-o", "--output", choices=("json", "yaml"), help="output format")
    ls.set_defaults(func=_runs(cmd_ls))
    rm = verbs.add_parser("rm", help="remove images", parents=[_connection_options()],
                          description="Remove images by reference or id (prefix); refused while a container uses one.")
    rm.add_argument("images", nargs="+", metavar="REF")
    rm.set_defaults(func=_runs(cmd_rm))


__all__ = ["add_image", "format_images", "progress_line"]
