"""Node object, conditions and their transition times, node addresses, node info."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

import nodeagent
from nodeagent.agent.node.addresses import (
    AddrInfo,
    node_addresses_async,
    read_in_child,
    read_interface_addresses,
    to_node_addresses,
)
from nodeagent.agent.node.status import (
    ConditionTracker,
    NodeStatusInput,
    build_node,
    go_arch,
    parse_os_release,
    read_node_info,
)
from nodeagent.core.clock import FakeClock
from nodeagent.core.errors import FieldError
from nodeagent.core.quantity import Quantity, parse_quantity

HOST = {"type": "Hostname", "address": "node-a"}


def ip(a: str) -> dict[str, str]:
    return {"type": "InternalIP", "address": a}


@pytest.mark.parametrize("addrs,expected", [
    ([AddrInfo("127.0.0.1", 254), AddrInfo("192.0.2.2", 0)], [ip("192.0.2.2"), HOST]),
    # IPv6 global after IPv4; link-local, host scope and duplicates dropped
    ([AddrInfo("fd00::2", 0), AddrInfo("fe80::1", 253), AddrInfo("10.0.0.5", 0),
      AddrInfo("10.0.0.5", 0), AddrInfo("::1", 254)], [ip("10.0.0.5"), ip("fd00::2"), HOST]),
    # nothing usable -> loopback, so the node still has an address
    ([AddrInfo("127.0.0.1", 254), AddrInfo("fe80::1", 253)], [ip("127.0.0.1"), HOST]),
    ([], [ip("127.0.0.1"), HOST]),
    # tentative / deprecated / dadfailed IPv6 addresses are not advertised
    ([AddrInfo("2001:db8::1", 0, 0x40), AddrInfo("2001:db8::2", 0, 0x20),
      AddrInfo("2001:db8::3", 0, 0x08), AddrInfo("2001:db8::4", 0, 0x80)],
     [ip("2001:db8::4"), HOST]),
    # garbage, link-local v4, multicast and unspecified are ignored; IPv6 normalized
    ([AddrInfo("not-an-ip", 0), AddrInfo("169.254.1.1", 0), AddrInfo("224.0.0.1", 0),
      AddrInfo("0.0.0.0", 0), AddrInfo("2001:DB8:0:0::7", 0)], [ip("2001:db8::7"), HOST]),
])
def test_to_node_addresses(addrs: list[AddrInfo], expected: list[dict[str, str]]) -> None:
    assert to_node_addresses(addrs, "node-a") == expected


async def test_addresses_read_in_a_child_match_the_in_process_read() -> None:
    """The daemon reads them in a child (pyroute2 stays out of the agent's memory): same answer."""
    here = await asyncio.to_thread(read_interface_addresses)  # pyroute2 refuses a running loop's thread
    assert sorted(await read_in_child()) == sorted(here)
    assert await node_addresses_async("node-a") == to_node_addresses(here, "node-a")


async def test_node_addresses_on_this_machine() -> None:
    addrs = await node_addresses_async()
    assert addrs[-1] == {"type": "Hostname", "address": socket.gethostname()}
    internal = [a["address"] for a in addrs if a["type"] == "InternalIP"]
    assert internal, addrs
    for a in internal:
        ipaddress.ip_address(a)  # valid IP literal
    assert len(set(internal)) == len(internal)


def test_condition_transition_time_moves_only_on_change() -> None:
    clock = FakeClock(start=0.0, wall_offset=1_700_000_000.0)  # 2023-11-14T22:13:20Z
    t = ConditionTracker(clock)
    c1 = t.condition("MemoryPressure", False)
    assert c1 == {"type": "MemoryPressure", "status": "False",
                  "reason": "KubeletHasSufficientMemory",
                  "message": "kubelet has sufficient memory available",
                  "lastHeartbeatTime": "2023-11-14T22:13:20Z",
                  "lastTransitionTime": "2023-11-14T22:13:20Z"}
    clock.advance(10)
    c2 = t.condition("MemoryPressure", False)
    assert c2["lastHeartbeatTime"] == "2023-11-14T22:13:30Z"
    assert c2["lastTransitionTime"] == "2023-11-14T22:13:20Z"
    clock.advance(10)
    c3 = t.condition("MemoryPressure", True)
    assert (c3["status"], c3["reason"]) == ("True", "KubeletHasInsufficientMemory")
    assert c3["lastTransitionTime"] == "2023-11-14T22:13:40Z"
    clock.advance(5)
    assert t.condition("MemoryPressure", True)["lastTransitionTime"] == "2023-11-14T22:13:40Z"
    # one condition's change does not touch another's transition time
    assert t.condition("DiskPressure", False)["lastTransitionTime"] == "2023-11-14T22:13:45Z"
    clock.advance(5)
    assert t.condition("MemoryPressure", False)["lastTransitionTime"] == "2023-11-14T22:13:50Z"


@pytest.mark.parametrize("kwargs,expected", [
    (dict(ready=True, memory_pressure=False, disk_pressure=False, pid_pressure=False),
     [("MemoryPressure", "False", "KubeletHasSufficientMemory"),
      ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
      ("PIDPressure", "False", "KubeletHasSufficientPID"),
      ("Ready", "True", "KubeletReady")]),
    (dict(ready=False, memory_pressure=True, disk_pressure=True, pid_pressure=True),
     [("MemoryPressure", "True", "KubeletHasInsufficientMemory"),
      ("DiskPressure", "True", "KubeletHasDiskPressure"),
      ("PIDPressure", "True", "KubeletHasInsufficientPID"),
      ("Ready", "False", "KubeletNotReady")]),
])
def test_conditions_table(kwargs: dict[str, bool], expected: list[tuple[str, str, str]]) -> None:
    conds = ConditionTracker(FakeClock()).conditions(**kwargs)
    assert [(c["type"], c["status"], c["reason"]) for c in conds] == expected
    assert all(c["message"] for c in conds)


def test_not_ready_message_and_unknown_condition() -> None:
    t = ConditionTracker(FakeClock())
    conds = t.conditions(ready=False, memory_pressure=False, disk_pressure=False,
                         pid_pressure=False, not_ready_message="cgroup driver failed")
    assert conds[-1]["message"] == "cgroup driver failed"
    with pytest.raises(FieldError):
        t.condition("NetworkUnavailable", False)


def q(text: str) -> Quantity:
    return parse_quantity(text)


CAP = {"cpu": q("2"), "memory": q("4096Mi"), "ephemeral-storage": q("20Gi"),
       "pods": Quantity.from_value(110)}
ALLOC = {"cpu": q("1900m"), "memory": q("3596Mi"), "ephemeral-storage": q("18Gi"), "pods": 110}
INFO = {"kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
        "operatingSystem": "linux", "architecture": "amd64", "cgroupVersion": "v2",
        "cgroupDriver": "cgroupfs", "agentVersion": "0.1.0"}


def inp(**over: object) -> NodeStatusInput:
    base: dict[str, object] = dict(
        name="node-a", capacity=CAP, allocatable=ALLOC,
        usage={"cpu": q("250m"), "memory": q("1073741824")},
        addresses=[ip("192.0.2.2"), HOST], node_info=INFO)
    base.update(over)
    return NodeStatusInput(**base)  # type: ignore[arg-type]


def test_build_node_shape_and_canonical_quantities() -> None:
    node = build_node(inp(memory_pressure=True), ConditionTracker(FakeClock()))
    assert node["apiVersion"] == "v1" and node["kind"] == "Node"
    assert node["metadata"]["name"] == "node-a"
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "node-a",
                                          "kubernetes.io/os": "linux",
                                          "kubernetes.io/arch": "amd64"}
    st = node["status"]
    assert st["capacity"] == {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "20Gi",
                              "pods": "110"}
    assert st["allocatable"] == {"cpu": "1900m", "memory": "3596Mi",
                                 "ephemeral-storage": "18Gi", "pods": "110"}
    assert st["usage"] == {"cpu": "250m", "memory": "1073741824"}
    assert st["addresses"] == [ip("192.0.2.2"), HOST]
    assert st["nodeInfo"] == INFO
    mp = next(c for c in st["conditions"] if c["type"] == "MemoryPressure")
    assert mp["status"] == "True"


