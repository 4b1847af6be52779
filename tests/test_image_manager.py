"""The image store and manager over a fake fetcher (layouts built in Python): pull policy in
action, events, back-off, leases, removal, GC execution, reclaim, crash recovery."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from image_builder import d, f, manifest_bytes, sym, tar_bytes, write_layout

from nodeagent.agent.events import EventRecorder
from nodeagent.agent.images import errors as E
from nodeagent.agent.images.credentials import Access
from nodeagent.agent.images.gc import GCPolicy
from nodeagent.agent.images.listing import node_images
from nodeagent.agent.images.manager import BackOffError, ImageManager, PodRef
from nodeagent.agent.images.store import TOUCH_WRITE_S, ImageStore
from nodeagent.core.clock import FakeClock

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not ROOT, reason="layers are unpacked with their owners (chown needs root)")
POD = PodRef("default", "web", "uid-1")
REG = "127.0.0.1:5999"


class FakeRegistry:
    """A Fetcher serving layouts built in Python: `images[repo:tag] = layout dir`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = str(root / "blobs")
        self.images: dict[str, str] = {}
        self.copies: list[str] = []
        self.inspects: list[str] = []
        self.fail: Exception | None = None
        self.hang = False
        self.accesses: list[Access | None] = []

    def add(self, name: str, layers: list[bytes], **kw: Any) -> Any:
        layout = str(self.root / name.replace("/", "_").replace(":", "_"))
        built = write_layout(layout, layers, blobs=self.blobs, **kw)
        self.images[f"{REG}/{name}"] = layout
        self.images[f"{REG}/{name.split(':')[0]}@{built.manifest_digest}"] = layout
        return built

    def _layout(self, source: str) -> str:
        ref = source.removeprefix("docker://")
        if ref not in self.images:
            raise E.ImageNotFound(f"reading manifest in {ref}: manifest unknown")
        return self.images[ref]

    async def inspect_raw(self, source: str, access: Access | None, seconds: float) -> bytes:
        self.inspects.append(source)
        self.accesses.append(access)
        if self.fail:
            raise self.fail
        layout = self._layout(source)
        with open(os.path.join(layout, "index.json")) as fh:
            digest = json.load(fh)["manifests"][0]["digest"]
        return manifest_bytes(self.blobs, digest)

    async def copy(self, source: str, layout: str, blobs: str, access: Access | None,
                   started: Callable[[int], None] | None = None) -> None:
        """As skopeo: the blobs under their descriptors' digests, then the layout's index."""
        self.copies.append(source)
        if self.hang:
            await asyncio.sleep(3600)
        if source.startswith("oci:"):
            src = source.removeprefix("oci:").split(":")[0]
            src_blobs = os.path.join(src, "blobs")
        else:
            src, src_blobs = self._layout(source), self.blobs
        with open(os.path.join(src, "index.json")) as fh:
            index = json.load(fh)
        digest = index["manifests"][0]["digest"]
        man = json.loads(manifest_bytes(src_blobs, digest))
        for desc in [man["config"], *man["layers"], {"digest": digest}]:
            name = desc["digest"].split(":")[1]
            os.makedirs(os.path.join(blobs, "sha256"), exist_ok=True)
            shutil.copy(os.path.join(src_blobs, "sha256", name), os.path.join(blobs, "sha256", name))
        shutil.copy(os.path.join(src, "index.json"), os.path.join(layout, "index.json"))


@pytest.fixture
def env(tmp_path: Path) -> Any:
    clock = FakeClock()
    events = EventRecorder(clock, "node-1")
    registry = FakeRegistry(tmp_path / "registry")
    store = ImageStore(str(tmp_path / "store"), clock)
    manager = ImageManager(store, registry, events, clock, platform=("linux", "amd64"), gc_policy=GCPolicy())

    class Env:
        pass

    e = Env()
    e.clock, e.events, e.registry, e.store, e.manager, e.tmp = clock, events, registry, store, manager, tmp_path  # type: ignore[attr-defined]
    return e


def reasons(events: EventRecorder) -> list[str]:
    return [e["reason"] for e in events.list()]


