"""Pulling a ~50 MB image from a local registry: the agent's ImageManager against `skopeo copy`.

Builds the test images of integration/images/tools.py (busybox-static + ~50 MB of random bytes,
incompressible), starts Debian's docker-registry on a free loopback port, pushes the image, then
for each of N runs, each into a fresh store (nothing cached):
  - ImageManager.pull: skopeo copy into the blob store, every blob checked again while the layers
    are unpacked (tar safety, whiteouts), syncfs, rename, the record written; split into its
    download part and its unpack/commit part,
  - `skopeo copy docker://... oci:DIR` of the same image (the download alone, as the baseline).
Prints MB/s (compressed bytes of the image / wall seconds), median and best of N. Run it as root
(layers are unpacked with their owners): `sudo .venv/bin/python bench/image_bench.py [-n 5]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))

from images.image_tools import BIG_MB, Registry, build_images, missing_tools

from nodeagent.agent.events import EventRecorder
from nodeagent.agent.images.manager import ImageManager
from nodeagent.agent.images.skopeo import Skopeo
from nodeagent.agent.images.store import ImageStore
from nodeagent.core.clock import SystemClock


def mbps(size: int, seconds: float) -> float:
    return size / 1e6 / seconds


async def agent_pull(root: Path, image: str) -> tuple[float, float, int]:
    """(total seconds, download seconds, compressed bytes) of one pull into a fresh store."""
    clock = SystemClock()
    store = ImageStore(str(root / "images"), clock)
    fetcher = Skopeo(workdir=str(root))
    manager = ImageManager(store, fetcher, EventRecorder(clock, "bench"), clock)
    await manager.start()
    download = [0.0]
    real_copy = fetcher.copy

    async def timed_copy(*args: object, **kw: object) -> None:
        t = time.perf_counter()
        await real_copy(*args, **kw)  # type: ignore[arg-type]
        download[0] = time.perf_counter() - t

    fetcher.copy = timed_copy  # type: ignore[method-assign]
    t0 = time.perf_counter()
    record = await manager.pull(image)
    total = time.perf_counter() - t0
    compressed = record.manifest_size + record.config_size + sum(layer.size for layer in record.layers)
    return total, download[0], compressed


def skopeo_copy(dest: Path, image: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(["skopeo", "--tmpdir", str(dest.parent), "--insecure-policy", "copy", "--quiet",
                    "--src-tls-verify=false", f"docker://{image}", f"oci:{dest}"],
                   check=True, capture_output=True, env={**os.environ, "TMPDIR": str(dest.parent)})
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument("--mb", type=int, default=BIG_MB, help=f"random megabytes in the image (default {BIG_MB})")
    args = parser.parse_args()
    if missing_tools():
        print(f"missing {', '.join(missing_tools())}: run integration/images/install-tools.sh", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="image-bench-"))
    registry = None
    try:
        images = build_images(work / "build", big_mb=args.mb)
        registry = Registry(work / "registry").start()
        registry.push(f"oci:{images.layout}:big", "bench/big:1")
        image = f"{registry.host}/bench/big:1"
        agent: list[tuple[float, float, int]] = []
        skopeo: list[float] = []
        for i in range(args.n):
            root = work / f"agent-{i}"
            root.mkdir()
            agent.append(asyncio.run(agent_pull(root, image)))
            shutil.rmtree(root)
            dest = work / f"skopeo-{i}"
            skopeo.append(skopeo_copy(dest, image))
            shutil.rmtree(dest)
        size = agent[0][2]
        totals = [a[0] for a in agent]
        downloads = [a[1] for a in agent]
        unpacks = [a[0] - a[1] for a in agent]
        print(f"image: {image}, {size / 1e6:.1f} MB compressed (busybox + {args.mb} MiB random), {args.n} runs each")
        for label, values in (("agent pull (download + check + unpack + commit)", totals),
                              ("  of which skopeo copy into the blob store", downloads),
                              ("  of which unpack, checks, syncfs, record", unpacks),
                              ("skopeo copy docker:// -> oci: (baseline)", skopeo)):
            med, best = statistics.median(values), min(values)
            print(f"{label:52s} median {med * 1000:7.1f} ms ({mbps(size, med):6.1f} MB/s)   "
                  f"best {best * 1000:7.1f} ms ({mbps(size, best):6.1f} MB/s)")
        print(f"agent pull / skopeo copy (median): {statistics.median(totals) / statistics.median(skopeo):.2f}x")
    finally:
        if registry is not None:
            registry.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
