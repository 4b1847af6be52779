"""The agent's images as the daemon wires them (daemon.Agent): no I/O until start, the API's
/api/v1/images* served by the agent's own app, the pulled image in the Node's status.images, the
eviction manager holding the same ImageManager for its reclaim, and a reload reaching it.

The registry is the fake of test_image_manager.py (layouts built in Python); the real agent with
skopeo and a real registry is integration/images/test_agent_images.py."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from fakes import FakeCgroupDriver
from image_builder import f, tar_bytes
from test_image_manager import REG, FakeRegistry

from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.config.settings import Config, parse_config
from nodeagent.agent.daemon import Agent, NodeFacts, build_agent, oci_runtime_for
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.images.gc import GCPolicy
from nodeagent.agent.images.manager import ImageManager
from nodeagent.agent.images.store import ImageStore
from nodeagent.agent.node.allocatable import allocatable_for
from nodeagent.agent.node.capacity import Capacity
from nodeagent.agent.node.reporter import NodeReporter
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.runtime.oci import select as oci_select
from nodeagent.core.clock import FakeClock
from nodeagent.core.errors import FieldError
from nodeagent.daemonkit.auth import Authenticator
from nodeagent.daemonkit.sdnotify import Notifier

GI = 1 << 30
CAPACITY = Capacity(milli_cpu=2000, memory=4 * GI, ephemeral_storage=100 * GI, pods=110, inodes=10**6, pid_max=10**6)
ROOT = os.geteuid() == 0


def config(tmp_path: Path, **keys: Any) -> Config:
    return parse_config({"stateDir": str(tmp_path / "state"), "address": "127.0.0.1", "authentication": "none",
                         "nodeName": "n1", **keys}, "test")


def agent_of(cfg: Config, tmp_path: Path, images: ImageManager | None = None) -> Agent:
    driver: CgroupDriver = FakeCgroupDriver(f"/agent-{uuid.uuid4().hex[:8]}")
    return Agent(cfg, NodeFacts(CAPACITY, allocatable_for(CAPACITY, cfg), "n1", {}), driver=driver,
                 clock=FakeClock(), checkpoints=CheckpointStore.open(tmp_path / "state"),
                 auth=Authenticator.from_config(cfg), ssl_context=None, notifier=Notifier(None), images=images)


def test_the_agent_builds_its_images_from_the_config_without_io(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # a reload reconfigures logging for the whole process: keep the other tests' log level
    monkeypatch.setattr("nodeagent.agent.daemon.configure_logging", lambda level, fmt: None)
    cfg = config(tmp_path, imagefsPath=str(tmp_path / "imagefs"), imageGCHighThresholdPercent=70,
                 imageGCLowThresholdPercent=60)
    agent = agent_of(cfg, tmp_path)
    assert agent.images.store.root == str(tmp_path / "imagefs" / "images")
    assert not (tmp_path / "imagefs").exists()  # opened by start(), not by the wiring
    assert (agent.images.gc_policy.high_percent, agent.images.gc_policy.low_percent) == (70, 60)
    assert agent.eviction.images is agent.images  # disk pressure reclaims from this store
    assert agent.reporter.images == agent.images.node_images
    assert agent.oci is None  # build_agent chooses it (oci_runtime_for); none given here

    (tmp_path / "imagefs").mkdir()  # a reload observes the filesystems
    agent.pods.setup_cgroups()  # and rewrites the pods cgroup's limits
    new = config(tmp_path, imagefsPath=str(tmp_path / "imagefs"), imageGCHighThresholdPercent=90)
    agent.reconfigure(new, allocatable_for(CAPACITY, new))
    assert (agent.images.gc_policy.high_percent, agent.images.gc_policy.low_percent) == (90, 80)


def test_node_status_images_as_the_kubelet_omits_them_when_empty() -> None:
    listed: list[dict[str, Any]] = []
    reporter = NodeReporter(name="n1", capacity=CAPACITY, allocatable=allocatable_for(CAPACITY, parse_config({}, "x")),
                            driver=FakeCgroupDriver(), clock=FakeClock(), node_info={}, pressure=lambda: (),
                            images=lambda: listed)
    assert "images" not in reporter.node()["status"]
    listed.append({"names": ["r/a@sha256:1", "r/a:1"], "sizeBytes": 5})
    assert reporter.node()["status"]["images"] == [{"names": ["r/a@sha256:1", "r/a:1"], "sizeBytes": 5}]


@pytest.mark.skipif(not ROOT, reason="layers are unpacked with their owners (chown needs root)")
async def test_the_agent_api_pulls_lists_reports_and_removes(tmp_path: Path, aiohttp_client: Any) -> None:
    registry = FakeRegistry(tmp_path / "registry")
    registry.add("app:1", [tar_bytes([f("hello", b"hi\n")])])
    cfg = config(tmp_path)
    clock = FakeClock()
    store = ImageStore(str(tmp_path / "state" / "images"), clock)
    images = ImageManager(store, registry, EventRecorder(clock, "n1"), clock, gc_policy=GCPolicy(min_age=0))
    agent = agent_of(cfg, tmp_path, images)
    await agent.images.start()
    client: TestClient = await aiohttp_client(agent.build_app())

    pulled = await client.post("/api/v1/images/pull", json={"image": f"{REG}/app:1"})
    assert pulled.status == 201, await pulled.text()
    image = await pulled.json()
    listed = await (await client.get("/api/v1/images")).json()
    assert [i["id"] for i in listed["items"]] == [image["id"]]
    node = await (await client.get("/api/v1/node")).json()
    (reported,) = node["status"]["images"]
    assert f"{REG}/app:1" in reported["names"] and reported["sizeBytes"] == image["size"] > 0

    removed = await client.delete(f"/api/v1/images/{REG}/app:1")
    assert removed.status == 200, await removed.text()
    assert (await (await client.get("/api/v1/images")).json())["items"] == []
    assert "images" not in (await (await client.get("/api/v1/node")).json())["status"]


# ---- the OCI runtime build_agent chooses (daemon.oci_runtime_for over runtime/oci/select.py) ----

@pytest.mark.parametrize(("requested", "found", "hybrid", "want"), [
    ("auto", {"runc": "/usr/sbin/runc", "crun": "/usr/bin/crun"}, True, "runc"),
    ("auto", {"crun": "/usr/bin/crun"}, False, "crun"),
    ("auto", {"crun": "/usr/bin/crun"}, True, None),  # crun refuses the hybrid layout: nothing usable
    ("auto", {}, False, None),
    ("crun", {"runc": "/usr/sbin/runc", "crun": "/usr/bin/crun"}, False, "crun"),
    ("runc", {"runc": "/usr/sbin/runc"}, True, "runc"),
    ("none", {"runc": "/usr/sbin/runc"}, False, None),
])
def test_oci_runtime_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, requested: str, found: dict[str, str],
                         hybrid: bool, want: str | None) -> None:
    monkeypatch.setattr(oci_select, "installed_runtimes", lambda: dict(found))
    monkeypatch.setattr(oci_select, "is_hybrid", lambda version: hybrid)
    runtime = oci_runtime_for(config(tmp_path, ociRuntime=requested), 1)
    if want is None:
        assert runtime is None
    else:
        assert runtime is not None and (runtime.name, runtime.binary) == (want, found[want])
        assert runtime.root == str(tmp_path / "state" / want)  # its --root under stateDir
        assert not os.path.exists(runtime.root)  # made by the runtime on its first container


@pytest.mark.parametrize(("requested", "found", "hybrid", "words"), [
    ("crun", {"runc": "/usr/sbin/runc", "crun": "/usr/bin/crun"}, True, "hybrid"),
    ("runc", {"crun": "/usr/bin/crun"}, False, "runc is not installed"),
])
def test_build_agent_refuses_an_unusable_runtime_naming_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, requested: str, found: dict[str, str], hybrid: bool,
        words: str) -> None:
    monkeypatch.setattr(oci_select, "installed_runtimes", lambda: dict(found))
    monkeypatch.setattr(oci_select, "is_hybrid", lambda version: hybrid)
    with pytest.raises(FieldError) as info:
        build_agent(config(tmp_path, ociRuntime=requested), driver=FakeCgroupDriver(f"/agent-{uuid.uuid4().hex[:8]}"))
    assert info.value.path == "ociRuntime" and words in info.value.message


@pytest.mark.skipif(shutil.which("runc", path=oci_select.SEARCH_PATH) is None, reason="runc is not installed")
def test_build_agent_on_this_host_takes_runc(tmp_path: Path) -> None:
    """The real detection (PATH lookup, this host's cgroup layout): auto takes runc where it is installed."""
    agent = build_agent(config(tmp_path), driver=FakeCgroupDriver(f"/agent-{uuid.uuid4().hex[:8]}"))
    assert agent.oci is not None and agent.oci.name == "runc"
    assert agent.oci.binary == shutil.which("runc", path=oci_select.SEARCH_PATH)