def layer(name: str, size: int = 100) -> bytes:
    return tar_bytes([d("bin"), f(f"bin/{name}", os.urandom(size), 0o755), sym("bin/sh", name)])


async def test_pull_if_not_present_then_present(env: Any) -> None:
    await env.manager.start()
    built = env.registry.add("app:1", [layer("a"), layer("b")])
    record = await env.manager.ensure(f"{REG}/app:1", None, POD)
    assert record.id == built.config_digest
    assert record.repo_tags == (f"{REG}/app:1",)
    assert f"{REG}/app@{built.manifest_digest}" in record.repo_digests
    assert record.config.entrypoint == ("/bin/sh",) and record.config.env == ("PATH=/bin",)
    dirs = env.manager.lowerdirs(record)
    assert [os.path.basename(p) for p in dirs] == [i.split(":")[1] for i in reversed(built.diff_ids)]  # top first
    assert all(os.path.isdir(p) for p in dirs)
    assert reasons(env.events) == ["Pulling", "Pulled"]
    assert "Successfully pulled image" in env.events.list()[-1]["message"]
    assert env.events.list()[-1]["involvedObject"]["name"] == "web"
    again = await env.manager.ensure(f"{REG}/app:1", None, POD)
    assert again.id == record.id and len(env.registry.copies) == 1
    assert env.events.list()[-1]["message"] == f'Container image "{REG}/app:1" already present on machine'
    assert os.listdir(env.store.tmp) == []  # nothing left of the pull


async def test_always_with_an_unchanged_digest_downloads_nothing(env: Any) -> None:
    await env.manager.start()
    env.registry.add("app:latest", [layer("a")])
    await env.manager.ensure(f"{REG}/app", None, POD)  # :latest -> Always
    await env.manager.ensure(f"{REG}/app:latest", "Always", POD)
    assert len(env.registry.copies) == 1 and len(env.registry.inspects) == 2


async def test_never_and_invalid_names(env: Any) -> None:
    await env.manager.start()
    with pytest.raises(E.NeverPull) as never:
        await env.manager.ensure(f"{REG}/app:1", "Never", POD)
    assert never.value.reason == "ErrImageNeverPull"
    with pytest.raises(E.InvalidImageName) as invalid:
        await env.manager.ensure("Bad/Name", None, POD, field_path="spec.containers[0].image")
    assert invalid.value.reason == "InvalidImageName"
    assert "couldn't parse image name" in invalid.value.message
    assert reasons(env.events) == ["ErrImageNeverPull", "InspectFailed"]
    assert env.registry.inspects == []


async def test_failures_back_off_10s_doubling(env: Any) -> None:
    await env.manager.start()
    image = f"{REG}/missing:1"
    with pytest.raises(E.ImageNotFound) as first:
        await env.manager.ensure(image, None, POD)
    assert first.value.reason == "ErrImagePull"
    with pytest.raises(BackOffError) as backoff:
        await env.manager.ensure(image, None, POD)
    assert backoff.value.reason == "ImagePullBackOff"
    assert backoff.value.message.startswith(f'Back-off pulling image "{image}": ErrImagePull: ')
    assert len(env.registry.inspects) == 1  # no attempt during the back-off
    env.clock.advance(10)
    with pytest.raises(E.ImageNotFound):
        await env.manager.ensure(image, None, POD)
    env.clock.advance(19)
    with pytest.raises(BackOffError):
        await env.manager.ensure(image, None, POD)
    env.clock.advance(1)
    env.registry.add("missing:1", [layer("m")])  # it appears: the next attempt works
    await env.manager.ensure(image, None, POD)
    assert reasons(env.events) == ["Pulling", "Failed", "BackOff", "Pulling", "Failed", "BackOff", "Pulling", "Pulled"]


async def test_a_lying_blob_leaves_nothing(env: Any) -> None:
    await env.manager.start()
    built = env.registry.add("liar:1", [layer("a", 5000)])
    blob = os.path.join(env.registry.blobs, "sha256", built.layer_digests[0].split(":")[1])
    with open(blob, "r+b") as fh:  # the registry serves other bytes under the digest
        fh.seek(100)
        fh.write(b"\0" * 16)
    with pytest.raises(E.PullFailed) as info:
        await env.manager.ensure(f"{REG}/liar:1", None, POD)
    assert isinstance(info.value, (E.DigestMismatch, E.BadLayer))
    assert env.store.records() == []
    assert os.listdir(os.path.join(env.store.layers, "sha256")) == []
    assert os.listdir(env.store.tmp) == []
    # the damaged blob was dropped from the store, so a later pull fetches it again
    assert not os.path.exists(os.path.join(env.store.blobs, "sha256", built.layer_digests[0].split(":")[1]))


