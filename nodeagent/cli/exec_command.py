"""`nodeagent exec NS/NAME [-c C] -- CMD...`: run a command in a pod's container through the agent's
exec endpoint (the kubelet's `GET pods/<name>/exec`, WebSocket `v5.channel.k8s.io`), print its
stdout and stderr, exit with its exit code, as `kubectl exec` without `-i`/`-t`.

Stdlib only, like the rest of the CLI: the connection is the client's own (Unix socket, http or
https with its token and certificates, client.Target), the WebSocket opening handshake and the
frames (RFC 6455: the client masks what it sends; it sends only a close and pongs here) are done
by hand on it. The channel protocol is core/remotecommand.py: stdout on 1, stderr on 2, the final
Status on 3 (Success, or NonZeroExitCode with the code as the `ExitCode` cause).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, BinaryIO
from urllib.parse import urlencode, urlsplit

from nodeagent.cli.client import Client, ClientError, pod_path
from nodeagent.cli.client_commands import SubParsers, UsageError, parser_for, pod_ref
from nodeagent.core import remotecommand as rc

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 1, 2, 8, 9, 10
MAX_HEADER = 64 * 1024


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 4.2.2)."""
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def client_frame(opcode: int, payload: bytes, mask: bytes) -> bytes:
    """One final, masked frame (every frame a client sends is masked)."""
    n = len(payload)
    head = bytes((0x80 | opcode,))
    if n < 126:
        head += bytes((0x80 | n,))
    elif n < 1 << 16:
        head += bytes((0x80 | 126,)) + struct.pack("!H", n)
    else:
        head += bytes((0x80 | 127,)) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(read: Callable[[int], bytes]) -> tuple[int, bytes]:
    """(opcode, payload) of the next frame; fragments of a message are returned one by one (the
    agent sends each chunk whole). EOFError when the connection ends."""
    head = _exactly(read, 2)
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        length = struct.unpack("!H", _exactly(read, 2))[0]
    elif length == 127:
        length = struct.unpack("!Q", _exactly(read, 8))[0]
    mask = _exactly(read, 4) if head[1] & 0x80 else b""
    data = _exactly(read, length)
    if mask:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return opcode, data


def _exactly(read: Callable[[int], bytes], n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = read(n - len(out))
        if not chunk:
            raise EOFError("the connection ended")
        out += chunk
    return out


def exit_code_of(status: dict[str, Any]) -> int:
    """The command's exit code from the final Status; a failure to run at all reads 1 (as kubectl)."""
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause.get("message", "1"))
                except ValueError:
                    return 1
    return 1


def _handshake(sock: socket.socket, host: str, path: str, headers: dict[str, str]) -> BinaryIO:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13",
             f"Sec-WebSocket-Protocol: {', '.join(rc.PROTOCOLS)}", *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    reader = sock.makefile("rb")
    status_line = reader.readline(MAX_HEADER).decode("latin-1").strip()
    answer: dict[str, str] = {}
    while (line := reader.readline(MAX_HEADER).decode("latin-1").strip()):
        name, _, value = line.partition(":")
        answer[name.strip().lower()] = value.strip()
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or parts[1] != "101":
        raise ClientError(f"exec: the agent answered {status_line or 'nothing'} instead of switching to WebSocket")
    if answer.get("sec-websocket-accept") != accept_key(key):
        raise ClientError("exec: the agent's WebSocket handshake does not match the request")
    return reader


def run_exec(client: Client, namespace: str, name: str, command: list[str], container: str | None,
             out: BinaryIO, err: BinaryIO) -> int:
    """Run the command; its output copied to out/err as it comes; its exit code."""
    target = client.target
    query = [("command", c) for c in command] + [("stdout", "true"), ("stderr", "true")]
    if container:
        query.append(("container", container))
    path = pod_path(namespace, name, "/exec") + "?" + urlencode(query)
    headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
    conn = target.connection()
    try:
        conn.connect()
    except OSError as e:
        raise ClientError(f"cannot reach the agent at {target.describe()}: {e.strerror or e}") from None
    sock = conn.sock
    assert sock is not None
    host = urlsplit(target.url).netloc if target.url else "localhost"
    try:
        reader = _handshake(sock, host, path, headers)
        status: dict[str, Any] | None = None
        while True:
            try:
                opcode, data = read_frame(reader.read)
            except EOFError:
                break
            if opcode == OP_PING:
                sock.sendall(client_frame(OP_PONG, data, os.urandom(4)))
            elif opcode == OP_CLOSE:
                sock.sendall(client_frame(OP_CLOSE, data[:2], os.urandom(4)))
                break
            elif opcode in (OP_BINARY, OP_TEXT) and data:
                channel, payload = data[0], data[1:]
                if channel == rc.STDOUT:
                    out.write(payload)
                    out.flush()
                elif channel == rc.STDERR:
                    err.write(payload)
                    err.flush()
                elif channel == rc.ERROR:
                    status = json.loads(payload)
    finally:
        conn.close()
    if status is None:
        raise ClientError("exec: the agent closed the session without an exit status")
    if status.get("status") != "Success" and status.get("reason") != "NonZeroExitCode":
        raise ClientError(f"exec: {status.get('message') or status}")
    return exit_code_of(status)


def cmd_exec(args: argparse.Namespace, client: Client) -> int:
    """Run a command in a container; exit with its exit code."""
    command = list(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if not command:
        raise UsageError("a command is required: nodeagent exec NS/NAME -- CMD [ARGS...]")
    ns, name = pod_ref(args.pod, args.namespace)
    return run_exec(client, ns, name, command, args.container, sys.stdout.buffer, sys.stderr.buffer)


def add_exec(sub: SubParsers) -> None:
    p = parser_for(sub, "exec", cmd_exec, "run a command in a container",
                   "Run a command in a pod's container (inside it: an image container's through its "
                   "OCI runtime), print its output and exit with its exit code, as `kubectl exec` "
                   "without -i/-t.")
    p.add_argument("pod", metavar="NS/NAME")
    p.add_argument("-n", "--namespace", help="namespace for a bare NAME")
    p.add_argument("-c", "--container", help="container name (required if the pod has several)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")