@pytest.mark.parametrize("over,path", [
    (dict(capacity={k: v for k, v in CAP.items() if k != "pods"}), "status.capacity.pods"),
    (dict(allocatable={k: v for k, v in ALLOC.items() if k != "memory"}),
     "status.allocatable.memory"),
    (dict(name=""), "metadata.name"),
])
def test_build_node_missing_inputs_name_the_field(over: dict[str, object], path: str) -> None:
    with pytest.raises(FieldError) as e:
        build_node(inp(**over), ConditionTracker(FakeClock()))
    assert e.value.path == path


@pytest.mark.parametrize("text,expected", [
    ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n',
     "Debian GNU/Linux 12 (bookworm)"),
    ("# comment\nNAME='Alpine Linux'\n", "Alpine Linux"),
    ('PRETTY_NAME="say \\"hi\\""\n', 'say "hi"'),
    ("", "Linux"),
])
def test_parse_os_release(text: str, expected: str) -> None:
    assert parse_os_release(text) == expected


def test_go_arch() -> None:
    assert (go_arch("x86_64"), go_arch("aarch64"), go_arch("mips")) == ("amd64", "arm64", "mips")


def test_read_node_info_on_this_machine() -> None:
    info = read_node_info("v1", "cgroupfs")
    assert info["operatingSystem"] == "linux"
    assert info["agentVersion"] == nodeagent.__version__
    assert info["kernelVersion"] and info["osImage"] != ""
    assert (info["cgroupVersion"], info["cgroupDriver"]) == ("v1", "cgroupfs")
    assert info["architecture"] not in ("x86_64", "aarch64")
