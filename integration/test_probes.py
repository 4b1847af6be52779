"""Probe and hook executors against the real kernel and real listeners, as root.

exec: the command really runs inside a cgroup this test creates (read back from
/proc/self/cgroup and the cgroup's own cgroup.procs), with the container's env and
oom_score_adj; a timeout or a cancellation kills it and leaves the cgroup empty. httpGet: a real
aiohttp server on loopback (status codes, the redirect rule, headers, timeout, refusal). tcp: a
listening and a closed port. grpc: grpcio's reference grpc.health.v1 server (a test-only
dependency) and listeners that are not gRPC. Runs on whichever cgroup version the kernel drives
(v1 on the host, v2 in the UML guest); network tests use loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from typing import Any

import pytest
from agent_harness import ensure_loopback_up, free_port
from aiohttp import web

from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.agent.lifecycle.hooks import HookRunner, HookTarget
from nodeagent.agent.probes.exec_probe import ExecTarget, exec_probe, run_in_container
from nodeagent.agent.probes.grpc_probe import grpc_probe
from nodeagent.agent.probes.http_probe import HttpProber, probe_url, request_headers
from nodeagent.agent.probes.results import Verdict
from nodeagent.agent.probes.tcp_probe import dial_literal, tcp_probe
from nodeagent.agent.runtime.cgroup_handle import DriverCgroup
from nodeagent.core.clock import SystemClock
from nodeagent.core.model import parse_pod

CONTAINER = "kubepods/burstable/podprobe/app"


@pytest.fixture(autouse=True)
def _loopback() -> None:
    ensure_loopback_up()


@pytest.fixture
def container(driver: CgroupDriver) -> Iterator[DriverCgroup]:
    driver.create(CONTAINER, CgroupSpec(memory_max=256 * 1024 * 1024))
    yield DriverCgroup(driver, CONTAINER)
    driver.kill(CONTAINER)


def target_in(cg: DriverCgroup, **env: str) -> ExecTarget:
    return ExecTarget(cgroup=cg, env={"PATH": "/usr/bin:/bin", **env}, working_dir="/tmp", oom_score_adj=873)


async def wait_until(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


# ---- exec ----

async def test_exec_probe_runs_inside_the_container_cgroup(driver: CgroupDriver, container: DriverCgroup) -> None:
    script = 'cat /proc/self/cgroup; echo "who=$WHO"; cat /proc/self/oom_score_adj; pwd'
    outcome = await exec_probe(["/bin/sh", "-c", script], target_in(container, WHO="probe"), 5.0)
    assert outcome.verdict is Verdict.SUCCESS, outcome
    lines = outcome.output.splitlines()
    expected = driver.root.strip("/") + "/" + CONTAINER
    where = {line.split(":", 2)[1]: line.split(":", 2)[2].strip("/") for line in lines if line.count(":") >= 2}
    assert where["memory" if driver.version == 1 else ""] == expected, where
    assert "who=probe" in lines and "873" in lines and "/tmp" in lines


async def test_exec_probe_process_is_in_the_cgroup_while_it_runs(driver: CgroupDriver, container: DriverCgroup) -> None:
    task = asyncio.ensure_future(exec_probe(["/bin/sh", "-c", "sleep 1; exit 4"], target_in(container), 5.0))
    assert await wait_until(lambda: len(driver.pids(CONTAINER)) >= 1)
    outcome = await task
    assert outcome.verdict is Verdict.FAILURE and outcome.output == ""
    assert driver.pids(CONTAINER) == []


async def test_exec_failure_output_and_exit(container: DriverCgroup) -> None:
    outcome = await exec_probe(["/bin/sh", "-c", "echo not ready >&2; exit 1"], target_in(container), 5.0)
    assert (outcome.verdict, outcome.output) == (Verdict.FAILURE, "not ready\n")
    res = await run_in_container(["/bin/sh", "-c", "head -c 20000 /dev/zero | tr '\\0' x"], target_in(container), 5.0)
    assert res.exit_code == 0 and len(res.output) == 10 * 1024  # the kubelet's 10 KiB


async def test_exec_timeout_kills_the_process_group(driver: CgroupDriver, container: DriverCgroup) -> None:
    started = time.monotonic()
    outcome = await exec_probe(["/bin/sh", "-c", "sleep 30 & sleep 30"], target_in(container), 0.5)
    assert time.monotonic() - started < 5
    assert outcome.verdict is Verdict.FAILURE
    assert outcome.output == 'command "/bin/sh -c sleep 30 & sleep 30" timed out'
    assert await wait_until(lambda: driver.pids(CONTAINER) == [])


async def test_cancelling_an_exec_probe_kills_it(driver: CgroupDriver, container: DriverCgroup) -> None:
    task = asyncio.ensure_future(exec_probe(["/bin/sleep", "30"], target_in(container), 60.0))
    assert await wait_until(lambda: len(driver.pids(CONTAINER)) == 1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await wait_until(lambda: driver.pids(CONTAINER) == [])


async def test_exec_into_a_cgroup_that_is_gone_could_not_run(driver: CgroupDriver) -> None:
    driver.create("kubepods/gone", CgroupSpec())
    cg = DriverCgroup(driver, "kubepods/gone")
    driver.remove("kubepods/gone")
    outcome = await exec_probe(["/bin/true"], target_in(cg), 5.0)
    assert outcome.verdict is Verdict.UNKNOWN and "nodeagent-shim: cannot join cgroup" in outcome.output


async def test_exec_probes_do_not_block_the_loop(container: DriverCgroup) -> None:
    """Ten 1 s probes at once finish together (10 s if run one after another), and a 10 ms ticker
    keeps ticking meanwhile."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.ensure_future(ticker())
    started = time.monotonic()
    outcomes = await asyncio.gather(*(exec_probe(["/bin/sleep", "1"], target_in(container), 8.0) for _ in range(10)))
    elapsed = time.monotonic() - started
    t.cancel()
    assert all(o.verdict is Verdict.SUCCESS for o in outcomes)
    assert elapsed < 5.0 and ticks >= 50


