"""Image containers run by a real OCI runtime, as root: runc on the host's cgroup v1 hybrid layout,
runc and crun in the UML guest (pure v2). The image is the busybox one built with umoci; the
container's cgroup is made by the agent's own driver in the kubepods layout, the runtime's child
of it holds the process, and everything checked is read from the outside (cgroupfs, /proc, the
log file, `runc state`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from images.test_images import _load_overlay_module
from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.cgroup_handle import DriverCgroup
from nodeagent.agent.runtime.oci import rootfs
from nodeagent.agent.runtime.oci.bundle import bind, container_bundle, hosts_file
from nodeagent.agent.runtime.oci.runtime import BundleDirs, OciRuntime, cgroups_path, container_id
from nodeagent.agent.runtime.oci.sandbox import Sandbox, sandbox_cgroup
from nodeagent.agent.runtime.oci.select import installed_runtimes, is_hybrid
from nodeagent.agent.runtime.spawn import LaunchSpec
from nodeagent.agent.runtime.state import REASON_OOM, Running, Terminated
from nodeagent.agent.runtime.supervisor import ContainerConfig, ContainerWorker

UID = "0c0ffee0-0000-4000-8000-00000000e001"


def _runtimes(cgroup_version: int) -> list[str]:
    found = installed_runtimes()
    names = [n for n in ("runc", "crun") if n in found]
    if is_hybrid(cgroup_version):
        names = [n for n in names if n != "crun"]  # crun refuses hybrid layouts: not run here, by design
    return names


@pytest.fixture(params=["runc", "crun"])
def runtime_name(request: pytest.FixtureRequest, cgroup_version: int) -> str:
    name = request.param
    if name not in installed_runtimes():
        pytest.fail(f"{name} missing: run integration/images/install-tools.sh (as root)")
    if name == "crun" and is_hybrid(cgroup_version):
        pytest.skip("crun refuses this kernel's hybrid cgroup layout (cgroup2 controllers next to v1)")
    return str(name)


class Pod:
    """One pod's worth of runtime: its cgroups (by the agent's driver), sandbox, bundles."""

    def __init__(self, root: Path, driver: CgroupDriver, runtime: OciRuntime, record: Any, lowerdirs: list[str]):
        self.root, self.driver, self.runtime, self.record, self.lowerdirs = root, driver, runtime, record, lowerdirs
        self.pod_cg = layout.pod_path("Burstable", UID)
        driver.create("kubepods", CgroupSpec())
        driver.create("kubepods/burstable", CgroupSpec())
        driver.create(self.pod_cg, CgroupSpec())
        driver.create(sandbox_cgroup(self.pod_cg), CgroupSpec())
        self.sandbox = Sandbox(str(root / "oci"), lambda: driver.procs_files(sandbox_cgroup(self.pod_cg)))
        self.etc = root / "etc"
        self.etc.mkdir(parents=True, exist_ok=True)
        (self.etc / "hosts").write_text(hosts_file("web"))
        self.workers: list[tuple[str, BundleDirs]] = []

    def worker(self, name: str, command: list[str], spec: CgroupSpec, mounts: tuple = ()) -> ContainerWorker:
        path = f"{self.pod_cg}/{name}"
        self.driver.create(path, spec)
        cid = container_id(UID, name)
        dirs = BundleDirs(str(self.root / "oci" / name))

        def make(passwd: str, group: str, pid: int | None):
            return container_bundle(command=command, args=[], env=[("GREETING", "hi")], working_dir=None,
                                    run_as_user=None, run_as_group=None, image=self.record.config, passwd=passwd,
                                    group=group, hostname="web", cgroups_path=cgroups_path(self.driver.root, path),
                                    resources=spec, oom_score_adj=500, sandbox_pid=pid,
                                    mounts=(bind(str(self.etc / "hosts"), "/etc/hosts", read_only=True), *mounts))

        log_dir = logs.container_dir(str(self.root / "logs"), name)
        logs.prepare_log_dir(log_dir)
        config = ContainerConfig(name=name, launch=LaunchSpec(("unused",)), log_dir=log_dir, restart_policy="Never",
                                 pod_name="web", pod_uid=UID)
        spawner = self.runtime.spawner(cid, dirs, self.lowerdirs, make, self.sandbox)
        self.workers.append((cid, dirs))
        return ContainerWorker(config, DriverCgroup(self.driver, path), spawner=spawner)

    def close(self) -> None:
        for cid, dirs in self.workers:
            self.runtime.cleanup(cid, dirs)
        self.sandbox.stop()
        self.driver.kill(self.pod_cg)
        self.driver.remove("kubepods")


@pytest.fixture
async def pod(tmp_path: Path, driver: CgroupDriver, runtime_name: str, make_env: Any, images: Any):
    _load_overlay_module()
    env = await make_env(tmp_path / "node")
    record = await env.manager.import_image(str(images.layout), "oci", tag="test/small:1", ref_name="small")
    runtime = OciRuntime(runtime_name, installed_runtimes()[runtime_name], str(tmp_path / runtime_name))
    p = Pod(tmp_path / "pod", driver, runtime, record, env.manager.lowerdirs(record))
    yield p
    await asyncio.to_thread(p.close)
    assert not rootfs.mounts_under(str(tmp_path)), "a mount was left behind"


def _kernel(driver: CgroupDriver, path: str, controller: str, name: str) -> str:
    base = driver.hierarchy(controller)
    assert base is not None
    return (Path(base) / driver.root.strip("/") / path / name).read_text().strip()


def _is_runc_stage(pid: int) -> bool:
    """runc's (and crun's) own setup processes, before the container's command is exec'd."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False  # gone meanwhile
    return comm.startswith(("runc", "crun"))


