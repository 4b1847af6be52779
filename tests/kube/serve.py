"""Run the real control plane (ControlPlane) in this process over the tests' MemoryStore.

`python tests/kube/serve.py CONFIG` prints `PORT <n>` once listening. The integration tests use
it as the server process until the storage branch's backends are in this build; the process,
HTTP stack, registry and plugins are the production ones, only the Store is the tests' own.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstore import MemoryStore

from nodeagent.cluster.controlplane import ControlPlane
from nodeagent.cluster.serverconfig import ServerConfig, load_server_config
from nodeagent.cluster.storage.interface import Store
from nodeagent.daemonkit.logsetup import configure_logging


async def memory(_config: ServerConfig) -> Store:
    return MemoryStore()


def main() -> None:
    config = load_server_config(sys.argv[1])
    configure_logging(config.logging.level, "json")
    plane = ControlPlane(config, store_factory=memory)
    asyncio.run(plane.run(ready=lambda port: print(f"PORT {port}", flush=True)))


if __name__ == "__main__":
    main()
