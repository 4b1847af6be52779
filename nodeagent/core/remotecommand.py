"""The remote command protocol of `kubectl exec` over WebSocket (`v5.channel.k8s.io`, and v4 which
lacks only the CLOSE signal), as client-go's tools/remotecommand and apimachinery's wsstream speak it.

Every message is binary; its first byte is the channel:

    0 stdin   (client -> server)           3 error  (server -> client): a metav1.Status, once, at the end
    1 stdout  (server -> client)           4 resize (client -> server): {"Width": w, "Height": h}
    2 stderr  (server -> client)         255 close  (v5; client -> server): [255, channel] ends that stream

The server ends the session by sending the Status on channel 3 and closing the WebSocket normally.
A non-zero exit is Status Failure, reason NonZeroExitCode, with the code as the `ExitCode` cause,
which kubectl turns into its own exit code. Pure: no I/O here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
PROTOCOLS = (V5, V4)  # in preference order

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


@dataclass(frozen=True)
class ExecOptions:
    """core/v1 PodExecOptions as the query gives them."""

    command: tuple[str, ...]
    container: str = ""
    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False


_FALSE = ("0", "f", "false", "n", "no")  # apimachinery's Convert_Slice_string_To_bool: anything else is true


def _flag(query: Any, key: str) -> bool:
    raw = query.get(key)
    return raw is not None and raw.lower() not in _FALSE


def exec_options(query: Any) -> ExecOptions:
    """PodExecOptions from a multi-valued query (`command` repeats); ValueError with the kubelet's
    message when there is no command or no stream."""
    opts = ExecOptions(command=tuple(query.getall("command", [])), container=query.get("container", ""),
                       stdin=_flag(query, "stdin"), stdout=_flag(query, "stdout"), stderr=_flag(query, "stderr"),
                       tty=_flag(query, "tty"))
    if not opts.command:
        raise ValueError("you must specify at least 1 command")
    if not (opts.stdin or opts.stdout or opts.stderr):
        raise ValueError("you must specify at least 1 of stdin, stdout, stderr")
    return opts


def attach_options(query: Any) -> ExecOptions:
    """PodAttachOptions (no command); ValueError when no stream is asked for."""
    opts = ExecOptions(command=(), container=query.get("container", ""), stdin=_flag(query, "stdin"),
                       stdout=_flag(query, "stdout"), stderr=_flag(query, "stderr"), tty=_flag(query, "tty"))
    if not (opts.stdin or opts.stdout or opts.stderr):
        raise ValueError("you must specify at least 1 of stdin, stdout, stderr")
    return opts


def query_of(opts: ExecOptions) -> list[tuple[str, str]]:
    """The query that says the same (for the hop from the server to the agent)."""
    out = [("command", c) for c in opts.command]
    if opts.container:
        out.append(("container", opts.container))
    for key, on in (("stdin", opts.stdin), ("stdout", opts.stdout), ("stderr", opts.stderr), ("tty", opts.tty)):
        if on:
            out.append((key, "true"))
    return out


def frame(channel: int, data: bytes) -> bytes:
    return bytes((channel,)) + data


def exit_status(code: int, command: tuple[str, ...]) -> bytes:
    """The channel 3 Status for an exit: Success for 0, else the kubelet's NonZeroExitCode."""
    if code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    return json.dumps({
        "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
        "message": f"command terminated with non-zero exit code: error executing command {_go_list(command)}, "
                   f"exit code {code}",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }).encode()


def failure_status(message: str, reason: str = "InternalError", code: int = 500) -> bytes:
    """The channel 3 Status when the command could not be run at all."""
    return json.dumps({"metadata": {}, "status": "Failure", "message": message, "reason": reason,
                       "code": code}).encode()


def parse_resize(data: bytes) -> tuple[int, int] | None:
    """(columns, rows) of a resize message; None when it is not one (ignored, as the kubelet does)."""
    try:
        size = json.loads(data)
        width, height = int(size["Width"]), int(size["Height"])
    except (ValueError, TypeError, KeyError):
        return None
    if not (0 <= width < 1 << 16 and 0 <= height < 1 << 16):
        return None
    return width, height


def _go_list(items: tuple[str, ...]) -> str:
    return "[" + " ".join(items) + "]"
