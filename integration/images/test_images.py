"""Images against the real tools, as root: Debian's docker-registry on loopback, skopeo, umoci-built
images, overlayfs on this kernel, a small tmpfs as imagefs.

What is checked comes from the outside: files in the layer directories, an overlay mount of them,
statvfs of the filesystem, the registry's own storage."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from images.image_tools import BuiltImages, layout_with_layers
from nodeagent.agent.config.settings import RegistryConfig
from nodeagent.agent.images import errors as E
from nodeagent.agent.images.gc import GCPolicy
from nodeagent.agent.images.manager import BackOffError, PodRef
from nodeagent.agent.images.unpack import OPAQUE_XATTR

POD = PodRef("default", "web", "uid-it-1")
HERE = Path(__file__).parent


def _tar(entries: list[tuple[str, bytes]]) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _load_overlay_module() -> None:
    """The UML guest's kernel has overlayfs as a module, in the unpacked user-mode-linux package
    (.uml-work, mounted at the same path in the guest): insmod it when the kernel lacks overlay."""
    if "overlay" in Path("/proc/filesystems").read_text():
        return
    release = os.uname().release
    work = Path(os.environ.get("W", HERE.parent.parent / ".uml-work"))
    module = work / "root/usr/lib/uml/modules" / release / "kernel/fs/overlayfs/overlay.ko"
    if module.is_file():  # finit_module(2) directly: kmod (insmod) is not on every machine
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(module, os.O_RDONLY | os.O_CLOEXEC)
        try:
            libc.syscall(313, fd, b"", 0)  # SYS_finit_module on x86_64 (the UML guest's ABI too)
        finally:
            os.close(fd)


# ---- pulling ----


async def test_pull_anonymous_from_the_local_registry(make_env: Any, registry: Any) -> None:
    env = await make_env()
    image = f"{registry.host}/test/small:1"
    record = await env.manager.ensure(image, None, POD)
    assert record.repo_tags == (image,)
    assert f"{registry.host}/test/small@{registry.digests['small']}" in record.repo_digests
    assert record.config.entrypoint == ("/bin/sh",) and record.config.cmd == ("-c", "echo hello from small")
    assert record.config.env == ("PATH=/bin",) and record.config.user == "0:0"
    (top,) = env.manager.lowerdirs(record)
    busybox = Path(top) / "bin/busybox"
    assert busybox.read_bytes() == Path("/bin/busybox").read_bytes()
    assert os.readlink(Path(top) / "bin/sh") == "busybox"
    assert env.reasons() == ["Pulling", "Pulled"]
    assert "Image size:" in env.events.list()[-1]["message"]
    # IfNotPresent (tag 1): present now, no second download
    again = await env.manager.ensure(image, None, POD)
    assert again.id == record.id and env.reasons()[-1] == "Pulled"
    assert "already present" in env.events.list()[-1]["message"]
    assert os.listdir(env.store.tmp) == []


async def test_always_checks_the_digest_and_downloads_nothing_new(make_env: Any, registry: Any) -> None:
    env = await make_env()
    image = f"{registry.host}/test/small:1"
    await env.manager.pull(image)
    copies: list[str] = []
    real = env.fetcher.copy

    async def counting(*args: Any, **kw: Any) -> None:
        copies.append(args[0])
        await real(*args, **kw)

    env.fetcher.copy = counting  # type: ignore[method-assign]
    await env.manager.ensure(image, "Always", POD)
    assert copies == []


async def test_whiteouts_in_an_overlay_of_the_layers(make_env: Any, registry: Any, tmp_path: Path) -> None:
    env = await make_env()
    record = await env.manager.pull(f"{registry.host}/test/layered:1")
    dirs = env.manager.lowerdirs(record)
    assert len(dirs) == 4
    deleted = [d for d in dirs if os.path.lexists(os.path.join(d, "etc/app.conf"))
               and stat.S_ISCHR(os.lstat(os.path.join(d, "etc/app.conf")).st_mode)]
    assert len(deleted) == 1 and os.lstat(os.path.join(deleted[0], "etc/app.conf")).st_rdev == 0
    assert os.getxattr(os.path.join(dirs[0], "data/old"), OPAQUE_XATTR) == b"y"
    merged = tmp_path / "merged"
    merged.mkdir()
    _load_overlay_module()
    mount = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", "lowerdir=" + ":".join(dirs), str(merged)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        have = Path("/proc/filesystems").read_text()
        if "overlay" not in have:
            pytest.skip(f"this kernel has no overlayfs ({mount.stderr.strip()})")
        raise AssertionError(f"overlay mount failed: {mount.stderr}")
    try:
        assert (merged / "bin/busybox").is_file()
        assert not (merged / "etc/app.conf").exists()  # the whiteout hides it
        assert sorted(os.listdir(merged / "data/old")) == ["new"]  # the opaque dir hides a and b
        out = subprocess.run(["chroot", str(merged), "/bin/sh", "-c", "echo in-image; cat /data/old/new"],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout == "in-image\nnew\n", out.stderr
    finally:
        subprocess.run(["umount", str(merged)], check=True)


async def test_basic_auth(make_env: Any, basic_registry: Any, tmp_path: Path) -> None:
    image = f"{basic_registry.host}/test/small:1"
    env = await make_env()
    with pytest.raises(E.Unauthorized):
        await env.manager.pull(image)
    password = tmp_path / "password"
    password.write_text(basic_registry.users["puller"] + "\n")
    password.chmod(0o600)
    regs = {basic_registry.host: RegistryConfig(username="puller", password_file=str(password))}
    env = await make_env(tmp_path / "with-creds", registries=regs)
    record = await env.manager.pull(image)
    assert record.repo_tags == (image,)
    password.write_text("wrong\n")
    env2 = await make_env(tmp_path / "wrong-creds", registries=regs)
    with pytest.raises(E.Unauthorized):
        await env2.manager.pull(image)


async def test_bearer_token_auth(make_env: Any, token_registry: Any, tmp_path: Path) -> None:
    image = f"{token_registry.host}/test/small:1"
    env = await make_env()
    with pytest.raises(E.Unauthorized):
        await env.manager.pull(image)
    password = tmp_path / "password"
    password.write_text(token_registry.users["puller"])
    issued = token_registry.token_server.issued
    env = await make_env(tmp_path / "creds", registries={
        token_registry.host: RegistryConfig(username="puller", password_file=str(password))})
    record = await env.manager.pull(image)
    assert record.repo_tags == (image,)
    assert token_registry.token_server.issued > issued  # the bearer-token flow ran


# ---- import ----


async def test_import_oci_layout_and_docker_archive(make_env: Any, images: BuiltImages) -> None:
    env = await make_env()
    oci = await env.manager.import_image(str(images.layout), "oci", "example.com/test/layered:imported", "layered")
    assert len(oci.layers) == 4 and oci.repo_tags == ("example.com/test/layered:imported",)
    archived = await env.manager.import_image(str(images.docker_archive), "docker-archive", "test/small:archived")
    assert archived.repo_tags == ("docker.io/test/small:archived",)
    (top,) = env.manager.lowerdirs(archived)
    assert (Path(top) / "bin/busybox").is_file()
    with pytest.raises(E.ImageNotFound):
        await env.manager.import_image(str(images.layout) + "-missing", "oci", "x:1")
    with pytest.raises(E.ImageNotFound):
        await env.manager.import_image(str(images.layout), "oci", "x:1", "no-such-ref")


# ---- removal, leases, GC on a small imagefs ----


def _statvfs(path: Path) -> tuple[int, int]:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


async def test_remove_refuses_images_in_use_and_frees_space(make_env: Any, registry: Any, small_imagefs: Path) -> None:
    env = await make_env(small_imagefs)
    record = await env.manager.pull(f"{registry.host}/test/small:1")
    _, before = _statvfs(small_imagefs)
    await env.manager.lease("default_web_uid-it-1_app", record.id)
    with pytest.raises(E.InUse):
        await env.manager.remove(f"{registry.host}/test/small:1")
    await env.manager.release("default_web_uid-it-1_app")
    await env.manager.remove(f"{registry.host}/test/small:1")
    _, after = _statvfs(small_imagefs)
    assert after - before >= record.size // 2  # busybox twice (blob, unpacked) is back
    assert os.listdir(os.path.join(env.store.layers, "sha256")) == []


async def test_gc_and_reclaim_on_a_small_imagefs(make_env: Any, registry: Any, small_imagefs: Path) -> None:
    env = await make_env(small_imagefs, gc_policy=GCPolicy(high_percent=5, low_percent=2, min_age=0.0))
    small = await env.manager.pull(f"{registry.host}/test/small:1")
    layered = await env.manager.pull(f"{registry.host}/test/layered:1")
    capacity, available = _statvfs(small_imagefs)
    assert (capacity - available) * 100 // capacity >= 5, "the test needs the images to fill 5% of imagefs"
    await env.manager.lease("holder", layered.id)
    result = await env.manager.garbage_collect()
    assert result.removed == [small.id] and result.reason == "threshold"
    assert [r.id for r in env.manager.images()] == [layered.id]  # in use: kept, though over the threshold
    assert "FreeDiskSpaceFailed" in env.reasons()  # the goal was not reached, as the kubelet reports
    await env.manager.release("holder")
    _, before = _statvfs(small_imagefs)
    freed = await env.manager.reclaim(1)
    _, after = _statvfs(small_imagefs)
    assert freed > 0 and after - before >= freed // 2
    assert env.manager.images() == []


async def test_an_image_bigger_than_imagefs_is_refused_before_download(make_env: Any, registry: Any,
                                                                        small_imagefs: Path) -> None:
    env = await make_env(small_imagefs)
    with pytest.raises(E.NoSpace, match="the image needs"):
        await env.manager.pull(f"{registry.host}/test/big:1")  # ~50 MB compressed on a 40 MiB imagefs
    assert env.manager.images() == [] and os.listdir(env.store.tmp) == []
    assert os.listdir(os.path.join(env.store.blobs, "sha256")) == []


async def test_a_layer_that_unpacks_bigger_than_imagefs(make_env: Any, registry: Any, small_imagefs: Path,
                                                        tmp_path: Path) -> None:
    """60 MB of zeros: a small download, a layer that does not fit on a 40 MiB imagefs."""
    layout = layout_with_layers(tmp_path, "zeros", [_tar([("ok", b"1"), ("zeros", bytes(60 << 20))])])
    registry.push(f"oci:{layout}:latest", "test/zeros:1")
    env = await make_env(small_imagefs, reserve_bytes=1 << 20)
    with pytest.raises(E.NoSpace, match="no space left on the image filesystem"):
        await env.manager.ensure(f"{registry.host}/test/zeros:1", None, POD)
    assert env.manager.images() == [] and os.listdir(env.store.tmp) == []
    assert os.listdir(os.path.join(env.store.layers, "sha256")) == []
    _, available = _statvfs(small_imagefs)
    assert available > 30 << 20  # nothing of the half-written layer is left behind
    record = await env.manager.pull(f"{registry.host}/test/small:1")  # and the store still works
    assert record.repo_tags


# ---- bad input ----


async def test_unknown_image_and_unknown_registry(make_env: Any, registry: Any) -> None:
    env = await make_env()
    with pytest.raises(E.ImageNotFound) as info:
        await env.manager.ensure(f"{registry.host}/test/nope:1", None, POD)
    assert info.value.reason == "ErrImagePull" and "manifest unknown" in info.value.message
    with pytest.raises(BackOffError):
        await env.manager.ensure(f"{registry.host}/test/nope:1", None, POD)
    port = _closed_port()
    with pytest.raises(E.RegistryUnavailable):
        await env.manager.pull(f"127.0.0.1:{port}/test/small:1")
    assert env.reasons()[:3] == ["Pulling", "Failed", "BackOff"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A TCP listener that accepts and never answers: a registry that times out."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        for c in conns:
            c.close()
        srv.close()


async def test_a_registry_that_times_out(make_env: Any, black_hole: int) -> None:
    env = await make_env(inspect_timeout=3.0)
    with pytest.raises(E.RegistryUnavailable, match="within 3s"):
        await env.manager.pull(f"127.0.0.1:{black_hole}/test/small:1")


async def test_a_registry_that_lies_about_a_blob(make_env: Any, images: BuiltImages, tmp_path: Path,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    from images.image_tools import Registry

    reg = Registry(tmp_path / "liar").start()
    try:
        reg.push(f"oci:{images.layout}:small", "test/liar:1")
        env = await make_env()
        record_digest = None
        # find the layer blob in the registry's storage and flip bytes in it
        raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{reg.host}/test/liar:1"],
                             capture_output=True, text=True, check=True).stdout
        import json

        record_digest = json.loads(raw)["layers"][0]["digest"]
        data = reg.blob_data(record_digest)
        with open(data, "r+b") as f:
            f.seek(1000)
            f.write(b"\xff" * 64)
        with pytest.raises(E.DigestMismatch):
            await env.manager.pull(f"{reg.host}/test/liar:1")
        assert env.manager.images() == [] and os.listdir(env.store.tmp) == []
        assert not os.path.exists(os.path.join(env.store.blobs, "sha256", record_digest.split(":")[1]))
    finally:
        reg.stop()


@pytest.mark.parametrize("name, layers, error, why", [
    ("escape", [_tar([("ok", b"1"), ("../../../../../../tmp/nodeagent-it-escaped", b"x")])], E.BadLayer, "leaves the layer"),
    ("absolute", [_tar([("/tmp/nodeagent-it-escaped", b"x")])], E.BadLayer, "absolute path"),
])
async def test_hostile_layers_from_a_registry(make_env: Any, registry: Any, tmp_path: Path, name: str,
                                              layers: list[bytes], error: type[Exception], why: str) -> None:
    layout = layout_with_layers(tmp_path, name, layers)
    registry.push(f"oci:{layout}:latest", f"test/{name}:1")
    env = await make_env()
    with pytest.raises(error, match=why):
        await env.manager.pull(f"{registry.host}/test/{name}:1")
    assert not os.path.exists("/tmp/nodeagent-it-escaped")
    assert env.manager.images() == [] and os.listdir(os.path.join(env.store.layers, "sha256")) == []


async def test_a_layer_that_is_not_a_tar(make_env: Any, registry: Any, tmp_path: Path) -> None:
    layout = layout_with_layers(tmp_path, "garbage", [b"definitely not a tar archive" * 100])
    registry.push(f"oci:{layout}:latest", "test/garbage:1")
    env = await make_env()
    with pytest.raises(E.BadLayer, match="not a valid tar"):
        await env.manager.ensure(f"{registry.host}/test/garbage:1", None, POD)
    assert env.reasons() == ["Pulling", "Failed"]


# ---- crash in the middle of a pull ----

PULLER = """
import asyncio, sys
sys.path.insert(0, {here!r})
from images.conftest import Env
from pathlib import Path
async def main():
    env = Env(Path({root!r}))
    await env.manager.start()
    await env.manager.pull({image!r})
