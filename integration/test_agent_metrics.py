"""The running agent's resource metrics: the daemon's sampler behind its own API, on a real kernel.

Host (cgroup v1):      .venv/bin/pytest integration/test_agent_metrics.py -q
UML guest (pure v2):   integration/run-in-uml.sh .venv/bin/pytest integration/test_agent_metrics.py -q

A real pod burns CPU under a 500m quota; two scrapes of /metrics/resource a few seconds apart give
its rate (counters and their millisecond timestamps, as the control plane's scraper computes it),
which must be within 10% of the rate the test reads from the pod's cgroup files itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_harness import AgentProcess, pod_manifest, poll_until
from prometheus_client.parser import text_string_to_metric_families

BUSY = "while :; do :; done"
MEASURE_S = 3.0


@pytest.fixture
def agent(tmp_path: Path, cgroup_version: int) -> Iterator[AgentProcess]:
    a = AgentProcess(tmp_path, cgroup_version, extra_config={"statsInterval": "1s", "statsCPURateWindow": "1s"})
    a.start()
    try:
        yield a
    finally:
        a.cleanup()


def series(text: str, name: str, **labels: str) -> tuple[float, float]:
    """(value, timestamp) of the one sample of `name` whose labels include `labels`; the parser
    turns the text's milliseconds into seconds."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                assert s.timestamp is not None, s
                return s.value, float(s.timestamp)
    raise AssertionError(f"no {name}{labels} in:\n{text}")


def scrape(agent: AgentProcess) -> str:
    status, body = agent.request("GET", "/metrics/resource")
    assert status == 200, (status, body)
    assert isinstance(body, str)
    return body


def test_running_agent_serves_a_burning_pods_cpu(agent: AgentProcess) -> None:
    uid = str(uuid.uuid4())
    agent.create_ok(pod_manifest("burn", BUSY, uid=uid, limits={"cpu": "500m", "memory": "32Mi"}))
    agent.wait_running("burn")
    pod_path, labels = f"kubepods/pod{uid}", {"namespace": "default", "pod": "burn"}
    # the routes sit behind the API's authentication like the rest of it (a wrong token is refused)
    good, agent.token = agent.token, "wrong"
    try:
        assert agent.request("GET", "/metrics/resource")[0] == 401
    finally:
        agent.token = good
    def with_pod() -> str | None:
        text = scrape(agent)
        return text if 'container="main"' in text else None

    first_text = poll_until(with_pod, 15, "the pod's series on /metrics/resource")
    first = series(first_text, "container_cpu_usage_seconds_total", container="main", **labels)
    pod_first = series(first_text, "pod_cpu_usage_seconds_total", **labels)
    k0, t0 = agent.cg.cpu_usage_usec(pod_path), time.monotonic()
    time.sleep(MEASURE_S)  # the measurement window, not a wait for something to happen

    def newer() -> str | None:
        text = scrape(agent)
        return text if series(text, "container_cpu_usage_seconds_total", container="main", **labels)[1] > first[1] \
            else None

    text = poll_until(newer, 10, "a newer sample")
    k1, t1 = agent.cg.cpu_usage_usec(pod_path), time.monotonic()
    second = series(text, "container_cpu_usage_seconds_total", container="main", **labels)
    pod_second = series(text, "pod_cpu_usage_seconds_total", **labels)
    scraped = (second[0] - first[0]) / (second[1] - first[1])  # cores
    pod_scraped = (pod_second[0] - pod_first[0]) / (pod_second[1] - pod_first[1])
    kernel = (k1 - k0) / 1e6 / (t1 - t0)
    print(f"v{agent.cg.version} agent /metrics/resource: container {scraped * 1e3:.1f}m, pod {pod_scraped * 1e3:.1f}m; "
          f"cgroup files {kernel * 1e3:.1f}m")
    assert kernel > 0.1, f"the burner got {kernel:.3f} CPU: the machine is too loaded to measure"
    assert abs(scraped - kernel) <= 0.10 * kernel, (scraped, kernel)
    assert abs(pod_scraped - kernel) <= 0.10 * kernel, (pod_scraped, kernel)
    # the counter itself is the cgroup's: never ahead of a later read of the kernel's file
    assert second[0] * 1e6 <= agent.cg.cpu_usage_usec(pod_path) + 1
    memory, _ = series(text, "container_memory_working_set_bytes", container="main", **labels)
    assert 0 < memory <= 32 << 20
    assert series(text, "node_cpu_usage_seconds_total")[0] > 0
    status, summary = agent.request("GET", "/stats/summary?only_cpu_and_memory=true")
    assert status == 200, (status, summary)
    (pod,) = [p for p in summary["pods"] if p["podRef"]["name"] == "burn"]
    assert pod["podRef"]["uid"] == uid
    assert pod["cpu"]["usageNanoCores"] > 0
