"""Integration suite: real kernels, as root.

Host (cgroup v1 hybrid): `.venv/bin/pytest integration -q`.
Pure cgroup v2 (User-Mode-Linux guest): `integration/run-in-uml.sh .venv/bin/pytest integration -q`.
systemd/nodeagent.service under systemd 252 as PID 1 (a UML guest of its own, booted from the host):
test_systemd_uml.py, with systemd_uml/.

Tests that take `cgroup_version` (directly or through `driver`) run once for the cgroup version
this kernel drives (v1 on the hybrid host, v2 in the guest). Every test gets its own agent root
`nodeagent-it-<random>` that is killed and removed afterwards; nothing else is touched.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, sweep_unmanaged

from nodeagent.agent.cgroups.detect import make_driver
from nodeagent.agent.cgroups.driver import CgroupDriver

HERE = Path(__file__).parent
IS_ROOT = os.geteuid() == 0


def _inside_uml() -> bool:
    """True when this kernel is User-Mode-Linux, e.g. in integration/run-in-uml.sh's guest."""
    try:
        with open("/proc/cpuinfo") as f:
            return "User Mode Linux" in f.read()
    except OSError:
        return False


# test_systemd_uml.py boots a UML guest of its own (systemd as PID 1) and runs on the host, in
# `make integration`. In the plain UML guest of `make integration-v2` it is not collected at all
# (not skipped): a UML kernel cannot usefully nest another, and the host run covers it already.
collect_ignore = ["test_systemd_uml.py"] if _inside_uml() else []


def _kernel_cgroup_version() -> tuple[int | None, str]:
    """The version this kernel drives (cpu and memory present), or None with the reason."""
    try:
        return make_driver("auto", "/nodeagent-it-probe").version, ""
    except ValueError as e:
        return None, str(e)


KERNEL_VERSION, NO_VERSION_REASON = _kernel_cgroup_version()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: real kernel, real processes, needs root")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_root = pytest.mark.skip(reason="integration tests write cgroupfs and need root (run as root)")
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
            if not IS_ROOT:
                item.add_marker(skip_root)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cgroup_version" not in metafunc.fixturenames:
        return
    if KERNEL_VERSION is None:
        param = pytest.param(
            None, id="none", marks=pytest.mark.skip(reason=f"no usable cgroup hierarchy: {NO_VERSION_REASON}")
        )
    else:
        mark = pytest.mark.cgroup_v1 if KERNEL_VERSION == 1 else pytest.mark.cgroup_v2
        param = pytest.param(KERNEL_VERSION, id=f"v{KERNEL_VERSION}", marks=mark)
    metafunc.parametrize("cgroup_version", [param])


@pytest.fixture
def driver(cgroup_version: int) -> Iterator[CgroupDriver]:
    """A driver for this kernel with a fresh agent root; the root is killed and removed after."""
    root = f"/nodeagent-it-{secrets.token_hex(4)}"
    drv = make_driver(f"v{cgroup_version}", root)
    try:
        yield drv
    finally:
        drv.kill("")
        drv.remove("")
        assert not cgroup_dirs(drv, ""), f"{root} left behind"
        left = sweep_unmanaged(root)  # what runc made in the hierarchies the driver does not manage
        assert not left, f"{root} left behind in an unmanaged hierarchy: {left}"


def cgroup_dirs(drv: CgroupDriver, path: str) -> list[str]:
    """The directories `path` has on disk (one per hierarchy on v1) that exist."""
    return [d for d in (os.path.dirname(f) for f in drv.procs_files(path)) if os.path.isdir(d)]


def cgroup_file(drv: CgroupDriver, path: str, controller: str, name: str) -> str:
    """Absolute path of a kernel interface file, computed here rather than by the driver."""
    rel = (drv.root.strip("/") + "/" + path.strip("/")).strip("/")
    base = drv.hierarchy(controller)
    if base is None:
        raise FileNotFoundError(f"this kernel offers no {controller} controller")
    return os.path.join(base, rel, name)


@pytest.fixture
def kernel_file(driver: CgroupDriver) -> Callable[[str, str, str], str]:
    """read(path, controller, file name) -> the file's stripped text, located independently."""

    def read_one(path: str, controller: str, name: str) -> str:
        with open(cgroup_file(driver, path, controller, name)) as f:
            return f.read().strip()

    return read_one


@pytest.fixture
def on_disk(driver: CgroupDriver) -> Callable[[str], list[str]]:
    """on_disk(path) -> the directories of `path` that exist (one per hierarchy on v1)."""
    return lambda path: cgroup_dirs(driver, path)


Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn(driver: CgroupDriver) -> Iterator[Spawn]:
    """Start a process that joins a cgroup before it execs (as the runtime does); reaped after."""
    started: list[subprocess.Popen[str]] = []

    def start(path: str, argv: list[str], **kw: object) -> subprocess.Popen[str]:
        files = driver.procs_files(path)

        def join() -> None:
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        p = subprocess.Popen(argv, preexec_fn=join, text=True, **kw)  # type: ignore[call-overload]
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


@pytest.fixture
def make_agent(tmp_path: Path, cgroup_version: int) -> Iterator[Callable[..., AgentProcess]]:
    """make(**AgentProcess options) starts a real agent in its own workdir; all are cleaned up."""
    agents: list[AgentProcess] = []

    def make(**kw: Any) -> AgentProcess:
        workdir = tmp_path / f"agent{len(agents)}"
        workdir.mkdir()
        agent = AgentProcess(workdir, cgroup_version, **kw)
        agents.append(agent)
        agent.start()
        return agent

    yield make
    errors = []
    for agent in agents:
        try:
            agent.cleanup()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)


@pytest.fixture
def agent(make_agent: Callable[..., AgentProcess]) -> AgentProcess:
    return make_agent()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Any]:
    """A real secure `nodeagent server run` (tests/kube/secure_server.py), stopped whatever happens."""
    from secure_cluster import ROOT, SecureServer

    (tmp_path / "server").mkdir()
    s = SecureServer(tmp_path / "server", cwd=ROOT)
    try:
        yield s
    finally:
        s.stop()