asyncio.run(main())
"""


async def test_sigkill_mid_pull_leaves_nothing_that_looks_like_an_image(make_env: Any, registry: Any,
                                                                        tmp_path: Path) -> None:
    root = tmp_path / "crash"
    root.mkdir()
    image = f"{registry.host}/test/big:1"
    code = PULLER.format(here=str(HERE.parent), root=str(root), image=image)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tmp = root / "imagefs/images/tmp"
    layers = root / "imagefs/images/layers/sha256"
    killed_while_unpacking = False
    try:
        deadline = asyncio.get_running_loop().time() + 60
        # kill it while it unpacks the big layer (the first layer, busybox, is complete by then)
        while asyncio.get_running_loop().time() < deadline and proc.poll() is None:
            if tmp.is_dir() and layers.is_dir() and os.listdir(layers) and \
                    any(p.name.startswith("layer-") for p in tmp.iterdir()):
                killed_while_unpacking = True
                break
            await asyncio.sleep(0.002)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    assert killed_while_unpacking, f"the pull ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    assert len(os.listdir(layers)) == 1  # a complete layer of an image that was never recorded
    env = await make_env(root)
    assert env.manager.images() == []
    assert os.listdir(env.store.tmp) == []
    assert os.listdir(layers) == []  # swept: no record names it
    assert os.listdir(env.store.records_dir) == []
    record = await env.manager.pull(image)  # and the next pull works
    assert record.repo_tags == (image,)