async def test_hostile_layer_is_refused_and_nothing_escapes(env: Any) -> None:
    await env.manager.start()
    env.registry.add("evil:1", [tar_bytes([f("ok", b"1"), f("../../escape", b"x")])])
    with pytest.raises(E.BadLayer, match="leaves the layer"):
        await env.manager.ensure(f"{REG}/evil:1", None, POD)
    assert not (env.tmp / "escape").exists() and not (env.tmp / "store" / "escape").exists()
    assert env.store.records() == [] and os.listdir(env.store.tmp) == []


async def test_no_progress_stops_the_pull(env: Any) -> None:
    await env.manager.start()
    env.registry.add("slow:1", [layer("a")])
    env.registry.hang = True
    env.manager.progress_timeout = 0.0  # the fake clock does not move: stop at the first look
    with pytest.raises(E.RegistryUnavailable, match="no progress"):
        await env.manager.ensure(f"{REG}/slow:1", None, POD)
    assert env.manager.progress() == []


async def test_shared_layers_tags_leases_remove_and_sweep(env: Any) -> None:
    await env.manager.start()
    base = layer("base", 20_000)
    one = env.registry.add("one:1", [base, layer("x")])
    two = env.registry.add("two:1", [base, layer("y")])
    r1 = await env.manager.ensure(f"{REG}/one:1", None, POD)
    r2 = await env.manager.ensure(f"{REG}/two:1", None, POD)
    assert one.diff_ids[0] == two.diff_ids[0]
    assert len(os.listdir(os.path.join(env.store.layers, "sha256"))) == 3  # the base layer once
    await env.manager.lease("default_web_uid-1_app", r1.id)
    with pytest.raises(E.InUse, match="default_web_uid-1_app"):
        await env.manager.remove(f"{REG}/one:1")
    await env.manager.remove(f"{REG}/two:1")
    assert os.path.isdir(env.store.layer_dir(two.diff_ids[0]))  # still used by one:1
    assert not os.path.exists(env.store.layer_dir(two.diff_ids[1]))
    assert await env.manager.release("default_web_uid-1_app")
    await env.manager.remove(r1.id[:12].replace("sha256:", ""))  # an id prefix works too
    assert os.listdir(os.path.join(env.store.layers, "sha256")) == []
    assert os.listdir(os.path.join(env.store.blobs, "sha256")) == []
    with pytest.raises(E.NotPresent):
        env.manager.get(f"{REG}/one:1")
    del r2


async def test_a_tag_moves_to_the_newer_image(env: Any) -> None:
    await env.manager.start()
    env.registry.add("app:1", [layer("old")])
    old = await env.manager.pull(f"{REG}/app:1")
    env.registry.add("app:1", [layer("new")])
    new = await env.manager.pull(f"{REG}/app:1")
    assert new.id != old.id
    assert env.store.get(old.id).repo_tags == ()  # type: ignore[union-attr]
    assert env.store.get(new.id).repo_tags == (f"{REG}/app:1",)  # type: ignore[union-attr]


