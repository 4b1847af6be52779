"""GET pods/<name>/attach over WebSocket (`v5.channel.k8s.io`, or v4): the kubelet's attach endpoint
(runtime/attach.py). As exec does, it upgrades first and reports every later problem as a Failure
Status on the error channel. Output is what the container writes from now on (its log; stdout and
stderr are one file, sent on the stream the client asked for, stdout first; a terminal's output is
raw, as the terminal gives it); stdin frames go to the container's stdin FIFO, or to its terminal
(`tty: true`), whose size follows the client's resize frames. With `stdinOnce` (no tty) the end of
the first session's input ends the container's stdin. The session ends when the run ends (a
Success Status) or when the client goes (the container keeps running: attach never kills)."""

from __future__ import annotations

import asyncio
import contextlib
import os

import structlog
from aiohttp import web

from nodeagent.agent.api.backend import AgentBackend
from nodeagent.agent.api.exec import client_frames, failure, upgrade
from nodeagent.agent.runtime import logs, stdio_holder
from nodeagent.agent.runtime.attach import AttachTarget, AttachUnavailable, StdinWriter, TerminalWriter
from nodeagent.agent.runtime.exec_session import set_window_size
from nodeagent.agent.runtime.oci.runtime import open_console
from nodeagent.core import remotecommand as rc

log = structlog.get_logger(__name__)
POLL_S = 0.05  # how often the output is looked at while the container is quiet
CHUNK = 64 * 1024
TTY_DRAIN_S = 2.0  # at most this long after a tty run ended, its holder's last copy is waited for
SUCCESS = b'{"metadata":{},"status":"Success"}'


async def attach_handler(request: web.Request, backend: AgentBackend) -> web.StreamResponse:
    ns, name = request.match_info["ns"], request.match_info["name"]
    ws, protocol = await upgrade(request, "attach")
    try:
        opts = rc.attach_options(request.query)
        target = backend.attach_target(ns, name, opts.container or None)
    except (ValueError, AttachUnavailable, logs.LogUnavailable) as e:  # FieldError is a ValueError
        return await failure(ws, str(e), "BadRequest", 400)
    if target is None:
        what = f'container "{opts.container}" of pod' if opts.container else "pod"
        return await failure(ws, f'{what} "{name}" not found in namespace "{ns}"', "NotFound", 404)
    start = await asyncio.to_thread(_size, target.log.path)  # output from now on, before any input is sent
    master: int | None = None
    consoles: list[int] = []  # the terminals whose size the client's is: the run's, an image container's console
    writer: StdinWriter | TerminalWriter | None = None
    try:
        if target.tty:
            try:
                master = stdio_holder.take_fd(target.container_dir, stdio_holder.TTY)
            except (stdio_holder.HolderGone, OSError) as e:
                return await failure(ws, f"the terminal of the container is not available: {e}", "InternalError", 500)
            consoles.append(master)
            if target.container_pids is not None and (console := open_console(target.container_pids())) is not None:
                consoles.append(console)
        if opts.stdin:
            if target.stdin is None:
                return await failure(ws, f'container "{opts.container or "(default)"}" in pod "{name}" was not started '
                                         "with stdin: true: nothing reads what is sent to it", "BadRequest", 400)
            try:
                writer = _writer(target, master)
            except (AttachUnavailable, OSError) as e:
                return await failure(ws, str(e), "BadRequest", 400)
        log.info("attach_started", pod=f"{ns}/{name}", container=opts.container, stdin=writer is not None,
                 tty=target.tty)
        try:
            ended = await _serve(ws, target, start, writer, consoles, opts, v5=protocol == rc.V5)
        finally:
            if writer is not None:
                writer.close()
                if target.stdin_once and not target.tty:  # the first session's input is the container's last
                    stdio_holder.release(target.container_dir, stdio_holder.STDIN)
    finally:
        for fd in consoles:
            os.close(fd)
    log.info("attach_finished", pod=f"{ns}/{name}", container=opts.container, run_ended=ended)
    if ended:
        with contextlib.suppress(ConnectionResetError):
            await ws.send_bytes(rc.frame(rc.ERROR, SUCCESS))
    await ws.close()
    return ws


def _writer(target: AttachTarget, master: int | None) -> StdinWriter | TerminalWriter | None:
    """The session's input: the terminal, or the stdin FIFO; None once a stdinOnce container's
    stdin was closed by an earlier session (this one gets the output only, as with containerd)."""
    if master is not None:
        return TerminalWriter(os.dup(master))
    assert target.stdin is not None
    if target.stdin_once and stdio_holder.read_record(target.container_dir) is None:
        log.info("attach_stdin_closed", reason="stdinOnce: an earlier session's input ended it")
        return None
    return StdinWriter(target.stdin)


async def _serve(ws: web.WebSocketResponse, target: AttachTarget, start: int,
                 writer: StdinWriter | TerminalWriter | None, consoles: list[int], opts: rc.ExecOptions, *,
                 v5: bool) -> bool:
    """Pump until the run ends and its output is sent (True) or the client goes (False)."""
    channel = rc.STDOUT if opts.stdout else rc.STDERR if opts.stderr else None
    path = target.log.path

    async def output() -> None:
        reader = logs.LogReader(path, start)
        drain = int(TTY_DRAIN_S / POLL_S)
        try:
            while True:
                alive = target.log.running()
                data = await asyncio.to_thread(reader.read, CHUNK)
                if data:
                    if channel is not None:
                        await ws.send_bytes(rc.frame(channel, data))
                    continue
                if not alive:
                    if target.tty and drain > 0 and stdio_holder.alive(target.container_dir, stdio_holder.TTY):
                        drain -= 1  # the terminal's holder still copies the run's last words into the log
                        await asyncio.sleep(POLL_S)
                        continue
                    return
                await asyncio.sleep(POLL_S)
        finally:
            reader.close()

    def close_stdin() -> None:
        """The client's input ended (v5): a pipe's writer is closed (a terminal's stays: a shell
        under it would read ^D), and with stdinOnce the container's stdin ends with it."""
        if writer is not None and not target.tty:
            writer.close()
            if target.stdin_once:
                stdio_holder.release(target.container_dir, stdio_holder.STDIN)

    def resize(columns: int, rows: int) -> None:
        for fd in consoles:
            set_window_size(fd, columns, rows)

    out = asyncio.ensure_future(output())
    inp = asyncio.ensure_future(client_frames(ws, v5=v5, stdin=writer.write if writer is not None else None,
                                              resize=resize, close_stdin=close_stdin))
    try:
        await asyncio.wait({out, inp}, return_when=asyncio.FIRST_COMPLETED)
        return out.done() and not out.cancelled() and out.exception() is None
    finally:
        for task in (out, inp):
            task.cancel()
        await asyncio.gather(out, inp, return_exceptions=True)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
