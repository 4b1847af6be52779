"""`nodeagent check-config`, run as a real subprocess and in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.agent.config.settings import load_config
from nodeagent.agent.node.capacity import Capacity
from nodeagent.cli.main import check_config_report, main

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "config" / "nodeagent.yaml"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", "check-config", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )


def test_example_config_checks_out() -> None:
    proc = run("--config", str(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) >= {"config", "thresholds", "capacity", "allocatable", "enforcedAllocatable"}
    assert report["config"]["port"] == 10250
    assert report["config"]["evictionSoftGracePeriod"] == {"memory.available": "30s"}
    assert set(report["allocatable"]) == {"cpu", "memory", "ephemeral-storage", "pods"}
    # allocatable cpu = capacity - kubeReserved 100m - systemReserved 100m
    cpu_capacity = int(report["capacity"]["cpu"]) * 1000
    assert report["allocatable"]["cpu"] == f"{cpu_capacity - 200}m"
    soft = [t for t in report["thresholds"] if not t["hard"]]
    assert soft == [
        {
            "signal": "memory.available",
            "operator": "LessThan",
            "value": {"quantity": "256Mi"},
            "absolute": 256 * 2**20,
            "gracePeriod": "30s",
            "minReclaim": {"quantity": "64Mi"},
            "hard": False,
        }
    ]
    nodefs = next(t for t in report["thresholds"] if t["signal"] == "nodefs.available")
    assert nodefs["value"] == {"percentage": "10%"} and nodefs["gracePeriod"] == "0s"


def test_defaults_without_config_flag() -> None:
    proc = run()
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["config"]["apiVersion"] == "nodeagent.io/v1alpha1"
    assert report["config"]["evictionHard"]["imagefs.inodesFree"] == "5%"


def test_bad_file_exits_1_with_one_line_per_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("evictionHrad:\n  memory.available: 1Gi\nevictionSoft:\n  memory.available: 1Gi\nport: 0\n")
    proc = run("--config", str(bad))
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"{bad}: ") for line in lines)
    assert any("evictionHrad: unknown field" in line for line in lines)
    assert any("evictionSoftGracePeriod.memory.available:" in line for line in lines)


def test_yaml_syntax_error_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("port: 10250\nevictionHard: {memory.available: 1Gi\n")
    proc = run("--config", str(bad))
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"{bad}: line ") and "invalid YAML" in line


def test_missing_file_exits_1(tmp_path: Path) -> None:
    proc = run("--config", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 1 and "cannot read config" in proc.stderr


def test_over_reservation_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "greedy.yaml"
    cfg.write_text("systemReserved:\n  memory: 64Ei\n")
    assert main(["check-config", "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert f"{cfg}: allocatable.memory: " in err and "exceed capacity" in err


def test_no_subcommand_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "check-config" in capsys.readouterr().err


def test_report_is_pure_over_a_fixed_capacity() -> None:
    config = load_config(EXAMPLE)
    capacity = Capacity(milli_cpu=4000, memory=8 * 2**30, ephemeral_storage=100 * 2**30, pods=110, inodes=10**6, pid_max=4096)
    report = check_config_report(config, capacity)
    assert report["capacity"] == {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi", "pods": "110"}
    # memory: 8Gi - 128Mi - 256Mi - 100Mi hard threshold
    assert report["allocatable"]["memory"] == "7708Mi"
    assert report["allocatable"]["cpu"] == "3800m"
    # the pods cgroup: no eviction threshold subtracted; pid is included
    assert report["enforcedAllocatable"] == {
        "cpu": "3800m", "memory": "7808Mi", "ephemeral-storage": "99Gi", "pods": "110", "pid": "4096",
    }
    inodes = next(t for t in report["thresholds"] if t["signal"] == "nodefs.inodesFree")
    assert inodes["absolute"] == 50000
    alloc = next(t for t in report["thresholds"] if t["signal"] == "allocatableMemory.available")
    assert alloc["hard"] and alloc["value"] == {"quantity": "100Mi"}
    assert report["warnings"] == []
