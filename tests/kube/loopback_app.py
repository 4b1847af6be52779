"""A small aiohttp application on 127.0.0.1 in a thread of its own: what a test serves beside a
real server (a fake agent's metrics, a Prometheus exporter)."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


class LoopbackApp:
    """Subclasses add their routes in `routes(app)`; the app serves once the constructor returns."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        self.routes(app)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
