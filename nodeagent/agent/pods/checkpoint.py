"""Checkpoint store: what the agent admitted and started, so pods survive an agent restart.

One JSON file per pod, `<stateDir>/checkpoints/<namespace>_<name>.json`, rather than one file for
all pods: a write rewrites only the pod that changed (no lock, no read-modify-write of the others),
a torn or corrupt file costs one pod and not the whole node, and removing a pod is one unlink.
`_` cannot occur in a DNS-1123 name, so the key splits back unambiguously.

Every write is atomic and durable: temp file in the same directory, fsync, rename, fsync the
directory. A file that cannot be read back is reported, logged and moved aside, never dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from nodeagent.core import names
from nodeagent.core.errors import FieldError

log = structlog.get_logger(__name__)

FORMAT_VERSION = 1
_TMP_PREFIX = ".tmp-"
_MAX_FILENAME = 255


def _check(validate: Callable[[str], None], value: object, path: str) -> None:
    """Keys become file names: only DNS-1123 names pass, so nothing escapes the directory."""
    if not isinstance(value, str):
        raise FieldError(path, f"must be a string, not {type(value).__name__}")
    try:
        validate(value)
    except ValueError as e:
        raise FieldError(path, str(e)) from None


@dataclass(frozen=True)
class ContainerCheckpoint:
    """Enough to re-adopt a running process: the pid plus its start time, which guards against
    pid reuse (the runtime's choice of clock, e.g. psutil's create_time(), epoch seconds).
    `last_state` is the Kubernetes-shaped lastState, e.g. {"terminated": {"exitCode": 137}}."""

    name: str
    pid: int | None = None
    start_time: float | None = None
    restart_count: int = 0
    last_state: Mapping[str, Any] = field(default_factory=dict)
    backoff: tuple[float, float] | None = None  # CrashBackoff (delay s, last restart as wall time)


@dataclass(frozen=True)
class Deletion:
    """A termination the agent promised (a 200 to a DELETE, or an eviction): carried on after a restart.

    `deadline` is the wall time the grace period ends; `remove` says the pod leaves the list once stopped
    (a delete) rather than staying as Failed (an eviction)."""

    grace_period: float
    deadline: float
    remove: bool = True
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class PodCheckpoint:
    namespace: str
    name: str
    uid: str
    manifest: Mapping[str, Any]
    containers: tuple[ContainerCheckpoint, ...] = ()
    deletion: Deletion | None = None
    # an in-place resize not yet carried through (pods/resize.py ResizeState.to_record): the
    # patched spec's resources while they differ from the allocation (`manifest`), what the cgroups
    # were last given where it differs from it, the restarts still owed
    resize: Mapping[str, Any] | None = None

    def container(self, name: str) -> ContainerCheckpoint | None:
        return next((c for c in self.containers if c.name == name), None)


@dataclass(frozen=True)
class CheckpointProblem:
    path: Path
    reason: str
    moved_to: Path | None


def filename_for(namespace: str, name: str) -> str:
    """Deterministic file name; very long names are shortened with a hash to fit NAME_MAX."""
    _check(names.validate_dns1123_label, namespace, "metadata.namespace")
    _check(names.validate_dns1123_subdomain, name, "metadata.name")
    base = f"{namespace}_{name}"
    if len(base) + len(".json") > _MAX_FILENAME:
        digest = hashlib.sha256(base.encode()).hexdigest()[:32]
        base = f"{base[:_MAX_FILENAME - 5 - 33]}-{digest}"
    return base + ".json"


def record_to_data(record: PodCheckpoint) -> dict[str, Any]:
    """The record as plain JSON values (the per-pod file's and the journal's payload)."""
    data: dict[str, Any] = {
        "namespace": record.namespace, "name": record.name, "uid": record.uid,
        "manifest": record.manifest,
        "containers": [{"name": c.name, "pid": c.pid, "startTime": c.start_time,
                        "restartCount": c.restart_count, "lastState": c.last_state,
                        **({"backoff": list(c.backoff)} if c.backoff else {})}
                       for c in record.containers],
    }
    d = record.deletion
    if d is not None:
        data["deletion"] = {"gracePeriodSeconds": d.grace_period, "deadline": d.deadline, "remove": d.remove,
                            "reason": d.reason, "message": d.message}
    if record.resize:
        data["resize"] = record.resize
    return data


def record_from_data(data: Any) -> PodCheckpoint:
    """Inverse of record_to_data; ValueError naming the defect."""
    if not isinstance(data, dict):
        raise ValueError(f"malformed record: data is {type(data).__name__}, not an object")
    try:
        containers = tuple(
            ContainerCheckpoint(name=c["name"], pid=c["pid"], start_time=c["startTime"],
                                restart_count=int(c["restartCount"]), last_state=c["lastState"],
                                backoff=(float(c["backoff"][0]), float(c["backoff"][1])) if c.get("backoff") else None)
            for c in data["containers"])
        d = data.get("deletion")
        deletion = None if d is None else Deletion(
            grace_period=float(d["gracePeriodSeconds"]), deadline=float(d["deadline"]), remove=bool(d["remove"]),
            reason=d.get("reason"), message=d.get("message"))
        resize = data.get("resize")
        if resize is not None and not isinstance(resize, dict):
            raise ValueError(f"resize is {type(resize).__name__}, not an object")
        return PodCheckpoint(namespace=data["namespace"], name=data["name"], uid=str(data["uid"]),
                             manifest=data["manifest"], containers=containers, deletion=deletion, resize=resize)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ValueError(f"malformed record: {type(e).__name__}: {e}") from None


def _encode(record: PodCheckpoint) -> bytes:
    data = record_to_data(record)
    body = json.dumps(data, sort_keys=True, separators=(",", ":"))
    checksum = hashlib.sha256(body.encode()).hexdigest()
    return json.dumps({"version": FORMAT_VERSION, "checksum": checksum, "data": data},
                      sort_keys=True, indent=1).encode()


def _decode(raw: bytes) -> PodCheckpoint:
    """Parse and verify a checkpoint; any defect raises ValueError with the reason."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not valid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"unsupported format (want version {FORMAT_VERSION})")
    data = doc.get("data")
    body = json.dumps(data, sort_keys=True, separators=(",", ":"))
    if hashlib.sha256(body.encode()).hexdigest() != doc.get("checksum"):
        raise ValueError("checksum mismatch")
    return record_from_data(data)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """Per-pod checkpoint files under `<state_dir>/checkpoints`.

    The constructor does no I/O; `open` (the factory the agent uses) makes the directory."""

    def __init__(self, state_dir: str | os.PathLike[str],
                 wall: Callable[[], float] = time.time) -> None:
        self.directory = Path(state_dir) / "checkpoints"
        self._wall = wall

    @classmethod
    def open(cls, state_dir: str | os.PathLike[str],
             wall: Callable[[], float] = time.time) -> CheckpointStore:
        """The store of `state_dir`, its directory made (0700) if it is missing; OSError if it cannot be."""
        store = cls(state_dir, wall)
        store.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        return store

    def path_for(self, namespace: str, name: str) -> Path:
        return self.directory / filename_for(namespace, name)

    def save(self, record: PodCheckpoint) -> Path:
        """Atomically replace the pod's checkpoint; a crash leaves the old or the new file."""
        target = self.path_for(record.namespace, record.name)
        payload = _encode(record)
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(self.directory)
        return target

    def load(self, namespace: str, name: str) -> PodCheckpoint | None:
        """One pod's record; None if absent. Raises ValueError if the file is corrupt."""
        try:
            raw = self.path_for(namespace, name).read_bytes()
        except FileNotFoundError:
            return None
        return _decode(raw)

    def load_path(self, path: Path) -> PodCheckpoint:
        """The record in one file of the directory; ValueError if it is corrupt."""
        return _decode(path.read_bytes())

    def delete(self, namespace: str, name: str) -> bool:
        """Remove the pod's checkpoint (pod removed); False if there was none."""
        try:
            self.path_for(namespace, name).unlink()
        except FileNotFoundError:
            return False
        _fsync_dir(self.directory)
        return True

    def load_all(self) -> tuple[list[PodCheckpoint], list[CheckpointProblem]]:
        """Read every checkpoint at startup (before any save): leftover temp files from a crash
        are removed, unreadable files are reported and moved aside."""
        records: list[PodCheckpoint] = []
        problems: list[CheckpointProblem] = []
        for path in sorted(self.directory.iterdir()):
            if path.name.startswith(_TMP_PREFIX):
                path.unlink(missing_ok=True)
                log.info("checkpoint_tmp_removed", path=str(path))
                continue
            if not path.name.endswith(".json"):
                continue
            try:
                if path.is_symlink() or not path.is_file():
                    raise ValueError("not a regular file")
                record = _decode(path.read_bytes())
                if filename_for(record.namespace, record.name) != path.name:
                    raise ValueError(f"file name does not match pod "
                                     f"{record.namespace}/{record.name}")
            except (OSError, ValueError) as e:
                problems.append(self._quarantine(path, str(e)))
                continue
            records.append(record)
        return records, problems

    def _quarantine(self, path: Path, reason: str) -> CheckpointProblem:
        log.error("checkpoint_corrupt", path=str(path), error=reason)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._wall()))
        dest = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while dest.exists():
            dest = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
            n += 1
        try:
            os.rename(path, dest)
            _fsync_dir(self.directory)
        except OSError as e:
            log.error("checkpoint_quarantine_failed", path=str(path), error=str(e))
            return CheckpointProblem(path, reason, None)
        return CheckpointProblem(path, reason, dest)