async def test_exec_hook_in_the_container(container: DriverCgroup, tmp_path: Any) -> None:
    marker = tmp_path / "started"
    pod = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "h", "uid": "u"}, "spec": {"containers": [
        {"name": "app", "command": ["x"], "lifecycle": {
            "postStart": {"exec": {"command": ["/bin/sh", "-c", f"cat /proc/self/cgroup > {marker}"]}}}}]}})
    res = await HookRunner(HttpProber(), clock=SystemClock()).post_start(
        HookTarget(pod, pod.spec.containers[0], target_in(container)))
    assert res.ok
    assert CONTAINER in marker.read_text()


# ---- httpGet ----

@pytest.fixture
async def http_server() -> AsyncIterator[tuple[int, list[web.Request]]]:
    seen: list[web.Request] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        code = int(request.query.get("code", "200"))
        if "sleep" in request.query:
            await asyncio.sleep(float(request.query["sleep"]))
        if "to" in request.query:
            raise web.HTTPFound(request.query["to"])
        if "loop" in request.query:
            raise web.HTTPFound(request.path_qs)
        return web.Response(status=code, text=f"body of {request.path}")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    second = web.TCPSite(runner, "127.0.0.2", port)
    await second.start()
    yield port, seen
    await runner.cleanup()


async def test_http_probe_status_codes_headers_and_timeout(http_server: tuple[int, list[web.Request]]) -> None:
    port, seen = http_server
    http = HttpProber()
    headers, host = request_headers([("X-Probe", "1"), ("host", "svc.local")])
    ok = await http.probe(probe_url("HTTP", "127.0.0.1", port, "/healthz"), headers, host, 2.0)
    assert (ok.verdict, ok.output) == (Verdict.SUCCESS, "body of /healthz")
    req = seen[-1]
    assert req.headers["User-Agent"] == "kube-probe/0.1" and req.headers["Accept"] == "*/*"
    assert req.headers["X-Probe"] == "1" and req.headers["Host"] == "svc.local"
    bad = await http.probe(probe_url("HTTP", "127.0.0.1", port, "/x?code=503"), {}, None, 2.0)
    assert (bad.verdict, bad.output) == (Verdict.FAILURE, "HTTP probe failed with statuscode: 503")
    slow = await http.probe(probe_url("HTTP", "127.0.0.1", port, "/x?sleep=3"), {}, None, 0.3)
    assert slow.verdict is Verdict.FAILURE and "context deadline exceeded" in slow.output
    closed = free_port()
    refused = await http.probe(probe_url("HTTP", "127.0.0.1", closed, "/"), {}, None, 1.0)
    assert refused.output == f'Get "http://127.0.0.1:{closed}/": dial tcp 127.0.0.1:{closed}: connect: connection refused'
    await http.close()


async def test_http_probe_redirects(http_server: tuple[int, list[web.Request]]) -> None:
    port, seen = http_server
    http = HttpProber()
    same = await http.probe(probe_url("HTTP", "127.0.0.1", port, f"/a?to=http://127.0.0.1:{port}/b"), {}, None, 2.0)
    assert (same.verdict, same.output) == (Verdict.SUCCESS, "body of /b")  # same host: followed
    failing = await http.probe(probe_url("HTTP", "127.0.0.1", port, "/a?to=/b%3Fcode%3D500"), {}, None, 2.0)
    assert failing.output == "HTTP probe failed with statuscode: 500"
    before = len(seen)
    other = await http.probe(probe_url("HTTP", "127.0.0.1", port, f"/a?to=http://127.0.0.2:{port}/c"), {}, None, 2.0)
    assert other.verdict is Verdict.WARNING and other.output.startswith("Probe terminated redirects, Response body: ")
    assert len(seen) == before + 1  # the other host was never asked
    before = len(seen)
    loop_ = await http.probe(probe_url("HTTP", "127.0.0.1", port, "/a?loop=1"), {}, None, 2.0)
    assert loop_.verdict is Verdict.FAILURE and "stopped after 10 redirects" in loop_.output
    assert len(seen) == before + 11  # the request and 10 redirects
    await http.close()


