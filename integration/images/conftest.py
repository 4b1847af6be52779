"""Fixtures for the image tests: the tools, test images, registries on loopback, a manager.

The tools come from integration/images/install-tools.sh (the Makefile's integration targets and
.ci/run call it); a missing one fails the tests with that hint, it is never a skip.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from images.image_tools import BuiltImages, Registry, build_images, missing_tools
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.images.gc import GCPolicy
from nodeagent.agent.images.manager import ImageManager
from nodeagent.agent.images.skopeo import Skopeo
from nodeagent.agent.images.store import ImageStore
from nodeagent.core.clock import SystemClock

USERS = {"puller": "pull-secret-1"}


def _loopback_up() -> None:
    """The UML guest boots with lo down."""
    try:
        flags = int(Path("/sys/class/net/lo/flags").read_text().strip(), 16)
    except (OSError, ValueError):
        return
    if not flags & 0x1:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


@pytest.fixture(scope="session")
def tools_present() -> None:
    missing = missing_tools()
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run integration/images/install-tools.sh (as root)")
    _loopback_up()


@pytest.fixture(scope="session")
def images(tools_present: None, tmp_path_factory: pytest.TempPathFactory) -> BuiltImages:
    return build_images(tmp_path_factory.mktemp("images"))


def _registry(tmp_path_factory: pytest.TempPathFactory, images: BuiltImages, auth: str | None) -> Iterator[Registry]:
    reg = Registry(tmp_path_factory.mktemp(f"registry-{auth or 'anon'}"), auth=auth,
                   users=dict(USERS) if auth else {}).start()
    try:
        reg.digests = {tag: reg.push(f"oci:{images.layout}:{tag}", f"test/{tag}:1")  # type: ignore[attr-defined]
                       for tag in (images.tags if auth is None else ("small",))}
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory, images: BuiltImages) -> Iterator[Registry]:
    """Anonymous, plain HTTP on 127.0.0.1, holding test/{small,layered,big}:1."""
    yield from _registry(tmp_path_factory, images, None)


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory: pytest.TempPathFactory, images: BuiltImages) -> Iterator[Registry]:
    """htpasswd (basic) auth, holding test/small:1."""
    yield from _registry(tmp_path_factory, images, "htpasswd")


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory: pytest.TempPathFactory, images: BuiltImages) -> Iterator[Registry]:
    """Bearer-token auth (our token server), holding test/small:1."""
    yield from _registry(tmp_path_factory, images, "token")


class Env:
    def __init__(self, root: Path, **kw: Any) -> None:
        self.clock = SystemClock()
        self.events = EventRecorder(self.clock, "it-node")
        self.store = ImageStore(str(root / "imagefs" / "images"), self.clock)
        os.makedirs(root / "imagefs", exist_ok=True)
        self.fetcher = Skopeo(workdir=str(root / "skopeo-work"))
        os.makedirs(self.fetcher.workdir, exist_ok=True)
        self.manager = ImageManager(self.store, self.fetcher, self.events, self.clock, **kw)

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events.list()]


@pytest.fixture
def small_imagefs(tmp_path: Path) -> Iterator[Path]:
    """A 40 MiB tmpfs this test mounts (and unmounts) as imagefs."""
    mnt = tmp_path / "imagefs-small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m,mode=0700", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.fixture
def make_env(tmp_path: Path, tools_present: None) -> Any:
    """make_env(root=None, **ImageManager kwargs) -> an Env whose store is opened."""
    async def make(root: Path | None = None, **kw: Any) -> Env:
        kw.setdefault("gc_policy", GCPolicy(min_age=0.0, high_percent=85, low_percent=80))
        env = Env(root or tmp_path, **kw)
        await env.manager.start()
        return env

    return make
