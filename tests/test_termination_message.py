"""Termination messages: the message file on the host (tail, staleness, what root refuses to
read for a container) and FallbackToLogsOnError's log tail, as the kubelet words them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nodeagent.agent.lifecycle.termination_message import (
    LOG_BYTES,
    MAX_MESSAGE_BYTES,
    message_path,
    read_message_file,
    termination_message,
)
from nodeagent.agent.runtime.state import Terminated
from nodeagent.core.model import parse_pod


def container(**kw: Any) -> Any:
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                      "spec": {"containers": [{"name": "c", "command": ["x"], **kw}]}}).spec.containers[0]


def exited(code: int, started: float, reason: str = "", message: str = "") -> Terminated:
    return Terminated(code, reason or ("Completed" if code == 0 else "Error"), started, started + 1, None, message)


def test_reads_the_message_file(tmp_path: Path) -> None:
    f = tmp_path / "msg"
    f.write_text("all good\n")
    c = container(terminationMessagePath=str(f))
    assert termination_message(c, exited(0, f.stat().st_mtime - 5), log_path=str(tmp_path / "0.log")) == "all good\n"


def test_keeps_the_last_4_kib(tmp_path: Path) -> None:
    f = tmp_path / "msg"
    f.write_bytes(b"a" * 10000 + b"END")
    got = read_message_file(str(f))
    assert got is not None and len(got) == MAX_MESSAGE_BYTES and got.endswith("END")


def test_a_file_older_than_the_run_is_not_its_message(tmp_path: Path) -> None:
    f = tmp_path / "msg"
    f.write_text("from the last run")
    os.utime(f, (1000.0, 1000.0))
    c = container(terminationMessagePath=str(f))
    assert termination_message(c, exited(1, 5000.0), log_path=str(tmp_path / "none.log")) == ""


def test_missing_file_is_no_message_and_relative_paths_follow_working_dir(tmp_path: Path) -> None:
    assert read_message_file(str(tmp_path / "nope")) is None
    assert message_path(container(terminationMessagePath="msg", workingDir="/srv")) == "/srv/msg"
    assert message_path(container()) == "/dev/termination-log"


def test_refuses_what_the_container_could_not_have_written(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_text("root only")
    link = tmp_path / "link"
    link.symlink_to(target)
    c = container(terminationMessagePath=str(link))
    got = termination_message(c, exited(1, 0.0), log_path=str(tmp_path / "0.log"))
    assert got.startswith(f"Error on reading termination log {link}:")
    assert "root only" not in got
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = termination_message(container(terminationMessagePath=str(fifo)), exited(1, 0.0), log_path="/x")
    assert got == f"Error on reading termination log {fifo}: {fifo} is not a regular file"
    # a non-root container may not have its message read from a file it does not own
    got = termination_message(container(terminationMessagePath=str(target)), exited(1, 0.0), log_path="/x",
                              run_as_user=os.getuid() + 4242)
    assert got.startswith(f"Error on reading termination log {target}:") and "not owned" in got


def test_fallback_to_logs_on_error(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    c = container(terminationMessagePath=str(tmp_path / "none"), terminationMessagePolicy="FallbackToLogsOnError")
    got = termination_message(c, exited(2, 0.0), log_path=str(log))
    assert got.endswith("line 199\n") and len(got.encode()) <= LOG_BYTES
    assert "line 119\n" not in got  # only the last 80 lines are read
    assert got.startswith("line 120\n")
    long = tmp_path / "1.log"
    long.write_text("".join(f"{i:03d}" + "x" * 96 + "\n" for i in range(50)))  # 100-byte lines
    tail = termination_message(c, exited(2, 0.0), log_path=str(long))
    assert len(tail.encode()) == LOG_BYTES and tail.endswith("049" + "x" * 96 + "\n")
    # success or File policy: no fallback
    assert termination_message(c, exited(0, 0.0), log_path=str(log)) == ""
    plain = container(terminationMessagePath=str(tmp_path / "none"))
    assert termination_message(plain, exited(2, 0.0), log_path=str(log)) == ""
    # a container that could not start has no logs to fall back on
    assert termination_message(c, exited(128, 0.0, reason="StartError", message="exec failed"), log_path=str(log)) == "exec failed"


def test_fallback_on_an_empty_message_file_and_appended_to_the_runtime_message(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text("panic: boom\n")
    empty = tmp_path / "msg"
    empty.write_text("")
    c = container(terminationMessagePath=str(empty), terminationMessagePolicy="FallbackToLogsOnError")
    got = termination_message(c, exited(137, empty.stat().st_mtime, reason="OOMKilled", message="OOM"), log_path=str(log))
    assert got == "OOM: panic: boom\n"
