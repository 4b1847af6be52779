"""`nodeagent image pull|import|ls|rm` end to end: the CLI as a subprocess, over a Unix socket, to
the agent API's image routes (api/images.py) serving a real ImageManager in a thread of its own
(the daemon wiring is the same two calls: ImageManager(...), add_image_routes(app, manager))."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from images.conftest import Env
from images.image_tools import BuiltImages
from nodeagent.agent.api.app import create_app
from nodeagent.agent.api.images import add_image_routes

NODEAGENT = [sys.executable, "-m", "nodeagent"]


class ImageAPI:
    def __init__(self, root: Path) -> None:
        self.dir = tempfile.mkdtemp(prefix="na-img-", dir="/tmp")  # short: sun_path has 108 bytes
        self.socket = os.path.join(self.dir, "agent.sock")
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.env: Env | None = None

    async def _start(self) -> web.AppRunner:
        self.env = Env(self.root)
        await self.env.manager.start()
        app = create_app(object())  # type: ignore[arg-type]
        add_image_routes(app, self.env.manager)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.UnixSite(runner, self.socket).start()
        return runner

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            runner = self.loop.run_until_complete(self._start())
        except BaseException as e:
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())
        self.loop.close()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        verb, *rest = args
        return subprocess.run([*NODEAGENT, "image", verb, "--socket", self.socket, *rest], capture_output=True,
                              text=True, timeout=300)

    def __enter__(self) -> ImageAPI:
        self.thread.start()
        self.ready.wait(30)
        if self.error:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def api(tmp_path: Path, tools_present: None) -> Iterator[ImageAPI]:
    with ImageAPI(tmp_path) as server:
        yield server


def test_pull_ls_rm_import(api: ImageAPI, registry: Any, images: BuiltImages) -> None:
    ref = f"{registry.host}/test/big:1"
    pulled = api.cli("pull", ref)
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.startswith(f"{ref}: ") and " in " in pulled.stdout
    assert "downloading" in pulled.stderr or "unpacking" in pulled.stderr  # the progress line (not a tty: per phase)
    listed = api.cli("ls")
    assert listed.returncode == 0 and ref in listed.stdout and "IN USE BY" in listed.stdout
    as_json = json.loads(api.cli("ls", "-o", "json").stdout)
    assert [i["repoTags"] for i in as_json["items"]] == [[ref]]
    imported = api.cli("import", str(images.docker_archive), "--tag", "test/small:archived")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("docker.io/test/small:archived: ")
    removed = api.cli("rm", ref, "docker.io/test/small:archived")
    assert removed.returncode == 0 and removed.stdout.count("deleted") == 2
    gone = api.cli("rm", ref)
    assert gone.returncode == 1 and "no image" in gone.stderr
    assert api.cli("ls").stderr.strip() == "No images."


def test_bad_references_and_failures_are_one_line(api: ImageAPI, registry: Any) -> None:
    bad = api.cli("pull", "Not/A:Valid:Ref")
    assert bad.returncode == 1 and bad.stderr.startswith("nodeagent: image: Invalid value") and "Traceback" not in bad.stderr
    missing = api.cli("pull", f"{registry.host}/test/nope:1")
    assert missing.returncode == 1 and "ErrImagePull" in missing.stderr and "manifest unknown" in missing.stderr
    errors = [line for line in missing.stderr.splitlines() if line.startswith("nodeagent:")]
    assert len(errors) == 1 and missing.stderr.strip().splitlines()[-1] == errors[0]  # progress lines before it
    assert "Traceback" not in missing.stderr
