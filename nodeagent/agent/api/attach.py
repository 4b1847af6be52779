"""GET pods/<name>/attach over WebSocket (`v5.channel.k8s.io`, or v4): the kubelet's attach endpoint
for host-process containers (runtime/attach.py). As exec does, it upgrades first and reports every
later problem as a Failure Status on the error channel. Output is what the container writes from
now on (its log; stdout and stderr are one file, sent on the stream the client asked for, stdout
first); stdin frames go to the container's stdin FIFO. The session ends when the run ends (a
Success Status) or when the client goes (the container keeps running: attach never kills)."""

from __future__ import annotations

import asyncio
import contextlib
import os

import structlog
from aiohttp import WSMsgType, web

from nodeagent.agent.api.backend import AgentBackend
from nodeagent.agent.api.exec import failure, upgrade
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.attach import AttachTarget, AttachUnavailable, StdinWriter
from nodeagent.core import remotecommand as rc

log = structlog.get_logger(__name__)
POLL_S = 0.05  # how often the output is looked at while the container is quiet
CHUNK = 64 * 1024
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
    writer: StdinWriter | None = None
    if opts.stdin:
        if target.stdin is None:
            return await failure(ws, f'container "{opts.container or "(default)"}" in pod "{name}" was not started '
                                     "with stdin: true: nothing reads what is sent to it", "BadRequest", 400)
        try:
            writer = StdinWriter(target.stdin)
        except (AttachUnavailable, OSError) as e:
            return await failure(ws, str(e), "BadRequest", 400)
    log.info("attach_started", pod=f"{ns}/{name}", container=opts.container, stdin=opts.stdin)
    try:
        ended = await _serve(ws, target, start, writer, opts, v5=protocol == rc.V5)
    finally:
        if writer is not None:
            writer.close()
    log.info("attach_finished", pod=f"{ns}/{name}", container=opts.container, run_ended=ended)
    if ended:
        with contextlib.suppress(ConnectionResetError):
            await ws.send_bytes(rc.frame(rc.ERROR, SUCCESS))
    await ws.close()
    return ws


async def _serve(ws: web.WebSocketResponse, target: AttachTarget, start: int, writer: StdinWriter | None,
                 opts: rc.ExecOptions, *, v5: bool) -> bool:
    """Pump until the run ends and its output is sent (True) or the client goes (False)."""
    channel = rc.STDOUT if opts.stdout else rc.STDERR if opts.stderr else None
    path = target.log.path

    async def output() -> None:
        reader = logs.LogReader(path, start)
        try:
            while True:
                alive = target.log.running()
                data = await asyncio.to_thread(reader.read, CHUNK)
                if data:
                    if channel is not None:
                        await ws.send_bytes(rc.frame(channel, data))
                    continue
                if not alive:
                    return
                await asyncio.sleep(POLL_S)
        finally:
            reader.close()

    async def client() -> None:
        async for msg in ws:
            if msg.type != WSMsgType.BINARY or not msg.data:
                continue
            kind, data = msg.data[0], msg.data[1:]
            if kind == rc.STDIN and writer is not None:
                await writer.write(data)
            elif kind == rc.CLOSE and v5 and data[:1] == bytes((rc.STDIN,)) and writer is not None:
                writer.close()  # the client's stdin ended; the container's stays open (no stdinOnce)

    out = asyncio.ensure_future(output())
    inp = asyncio.ensure_future(client())
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
