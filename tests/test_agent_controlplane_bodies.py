"""The pure parts of the agent's link to the control plane: reading a kubeconfig (and every error
naming its key), the config keys, the Node and Lease bodies, and the back-off."""

from __future__ import annotations

import base64
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.cluster_client import bodies
from nodeagent.agent.config.settings import parse_config
from nodeagent.cluster.auth.pki import issue_client_certificate, make_ca
from nodeagent.core.wellknown import API_URL
from nodeagent.daemonkit.configfile import ConfigError
from nodeagent.daemonkit.kubeconfig import KubeconfigError, client_ssl_context, load_kubeconfig, parse_kubeconfig

CA = make_ca("test-ca")
CLIENT = issue_client_certificate(CA, "system:node:n1", ("system:nodes",))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None,
               **top: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": cluster if cluster is not None else {
                "server": "https://127.0.0.1:6443/", "certificate-authority-data": b64(CA.cert_pem)}}],
            "users": [{"name": "u", "user": user if user is not None else {"token": "s3cr3t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}], **top}


def test_token_kubeconfig_gives_server_ca_and_token_and_hides_the_token() -> None:
    creds = parse_kubeconfig(kubeconfig(), "kc")
    assert creds.server == "https://127.0.0.1:6443" and creds.ca_pem == CA.cert_pem and creds.token == "s3cr3t"
    assert creds.user_kind == "token" and "s3cr3t" not in repr(creds)
    ctx = client_ssl_context(creds)
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_client_certificate_from_files_relative_to_the_kubeconfig(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "node.crt").write_bytes(CLIENT.cert_pem)
    (tmp_path / "pki" / "node.key").write_bytes(CLIENT.key_pem)
    (tmp_path / "ca.crt").write_bytes(CA.cert_pem)
    doc = kubeconfig(user={"client-certificate": "pki/node.crt", "client-key": "pki/node.key"},
                     cluster={"server": "https://h:1", "certificate-authority": "ca.crt"})
    import yaml

    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(doc))
    creds = load_kubeconfig(tmp_path / "kubeconfig")
    assert creds.client_cert_pem == CLIENT.cert_pem and creds.client_key_pem == CLIENT.key_pem and creds.token is None
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert client_ssl_context(creds) is not None  # the chain loads
    assert not list((tmp_path / "tmp").iterdir())  # and the temporary key file is gone


def test_token_file_and_single_context_without_current_context(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  secret\n")
    doc = kubeconfig(user={"tokenFile": str(tmp_path / "token")})
    del doc["current-context"]
    assert parse_kubeconfig(doc, "kc", tmp_path).token == "secret"


@pytest.mark.parametrize(("doc", "message"), [
    ([], "kc: (root): expected a kubeconfig mapping"),
    (kubeconfig(kind="Pod"), 'kc: kind: must be "Config", got "Pod"'),
    (kubeconfig(**{"current-context": "nope"}), 'kc: contexts: no entry named "nope"'),
    (kubeconfig(cluster={"server": "127.0.0.1:6443"}),
     'kc: clusters[0].cluster.server: must be an http:// or https:// URL, got "127.0.0.1:6443"'),
    (kubeconfig(cluster={"server": "https://h", "certificate-authority-data": "!!"}),
     "kc: clusters[0].cluster.certificate-authority-data: not valid base64"),
    (kubeconfig(cluster={"server": "https://h", "certificate-authority-data": b64(b"x"),
                         "insecure-skip-tls-verify": True}),
     "specifying a root certificates file with the insecure flag is not allowed"),
    (kubeconfig(cluster={"server": "http://h:8080"}), "kc: clusters[0].cluster.server: credentials are not sent "
                                                      "over plain http"),
    (kubeconfig(user={"exec": {"command": "x"}}), "kc: users[0].user.exec: not supported by nodeagent"),
    (kubeconfig(user={"client-certificate-data": b64(CLIENT.cert_pem)}),
     "kc: users[0].user.client-key: a client certificate needs its key"),
    (kubeconfig(user={"tokenFile": "/nonexistent/token"}), "kc: users[0].user.tokenFile: cannot read"),
    (kubeconfig(user={"client-certificate": "/nonexistent/c"}), "kc: users[0].user.client-certificate: cannot read"),
])
def test_kubeconfig_errors_name_the_key(doc: Any, message: str) -> None:
    with pytest.raises(KubeconfigError) as e:
        parse_kubeconfig(doc, "kc", Path("/"))
    assert message in str(e.value)


def test_unusable_pem_is_a_kubeconfig_error() -> None:
    creds = parse_kubeconfig(kubeconfig(cluster={"server": "https://h", "certificate-authority-data": b64(b"junk")}),
                             "kc")
    with pytest.raises(KubeconfigError, match="certificate-authority is not a usable PEM"):
        client_ssl_context(creds)
    creds = parse_kubeconfig(kubeconfig(user={"client-certificate-data": b64(CLIENT.cert_pem),
                                              "client-key-data": b64(CA.key_pem)}), "kc")
    with pytest.raises(KubeconfigError, match="client certificate or key is not usable"):
        client_ssl_context(creds)


def test_load_kubeconfig_file_errors(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match=f"{tmp_path}/missing: cannot read"):
        load_kubeconfig(tmp_path / "missing")
    (tmp_path / "bad").write_text("a: [")
    with pytest.raises(KubeconfigError, match="not YAML"):
        load_kubeconfig(tmp_path / "bad")


# ---- config keys ----


def test_config_keys_defaults_and_errors(tmp_path: Path) -> None:
    cfg = parse_config({"nodeName": "n1"}, "t")
    assert cfg.kubeconfig is None and cfg.node_lease_duration_seconds == 40 and cfg.node_status_update_frequency == 10
    import yaml

    (tmp_path / "kc").write_text(yaml.safe_dump(kubeconfig()))
    cfg = parse_config({"nodeName": "n1", "kubeconfig": str(tmp_path / "kc"), "nodeLeaseDurationSeconds": 8}, "t")
    assert cfg.kubeconfig == str(tmp_path / "kc") and cfg.node_lease_duration_seconds == 8
    with pytest.raises(ConfigError) as e:
        parse_config({"nodeName": "n1", "kubeconfig": "relative/kc", "nodeLeaseDurationSeconds": 0}, "t")
    text = "\n".join(e.value.errors)
    assert "kubeconfig:" in text and "nodeLeaseDurationSeconds:" in text
    (tmp_path / "kc").write_text(yaml.safe_dump(kubeconfig(user={"exec": {}})))
    with pytest.raises(ConfigError) as e:
        parse_config({"nodeName": "n1", "kubeconfig": str(tmp_path / "kc")}, "t")
    assert any(line.startswith("kubeconfig: ") and "users[0].user.exec" in line for line in e.value.errors)


# ---- bodies ----

AGENT_NODE = {
    "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
    "status": {"capacity": {"cpu": "2", "memory": "1Gi", "pods": "110"},
               "allocatable": {"cpu": "1800m", "memory": "900Mi", "pods": "110"},
               "conditions": [{"type": "Ready", "status": "True"}],
               "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
               "nodeInfo": {"kernelVersion": "6.1", "osImage": "Debian", "operatingSystem": "linux",
                            "architecture": "amd64", "machineID": "m", "bootID": "b", "cgroupVersion": "v2",
                            "cgroupDriver": "cgroupfs", "agentVersion": "0.1.0"},
               "usage": {"memory": "10Mi"}},
}


def test_node_for_create_has_the_kubernetes_shape_only() -> None:
    body = bodies.node_for_create(AGENT_NODE, 10250, "https://10.0.0.5:10250")
    assert body["metadata"] == {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"},
                                "annotations": {API_URL: "https://10.0.0.5:10250"}}
    status = body["status"]
    assert set(status) == {"capacity", "allocatable", "conditions", "addresses", "nodeInfo", "daemonEndpoints"}
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert status["nodeInfo"] == {"machineID": "m", "systemUUID": "", "bootID": "b", "kernelVersion": "6.1",
                                  "osImage": "Debian", "containerRuntimeVersion": "nodeagent://v0.1.0",
                                  "kubeletVersion": "v0.1.0", "kubeProxyVersion": "", "operatingSystem": "linux",
                                  "architecture": "amd64"}
    assert AGENT_NODE["metadata"].get("annotations") is None  # the input is not changed


def test_status_and_metadata_patches() -> None:
    patch = bodies.status_patch(AGENT_NODE, 1234)
    assert set(patch) == {"status"} and patch["status"]["allocatable"]["cpu"] == "1800m"
    assert patch["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    meta = bodies.metadata_patch(AGENT_NODE, "http://x:1")
    assert meta == {"metadata": {"labels": {"kubernetes.io/hostname": "n1"}, "annotations": {API_URL: "http://x:1"}}}


def test_lease_bodies() -> None:
    created = bodies.lease_for_create("n1", 40, 1_700_000_000.25, "uid-1")
    assert created == {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "n1", "namespace": "kube-node-lease", "ownerReferences": [
                           {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}]},
                       "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                                "renewTime": "2023-11-14T22:13:20.250000Z"}}
    assert "ownerReferences" not in bodies.lease_for_create("n1", 40, 0.0)["metadata"]
    read = {**bodies.lease_for_create("n1", 10, 0.0), "metadata": {"name": "n1", "namespace": "kube-node-lease",
                                                                    "resourceVersion": "7"}}
    put = bodies.renewed_lease(read, "n1", 40, 1_700_000_001.0, "uid-1")
    assert put["metadata"]["resourceVersion"] == "7" and put["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert put["spec"] == {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                           "renewTime": "2023-11-14T22:13:21.000000Z"}
    assert read["spec"]["leaseDurationSeconds"] == 10  # not changed in place
    assert bodies.lease_renew_interval(40) == 10.0


@pytest.mark.parametrize(("failures", "delay"), [(0, 0.0), (1, 0.2), (2, 0.4), (3, 0.8), (6, 6.4), (7, 7.0),
                                                 (1000, 7.0)])
def test_backoff_doubles_from_200ms_to_7s(failures: int, delay: float) -> None:
    assert bodies.backoff_delay(failures) == pytest.approx(delay)


@pytest.mark.parametrize(("failures", "duration", "delay"), [
    (1, 40, 0.2), (6, 40, 6.4), (9, 40, 7.0),   # the default 40 s lease: the kubelet's back-off
    (3, 4, 0.8), (4, 4, 1.0), (9, 4, 1.0),      # a 4 s lease is renewed every second: never wait longer
    (9, 28, 7.0), (9, 20, 5.0), (9, 0, 0.2),
])
def test_the_sync_retries_within_the_renew_interval(failures: int, duration: int, delay: float) -> None:
    assert bodies.lease_retry_delay(failures, duration) == pytest.approx(delay)


def test_status_fingerprint_ignores_heartbeats_only() -> None:
    patch = bodies.status_patch({**AGENT_NODE, "status": {**AGENT_NODE["status"], "conditions": [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
         "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}, 10250)
    later = bodies.status_patch({**AGENT_NODE, "status": {**AGENT_NODE["status"], "conditions": [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:10Z",
         "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}, 10250)
    assert bodies.status_fingerprint(patch) == bodies.status_fingerprint(later)
    assert patch["status"]["conditions"][0]["lastHeartbeatTime"] == "2026-01-01T00:00:00Z"  # not changed in place
    flipped = {**later, "status": {**later["status"], "conditions": [{**later["status"]["conditions"][0],
                                                                      "status": "False"}]}}
    assert bodies.status_fingerprint(flipped) != bodies.status_fingerprint(patch)
    moved = bodies.status_patch({**AGENT_NODE, "status": {**AGENT_NODE["status"], "allocatable": {"cpu": "1"}}}, 1)
    assert bodies.status_fingerprint(moved) != bodies.status_fingerprint(bodies.status_patch(AGENT_NODE, 1))


@pytest.mark.parametrize(("changed", "since", "frequency", "send"), [
    (True, 1.0, 300.0, True),     # a change goes at once
    (False, None, 300.0, True),   # the first on a connection
    (False, 10.0, 300.0, False),  # unchanged, recently sent
    (False, 300.0, 300.0, True),  # nodeStatusReportFrequency has passed
])
def test_status_needs_sending(changed: bool, since: float | None, frequency: float, send: bool) -> None:
    assert bodies.status_needs_sending(changed, since, frequency) is send


@pytest.mark.parametrize(("data", "report"), [
    ({}, 300.0),                                                                  # the kubelet's 5m
    ({"nodeStatusUpdateFrequency": "20s"}, 20.0),                                 # follows an explicit update
    ({"nodeStatusUpdateFrequency": "20s", "nodeStatusReportFrequency": "1m"}, 60.0),
    ({"nodeStatusReportFrequency": "2m"}, 120.0),
])
def test_node_status_report_frequency_default(data: dict[str, str], report: float) -> None:
    assert parse_config({"nodeName": "n1", **data}, "t").node_status_report_frequency == report


def test_node_status_report_frequency_must_be_positive() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"nodeName": "n1", "nodeStatusReportFrequency": "0s"}, "t")
    assert any(line.startswith("nodeStatusReportFrequency:") for line in e.value.errors), e.value.errors