async def test_https_probe_does_not_verify_the_certificate(tmp_path: Any) -> None:
    """scheme HTTPS against a self-signed server (InsecureSkipVerify, as the kubelet)."""
    import ssl
    import subprocess

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=probe-test",
                    "-days", "1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))

    async def handle(request: web.Request) -> web.Response:
        return web.Response(text=f"tls {request.secure}")

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
    http = HttpProber()
    try:
        ok = await http.probe(probe_url("HTTPS", "127.0.0.1", port, "/"), {}, None, 2.0)
        assert (ok.verdict, ok.output) == (Verdict.SUCCESS, "tls True")
        plain = await http.probe(probe_url("HTTP", "127.0.0.1", port, "/"), {}, None, 2.0)
        assert plain.verdict is Verdict.FAILURE  # plain HTTP to a TLS port
    finally:
        await runner.cleanup()


# ---- tcpSocket ----

async def test_tcp_probe_open_and_closed_ports() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert (await tcp_probe("127.0.0.1", port, 1.0)).verdict is Verdict.SUCCESS
    closed = free_port()
    refused = await tcp_probe("127.0.0.1", closed, 1.0)
    assert (refused.verdict, refused.output) == (Verdict.FAILURE, f"dial tcp 127.0.0.1:{closed}: connect: connection refused")


async def test_tcp_probe_whose_handshake_is_in_flight() -> None:
    """On loopback connect(2) answers at once; a SYN the listener drops (its accept queue is full)
    leaves the connect in flight: it is then looked at on the grid until it times out, or until
    the kernel's retry (1 s later) gets in once the queue has room."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [dial_literal("127.0.0.1", port)[0] for _ in range(2)]  # the second one waits in SYN_SENT
        try:
            t0 = time.monotonic()
            late = await tcp_probe("127.0.0.1", port, 0.3)
            assert (late.verdict, late.output) == (Verdict.FAILURE, f"dial tcp 127.0.0.1:{port}: i/o timeout")
            assert 0.3 <= time.monotonic() - t0 < 1.0

            async def make_room() -> None:  # before the probe's SYN is sent again
                await asyncio.sleep(0.2)
                for f in fillers:  # the one in SYN_SENT would otherwise take the room at its own retry
                    f.close()
                listener.setblocking(False)
                for _ in fillers:
                    with contextlib.suppress(BlockingIOError):
                        listener.accept()[0].close()

            retried, _ = await asyncio.gather(tcp_probe("127.0.0.1", port, 3.0), make_room())
            assert retried.verdict is Verdict.SUCCESS
        finally:
            for f in fillers:
                f.close()


# ---- grpc ----

@pytest.fixture
def grpc_server() -> Iterator[tuple[int, Any]]:
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    servicer.set("sick", health_pb2.HealthCheckResponse.NOT_SERVING)
    yield port, servicer
    server.stop(0)


async def test_grpc_probe_against_the_reference_health_server(grpc_server: tuple[int, Any]) -> None:
    port, _ = grpc_server
    assert (await grpc_probe("127.0.0.1", port, None, 2.0)).output == "service healthy"
    sick = await grpc_probe("127.0.0.1", port, "sick", 2.0)
    assert (sick.verdict, sick.output) == (Verdict.FAILURE, 'service unhealthy (responded with "NOT_SERVING")')
    unknown = await grpc_probe("127.0.0.1", port, "nobody", 2.0)
    assert unknown.verdict is Verdict.FAILURE
    assert unknown.output.startswith("error: health rpc probe failed: rpc error: code = NotFound desc = ")


async def test_grpc_probe_against_a_server_without_the_health_service() -> None:
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        out = await grpc_probe("127.0.0.1", port, None, 2.0)
    finally:
        server.stop(0)
    assert out.verdict is Verdict.FAILURE
    assert out.output.startswith("error: this server does not implement the grpc health protocol (grpc.health.v1.Health)")


async def test_grpc_probe_against_listeners_that_are_not_grpc(http_server: tuple[int, list[web.Request]]) -> None:
    port, _ = http_server
    http1 = await grpc_probe("127.0.0.1", port, None, 1.0)  # an HTTP/1.1 server answers the preface with an error
    assert http1.verdict is Verdict.FAILURE and http1.output.startswith("error: health rpc probe failed")
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        out = await grpc_probe("127.0.0.1", silent.getsockname()[1], None, 0.3)
    assert out.output == "timeout: health rpc did not complete within 300ms"
    closed = free_port()
    refused = await grpc_probe("127.0.0.1", closed, None, 1.0)
    assert refused.output == f'error: failed to connect service at "127.0.0.1:{closed}": Connection refused'


def test_no_grpcio_in_the_agent() -> None:
    """grpcio is a test dependency: the agent's modules never import it."""
    import subprocess
    import sys

    code = ("import sys, nodeagent.agent.probes.pod_probes, nodeagent.agent.lifecycle.hooks; "
            "print('grpc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ})
    assert out.stdout.strip() == "False"