async def _until(cond: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_image_container_runs_in_its_cgroup_with_its_limits_and_stops(pod: Pod, driver: CgroupDriver):
    spec = CgroupSpec(cpu_shares=256, cpu_quota_us=50000, memory_max=48 << 20)
    w = pod.worker("app", ["sh", "-c", 'echo "$GREETING from $(cat /proc/sys/kernel/hostname)"; '
                                       'cat /proc/self/cgroup; cat /proc/self/oom_score_adj; exec sleep 300'], spec)
    task = asyncio.ensure_future(w.run())
    await _until(lambda: isinstance(w.status.state, Running) and len(driver.pids(f"{pod.pod_cg}/app")) > 0)
    await _until(lambda: "hi from web" in Path(w.log_path).read_text())
    log_text = Path(w.log_path).read_text()
    # the process sits in the runtime's child of the agent's container cgroup, which keeps the limits
    limit_file = "memory.max" if driver.version == 2 else "memory.limit_in_bytes"
    assert int(_kernel(driver, f"{pod.pod_cg}/app", "memory", limit_file)) == 48 << 20
    # the command alone: an exiting runc init stage (still in the host's namespaces) may linger a moment
    await _until(lambda: (ps := driver.pids(f"{pod.pod_cg}/app/oci")) and not any(_is_runc_stage(p) for p in ps))
    pids = driver.pids(f"{pod.pod_cg}/app/oci")
    assert pids, log_text
    inner = pids[0]
    assert Path(f"/proc/{inner}/oom_score_adj").read_text().strip() == "500"
    # IPC and UTS come from the sandbox; PID and mount namespaces are the container's own
    sp = pod.sandbox.pid
    assert sp is not None
    for ns in ("ipc", "uts"):
        assert os.readlink(f"/proc/{inner}/ns/{ns}") == os.readlink(f"/proc/{sp}/ns/{ns}")
        assert os.readlink(f"/proc/{inner}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
    for ns in ("pid", "mnt"):
        assert os.readlink(f"/proc/{inner}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
    # the runc monitor is in the sandbox cgroup, not in the container's limits
    assert w.pid in driver.pids(sandbox_cgroup(pod.pod_cg))
    # exec runs inside the container: its hostname, its rootfs, the bind-mounted /etc/hosts
    code, out = await pod.runtime.exec(container_id(UID, "app"), ["sh", "-c", "hostname; cat /etc/hosts | tail -1; ls /bin/busybox"])
    assert code == 0, out
    assert out.decode().split("\n")[:3] == ["web", "127.0.1.1\tweb", "/bin/busybox"]
    # a file written in the container lands in its writable layer on nodefs, not in the image
    code, _ = await pod.runtime.exec(container_id(UID, "app"), ["sh", "-c", "echo x > /written"])
    assert code == 0 and (Path(pod.root) / "oci/app/upper/written").read_text() == "x\n"
    assert not any(Path(d, "written").exists() for d in pod.lowerdirs)
    status = await w.stop(2.0)
    assert isinstance(status.state, Terminated) and status.state.exit_code == 137  # sleep as PID 1 ignores TERM
    await task
    assert not driver.pids(f"{pod.pod_cg}/app")
    # the monitor died by SIGKILL with the container: its state is left for cleanup to delete
    cid, dirs = pod.workers[0]
    await asyncio.to_thread(pod.runtime.cleanup, cid, dirs)
    assert not pod.runtime.has_state(cid)
    assert not rootfs.is_mountpoint(dirs.rootfs)


async def test_a_container_ending_by_itself_leaves_no_runtime_state(pod: Pod, driver: CgroupDriver):
    w = pod.worker("job", ["sh", "-c", "echo done; exit 3"], CgroupSpec(memory_max=32 << 20))
    state = await asyncio.wait_for(w.run(), 30)
    assert isinstance(state, Terminated) and state.exit_code == 3 and state.reason == "Error"
    assert Path(w.log_path).read_text() == "done\n"
    assert driver.exists(f"{pod.pod_cg}/job") and not driver.pids(f"{pod.pod_cg}/job")
    cid, dirs = pod.workers[0]
    await asyncio.to_thread(pod.runtime.cleanup, cid, dirs)
    assert not pod.runtime.has_state(cid)
    assert not driver.exists(f"{pod.pod_cg}/job/oci")


async def test_image_container_oom_killed_inside_its_limit(pod: Pod, driver: CgroupDriver):
    spec = CgroupSpec(memory_max=24 << 20)
    w = pod.worker("hog", ["sh", "-c", "x=0123456789; while :; do x=$x$x; done"], spec)
    state = await asyncio.wait_for(w.run(), 60)
    assert isinstance(state, Terminated), state
    assert state.reason == REASON_OOM, (state, Path(w.log_path).read_text())
    assert driver.oom_kill_count(f"{pod.pod_cg}/hog") >= 1


async def test_sandbox_survives_a_restart_of_its_owner(pod: Pod):
    pid = pod.sandbox.ensure()
    again = Sandbox(pod.sandbox.state_dir, pod.sandbox.procs_files)  # what a restarted agent makes
    assert again.ensure() == pid
    assert subprocess.run(["nsenter", "-t", str(pid), "-u", "hostname"], capture_output=True, text=True).returncode == 0


async def test_a_sandbox_that_dies_before_it_is_ready_is_replaced(pod: Pod):
    """start() spawns it and returns at once (the bundle is made meanwhile); ensure() waits for
    its namespaces and records it, or spawns a new one when it died in between."""
    first = pod.sandbox.start()
    os.kill(first, signal.SIGKILL)
    os.waitpid(first, 0)
    second = pod.sandbox.ensure()
    assert second != first
    for ns in ("ipc", "uts"):
        assert os.readlink(f"/proc/{second}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
    assert json.loads(Path(pod.sandbox.record_path).read_text())["pid"] == second
    assert pod.sandbox.ensure() == second  # ready: no new process
