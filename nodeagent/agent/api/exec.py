"""GET pods/<name>/exec over WebSocket (`v5.channel.k8s.io`, or v4): the kubelet's exec endpoint.

The request is upgraded first and every later problem (no such pod or container, a container not
running, a command that cannot start) is a Failure Status on the error channel, as the kubelet's
WebSocket streams report them: the control plane relays the session frame by frame, and an
answer before the upgrade would only make kubectl retry over SPDY and lose the message. The
command runs as the container's (runtime/exec_session.py); in a container from an image it runs
through the OCI runtime's `exec` (`runc exec [--tty]`, charged to the pod's sandbox cgroup), which
puts it in the container's namespaces and cgroup. When the client goes first the command's
process group is killed (and the process the runtime exec'd, named by its pid file), so nothing is
left behind. The protocol's pure parts are core/remotecommand.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import WSMsgType, web

from nodeagent.agent.api.backend import AgentBackend
from nodeagent.agent.probes.exec_probe import exec_launch
from nodeagent.agent.runtime.exec_session import ExecSession, ExecUnavailable
from nodeagent.core import remotecommand as rc
from nodeagent.daemonkit.status import StatusError

log = structlog.get_logger(__name__)


async def failure(ws: web.WebSocketResponse, message: str, reason: str, code: int) -> web.WebSocketResponse:
    await ws.send_bytes(rc.frame(rc.ERROR, rc.failure_status(message, reason, code)))
    await ws.close()
    return ws


async def upgrade(request: web.Request, what: str) -> tuple[web.WebSocketResponse, str]:
    """The upgraded WebSocket and its protocol (v5 or v4); a 400 when the request is no upgrade."""
    ws = web.WebSocketResponse(protocols=rc.PROTOCOLS, heartbeat=30.0)
    ready = ws.can_prepare(request)
    if not ready.ok:
        raise StatusError(400, f"Upgrade request required: {what} speaks WebSocket (v5.channel.k8s.io)")
    if ready.protocol is None:
        raise StatusError(400, f"the client offers none of the protocols {', '.join(rc.PROTOCOLS)}")
    await ws.prepare(request)
    return ws, ready.protocol


async def client_frames(ws: web.WebSocketResponse, *, v5: bool, stdin: Callable[[bytes], Awaitable[None]] | None,
                        resize: Callable[[int, int], None] | None, close_stdin: Callable[[], None] | None) -> None:
    """What the client sends in an exec or attach session, until it goes: input, window sizes and
    (v5) the end of its input, each to its handler (a missing one ignores it, as the kubelet does)."""
    async for msg in ws:
        if msg.type != WSMsgType.BINARY or not msg.data:
            continue
        channel, data = msg.data[0], msg.data[1:]
        if channel == rc.STDIN and stdin is not None:
            await stdin(data)
        elif channel == rc.RESIZE and resize is not None:
            size = rc.parse_resize(data)
            if size is not None:
                resize(*size)
        elif channel == rc.CLOSE and v5 and data[:1] == bytes((rc.STDIN,)) and close_stdin is not None:
            close_stdin()


async def exec_handler(request: web.Request, backend: AgentBackend) -> web.StreamResponse:
    ns, name = request.match_info["ns"], request.match_info["name"]
    ws, protocol = await upgrade(request, "exec")
    try:
        opts = rc.exec_options(request.query)
    except ValueError as e:
        return await failure(ws, str(e), "BadRequest", 400)
    try:
        target = backend.exec_target(ns, name, opts.container or None)
        if target is None:
            what = f'container "{opts.container}" of pod' if opts.container else "pod"
            return await failure(ws, f'{what} "{name}" not found in namespace "{ns}"', "NotFound", 404)
        launch = exec_launch(opts.command, target, tty=opts.tty)
        session = ExecSession.start(launch.spec, launch.procs_files, launch.oom_score_adj, stdin=opts.stdin,
                                    stdout=opts.stdout, stderr=opts.stderr and not opts.tty, tty=opts.tty)
    except (ValueError, ExecUnavailable) as e:  # FieldError is a ValueError
        return await failure(ws, str(e), "BadRequest", 400)
    except OSError as e:
        return await failure(ws, f"cannot start {list(opts.command)}: {e}", "InternalError", 500)
    session.on_kill = launch.kill_exec
    log.info("exec_started", pod=f"{ns}/{name}", container=opts.container, pid=session.pid, tty=opts.tty,
             runtime=target.oci is not None)
    try:
        code = await _serve(ws, session, v5=protocol == rc.V5)
    finally:
        session.close()
        # a kill may still be reading the runtime's pid file (it is written a moment after the
        # command starts): it goes once the runtime has exited
        session.exit_code.add_done_callback(lambda _: launch.release())
    if code is not None:
        log.info("exec_finished", pod=f"{ns}/{name}", container=opts.container, exit_code=code)
        with contextlib.suppress(ConnectionResetError):
            await ws.send_bytes(rc.frame(rc.ERROR, rc.exit_status(code, opts.command)))
    await ws.close()
    return ws


async def _serve(ws: web.WebSocketResponse, session: ExecSession, *, v5: bool) -> int | None:
    """Pump both ways until the command has exited and its output is sent (its exit code), or the
    client went (None; the command is killed)."""

    async def output() -> int:
        while (item := await session.read()) is not None:
            channel, data = item
            await ws.send_bytes(rc.frame(channel, data))
        return await session.exit_code

    out = asyncio.ensure_future(output())
    inp = asyncio.ensure_future(client_frames(ws, v5=v5, stdin=session.write_stdin, resize=session.resize,
                                              close_stdin=session.close_stdin))
    try:
        await asyncio.wait({out, inp}, return_when=asyncio.FIRST_COMPLETED)
        if out.done() and out.exception() is None:
            return out.result()
        return None
    finally:
        if not out.done() or out.exception() is not None:
            session.kill()  # the client went (or its connection failed) before the command ended
        for task in (out, inp):
            task.cancel()
        await asyncio.gather(out, inp, return_exceptions=True)