async def test_gc_removes_least_recently_used_unused_images(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await env.manager.start()
    for name in ["a:1", "b:1", "c:1"]:
        env.registry.add(name, [layer(name[0], 30_000)])
        await env.manager.pull(f"{REG}/{name}")
        env.clock.advance(200)  # older than imageMinimumGCAge, used in this order
    used = env.manager.get(f"{REG}/a:1")
    await env.manager.lease("holder", used.id)  # the oldest is in use: never a candidate
    env.clock.advance(10)
    sizes = {r.repo_tags[0]: r.size for r in env.store.records()}
    capacity = 1_000_000
    # 90% used: free down to 80% -> 100_000 bytes, so b (the least recently used unused one) and then c
    monkeypatch.setattr(env.store, "fs_stats", lambda: (capacity, 100_000))
    result = await env.manager.garbage_collect()
    assert result.reason == "threshold" and result.goal == 100_000
    names_left = [r.repo_tags[0] for r in env.store.records()]
    assert names_left == [f"{REG}/a:1"]
    assert len(result.removed) == 2
    assert result.bytes_freed >= sizes[f"{REG}/b:1"] + sizes[f"{REG}/c:1"]  # st_blocks >= apparent sizes
    assert "FreeDiskSpaceFailed" not in reasons(env.events)
    monkeypatch.setattr(env.store, "fs_stats", lambda: (capacity, 900_000))
    assert (await env.manager.garbage_collect()).removed == []


async def test_reclaim_for_eviction(env: Any) -> None:
    await env.manager.start()
    env.registry.add("a:1", [layer("a", 50_000)])
    env.registry.add("b:1", [layer("b", 50_000)])
    await env.manager.pull(f"{REG}/a:1")
    env.clock.advance(10)
    await env.manager.pull(f"{REG}/b:1")
    env.clock.advance(300)
    freed = await env.manager.reclaim(10_000)
    assert freed >= 50_000  # one image's blob and layer, measured on disk
    assert [r.repo_tags[0] for r in env.store.records()] == [f"{REG}/b:1"]


async def test_young_images_survive_reclaim(env: Any) -> None:
    await env.manager.start()
    env.registry.add("a:1", [layer("a")])
    await env.manager.pull(f"{REG}/a:1")
    assert await env.manager.reclaim(1 << 30) == 0


async def test_crash_leftovers_are_not_an_image(env: Any) -> None:
    await env.manager.start()
    built = env.registry.add("app:1", [layer("a")])
    record = await env.manager.pull(f"{REG}/app:1")
    # a crash mid-pull of another image: a layout in tmp, a half-unpacked layer, a stray blob,
    # a record written up to its temp file, a layer of an image whose record never came
    os.makedirs(os.path.join(env.store.tmp, "pull-dead", "blobs"))
    os.makedirs(os.path.join(env.store.tmp, "layer-dead", "usr"))
    stray = os.path.join(env.store.blobs, "sha256", "f" * 64)
    Path(stray).write_bytes(b"half")
    orphan = os.path.join(env.store.layers, "sha256", "e" * 64)
    os.makedirs(orphan)
    Path(env.store.records_dir, ".sha256-abc.json.1234.tmp").write_bytes(b"{")
    # and a record whose layer directory is gone
    bad = env.registry.add("bad:1", [layer("z")])
    rbad = await env.manager.pull(f"{REG}/bad:1")
    shutil.rmtree(env.store.layer_dir(bad.diff_ids[0]))

    clock = env.clock
    reopened = ImageManager(ImageStore(env.store.root, clock), env.registry, EventRecorder(clock, "n"), clock)
    problems = await reopened.start()
    assert [r.id for r in reopened.images()] == [record.id]
    assert any(rbad.id.replace(":", "-") in p for p in problems)
    assert os.listdir(reopened.store.tmp) == []
    assert not os.path.exists(stray) and not os.path.exists(orphan)
    assert os.path.isdir(reopened.store.layer_dir(built.diff_ids[0]))
    assert not [n for n in os.listdir(reopened.store.records_dir) if n.endswith(".tmp")]


async def test_leases_survive_a_restart(env: Any) -> None:
    await env.manager.start()
    env.registry.add("app:1", [layer("a")])
    record = await env.manager.pull(f"{REG}/app:1")
    await env.manager.lease("ns_pod_uid_c", record.id)
    reopened = ImageManager(ImageStore(env.store.root, env.clock), env.registry, env.events, env.clock)
    await reopened.start()
    assert reopened.store.leases() == {"ns_pod_uid_c": record.id}
    with pytest.raises(E.InUse):
        await reopened.remove(record.id)
    with pytest.raises(ValueError):
        await reopened.lease("../escape", record.id)


async def test_a_lease_touches_the_record_on_disk_at_most_once_a_minute(env: Any) -> None:
    """A burst of starts from one image rewrites its record once (last_used, GC's order), not
    once per container; the store's own last_used is always the latest."""
    await env.manager.start()
    env.registry.add("app:1", [layer("a")])
    record = await env.manager.pull(f"{REG}/app:1")
    path = os.path.join(env.store.records_dir, record.id.replace(":", "-") + ".json")

    def on_disk() -> float:
        with open(path, "rb") as f:
            return float(json.loads(f.read())["last_used"])

    pulled = on_disk()
    env.clock.advance(TOUCH_WRITE_S)
    first = await env.manager.lease("c1", record.id)
    assert on_disk() == first.last_used == pulled + TOUCH_WRITE_S
    env.clock.advance(TOUCH_WRITE_S - 1)
    second = await env.manager.lease("c2", record.id)
    assert second.last_used == first.last_used + TOUCH_WRITE_S - 1 == env.store.get(record.id).last_used
    assert on_disk() == first.last_used  # less than a minute later: not rewritten
    env.clock.advance(1)
    third = await env.manager.lease("c3", record.id)
    assert on_disk() == third.last_used


async def test_a_lease_write_cut_before_its_rename_is_no_lease(env: Any) -> None:
    await env.manager.start()
    env.registry.add("app:1", [layer("a")])
    record = await env.manager.pull(f"{REG}/app:1")
    stray = os.path.join(env.store.leases_dir, "c1.json.0a1b2c3d.tmp")
    with open(stray, "w") as f:
        json.dump({"holder": "c1", "image": record.id, "since": 0}, f)
    reopened = ImageManager(ImageStore(env.store.root, env.clock), env.registry, env.events, env.clock)
    await reopened.start()
    assert reopened.store.leases() == {} and not os.path.exists(stray)
    await reopened.remove(record.id)  # nothing holds it


async def test_import_oci_layout(env: Any) -> None:
    await env.manager.start()
    layout = str(env.tmp / "airgap")
    built = write_layout(layout, [layer("a")], ref_name="v1")
    record = await env.manager.import_image(layout, "oci", "example.com/team/app:v1", "v1")
    assert record.id == built.config_digest
    assert record.repo_tags == ("example.com/team/app:v1",)
    assert record.repo_digests == (f"example.com/team/app@{built.manifest_digest}",)


async def test_node_status_images(env: Any) -> None:
    await env.manager.start()
    env.registry.add("small:1", [layer("s", 10)])
    env.registry.add("big:1", [layer("b", 90_000)])
    await env.manager.pull(f"{REG}/small:1")
    await env.manager.pull(f"{REG}/big:1")
    images = env.manager.node_images()
    assert [i["names"][-1] for i in images] == [f"{REG}/big:1", f"{REG}/small:1"]  # largest first
    assert images[0]["names"][0].startswith(f"{REG}/big@sha256:")  # digests, then tags
    assert all(i["sizeBytes"] > 0 for i in images)
    assert node_images(env.store.records(), max_images=1) == images[:1]


async def test_each_matching_credential_is_tried_until_the_registry_takes_one(env: Any) -> None:
    """The kubelet's pull loop over the keyring's matches: a refused credential is followed by the
    next (most specific first); when every one is refused the last 401 is the ErrImagePull."""
    from nodeagent.agent.images.credentials import Credential

    await env.manager.start()
    env.registry.add("team/app:1", [layer("a")])
    good, bad = Credential("puller", "right"), Credential("puller", "wrong")
    real = env.registry.inspect_raw

    async def only_good(source: str, access: Access | None, seconds: float) -> bytes:
        if access is None or access.credential != good:
            env.registry.accesses.append(access)
            raise E.Unauthorized("unauthorized: authentication required")
        return await real(source, access, seconds)

    env.registry.inspect_raw = only_good
    record = await env.manager.ensure(f"{REG}/team/app:1", None, POD,
                                      pull_secrets=[{REG: good}, {f"{REG}/team": bad}])
    assert record.repo_tags == (f"{REG}/team/app:1",)
    assert [a.credential for a in env.registry.accesses] == [bad, good]  # REG/team is more specific
    with pytest.raises(E.Unauthorized, match="authentication required"):
        await env.manager.ensure(f"{REG}/team/other:1", None, POD, pull_secrets=[{REG: bad}])
