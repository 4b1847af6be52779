"""Registry access (pure): TLS or plain HTTP, credentials from secrets then config, skopeo's
auth file, dockerconfigjson parsing, and skopeo's messages mapped to the image errors."""

from __future__ import annotations

import base64
import json

import pytest

from nodeagent.agent.config.settings import RegistryConfig, parse_config
from nodeagent.agent.images import errors as E
from nodeagent.agent.images.credentials import (
    Credential,
    access_for,
    accesses_for,
    auth_file,
    key_matches,
    lookup,
    parse_docker_config,
    pull_secret_keyring,
)
from nodeagent.agent.images.manager import manager_from_config
from nodeagent.agent.images.reference import parse_reference
from nodeagent.agent.images.skopeo import classify, failure_message


@pytest.mark.parametrize("image, registries, tls", [
    ("127.0.0.1:5000/a:1", {}, False),  # loopback: plain HTTP allowed
    ("localhost:5000/a:1", {}, False),
    ("registry.example:5000/a:1", {}, True),  # anything else: verified TLS
    ("busybox", {}, True),
    ("10.1.2.3:5000/a:1", {"10.1.2.3:5000": RegistryConfig(insecure=True)}, False),  # listed as insecure
    ("10.1.2.3:5000/a:1", {"10.1.2.3:5001": RegistryConfig(insecure=True)}, True),  # another port is another registry
])
def test_tls_decision(image: str, registries: dict[str, RegistryConfig], tls: bool) -> None:
    assert access_for(parse_reference(image), registries).tls_verify is tls


def test_credentials_from_secrets_first_then_config() -> None:
    ref = parse_reference("reg.example/team/app:1")
    conf = {"reg.example": RegistryConfig(username="node", password_file="/etc/pw", cert_dir="/etc/certs")}
    files = {"/etc/pw": "from-file\n"}
    access = access_for(ref, conf, read_file=files.__getitem__)
    assert access.credential == Credential("node", "from-file") and access.cert_dir == "/etc/certs"
    secret = {"reg.example": Credential("pod", "from-secret")}
    assert access_for(ref, conf, [{}, secret], read_file=files.__getitem__).credential == secret["reg.example"]
    assert access_for(parse_reference("other.example/a:1"), conf).credential is None
    assert "from-file" not in repr(access)


def test_auth_file_for_skopeo() -> None:
    ref = parse_reference("127.0.0.1:5000/a:1")
    access = access_for(ref, {}, [{"127.0.0.1:5000": Credential("u", "p:w")}])
    doc = json.loads(auth_file(access))
    assert base64.b64decode(doc["auths"]["127.0.0.1:5000"]["auth"]).decode() == "u:p:w"
    assert json.loads(auth_file(access_for(ref, {}))) == {"auths": {}}


def test_docker_config_json() -> None:
    auth = base64.b64encode(b"alice:pa:ss").decode()
    data = json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": auth},
                                 "reg.example:5000": {"username": "bob", "password": "pw"},
                                 "https://quay.io/v2/": {"auth": base64.b64encode(b"q:x").decode()}}}).encode()
    keyring = parse_docker_config(data)
    assert keyring == {"docker.io": Credential("alice", "pa:ss"), "reg.example:5000": Credential("bob", "pw"),
                       "quay.io": Credential("q", "x")}
    legacy = parse_docker_config(json.dumps({"reg.example": {"auth": base64.b64encode(b"c:d").decode()}}).encode())
    assert legacy == {"reg.example": Credential("c", "d")}
    for bad, why in ((b"{", "not JSON"), (b"[]", "JSON object"), (b'{"auths": {"r": {"auth": "!!"}}}', "base64"),
                     (b'{"auths": {"r": {"auth": "' + base64.b64encode(b"nocolon") + b'"}}}', "user:password")):
        with pytest.raises(ValueError, match=why):
            parse_docker_config(bad)


@pytest.mark.parametrize("message, cls", [
    ('reading manifest 1 in 127.0.0.1:5000/x: manifest unknown: manifest unknown', E.ImageNotFound),
    ('initializing source oci:/srv/x:latest: no descriptor found for reference "latest"', E.ImageNotFound),
    ('unable to retrieve auth token: invalid username/password: unauthorized: authentication required', E.Unauthorized),
    ('pinging container registry 127.0.0.1:1: Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused',
     E.RegistryUnavailable),
    ('Get "https://reg.example/v2/": x509: certificate signed by unknown authority', E.RegistryUnavailable),
    ('writing blob: Digest did not match, expected sha256:aa, got sha256:bb', E.DigestMismatch),
    ('writing blob: write /store/tmp/x: no space left on device', E.NoSpace),
    ('something new', E.PullFailed),
])
def test_skopeo_messages(message: str, cls: type[E.PullFailed]) -> None:
    err = classify(message)
    assert type(err) is cls and err.message.startswith(message) and err.reason == "ErrImagePull"


@pytest.mark.parametrize("message, status", [
    ("reading manifest 1 in r/x: unauthorized: authentication required", "401 Unauthorized"),
    ("unable to retrieve auth token: invalid username/password: unauthorized: authentication required",
     "401 Unauthorized"),
    ("reading manifest 1 in r/x: denied: requested access to the resource is denied", "403 Forbidden"),
    ("reading manifest 1 in r/x: authentication required", None),  # no distribution code: no status claimed
    ("received unexpected HTTP status: 401 Unauthorized", None),  # already named
])
def test_a_refusal_names_the_registrys_status(message: str, status: str | None) -> None:
    err = classify(message)
    assert isinstance(err, E.Unauthorized)
    assert err.message == (f"{message} (the registry answered {status})" if status else message)


def test_failure_message_takes_the_fatal_msg() -> None:
    stderr = 'time="2026-01-01T00:00:00Z" level=fatal msg="reading manifest 1 in r/x: manifest \\"unknown\\""\n'
    assert failure_message(stderr, 1) == 'reading manifest 1 in r/x: manifest "unknown"'
    assert failure_message("plain last line\n", 1) == "plain last line"
    assert failure_message("", 3) == "skopeo exited with status 3"


async def test_manager_from_config(tmp_path: object) -> None:
    import os

    from nodeagent.agent.events import EventRecorder
    from nodeagent.core.clock import FakeClock

    config = parse_config({"stateDir": str(tmp_path), "imageGCHighThresholdPercent": 90,
                           "imageMinimumGCAge": "5m", "imagePullProgressTimeout": "30s",
                           "imageRegistries": {"reg.example": {"insecure": True}}}, "test")
    clock = FakeClock()
    manager = manager_from_config(config, EventRecorder(clock, "n"), clock)
    assert not os.path.exists(f"{tmp_path}/images")  # no I/O before start()
    assert manager.store.root == f"{tmp_path}/images"
    assert manager.gc_policy.high_percent == 90 and manager.gc_policy.min_age == 300
    assert manager.progress_timeout == 30 and manager.registries["reg.example"].insecure
    assert manager.reserve_bytes == 0
    await manager.start()
    st = os.statvfs(str(tmp_path))
    # imagefs.available<15% by default (f_blocks moves a little on some filesystems: 0.1% slack)
    assert abs(manager.reserve_bytes - st.f_blocks * st.f_frsize * 0.15) < st.f_blocks * st.f_frsize * 0.001
    assert os.path.isdir(f"{tmp_path}/images/tmp")

    # a reload: the registries, GC keys, timeout and the reserve follow the new config
    new = parse_config({"stateDir": str(tmp_path), "imageGCLowThresholdPercent": 50, "imagePullProgressTimeout": "2m",
                        "evictionHard": {"imagefs.available": "1Mi"}}, "test")
    manager.reconfigure(new)
    assert (manager.gc_policy.high_percent, manager.gc_policy.low_percent, manager.gc_policy.min_age) == (85, 50, 120)
    assert manager.progress_timeout == 120 and manager.registries == {}
    assert manager.reserve_bytes == 1 << 20
    manager.reconfigure(parse_config({"stateDir": str(tmp_path), "evictionHard": {}}, "test"))
    assert manager.reserve_threshold is None and manager.reserve_bytes == 0


@pytest.mark.parametrize("key, image, match", [
    # the kubelet's credentialprovider URLsMatchStr cases
    ("reg.example", "reg.example/team/app", True),
    ("reg.example/team", "reg.example/team/app", True),
    ("reg.example/team", "reg.example/other/app", False),
    ("reg.example/team/app", "reg.example/team", False),  # the key's path must be a prefix of the image's
    ("reg.example:5000", "reg.example/team/app", False),  # the port is part of the registry
    ("reg.example", "reg.example:5000/team/app", False),
    ("reg.example:5000", "reg.example:5000/app", True),
    ("*.example", "reg.example/app", True),  # a glob per host label
    ("*.example", "a.reg.example/app", False),  # ...with as many labels
    ("*.*.example", "a.reg.example/app", True),
    ("*.example", "example/app", False),
    ("docker.io", "docker.io/library/busybox", True),
    ("127.0.0.1:5000", "127.0.0.1:5000/test/small", True),
    ("127.0.0.1:5001", "127.0.0.1:5000/test/small", False),
])
def test_key_matches(key: str, image: str, match: bool) -> None:
    assert key_matches(key, image) is match


@pytest.mark.parametrize("key, normal", [
    ("https://index.docker.io/v1/", "docker.io"),
    ("index.docker.io", "docker.io"),
    ("https://quay.io/v2/", "quay.io"),
    ("http://reg.example:5000/team/", "reg.example:5000/team"),
    ("reg.example/team/app", "reg.example/team/app"),
    ("https://reg.example/v1/team", "reg.example/team"),
])
def test_docker_config_keys_keep_their_path(key: str, normal: str) -> None:
    data = json.dumps({"auths": {key: {"username": "u", "password": "p"}}}).encode()
    assert list(parse_docker_config(data)) == [normal]


def test_lookup_merges_the_secrets_most_specific_first() -> None:
    team, host, other = Credential("team", "1"), Credential("host", "2"), Credential("other", "3")
    first = {"reg.example": host}
    second = {"reg.example/team": team, "other.example": other}
    assert lookup([first, second], "reg.example/team/app") == [team, host]  # not in secret order: by key
    assert lookup([first, second], "reg.example/x/app") == [host]
    assert lookup([first, second], "third.example/app") == []
    # the same key in two secrets: both, in secret order
    assert lookup([first, {"reg.example": team}], "reg.example/app") == [host, team]


def test_secrets_come_before_the_config_and_each_is_a_candidate() -> None:
    ref = parse_reference("reg.example/team/app:1")
    conf = {"reg.example": RegistryConfig(username="node", password_file="/etc/pw")}
    files = {"/etc/pw": "from-file\n"}
    pod = Credential("pod", "from-secret")
    found = accesses_for(ref, conf, [{"reg.example/team": pod}], read_file=files.__getitem__)
    assert [a.credential for a in found] == [pod, Credential("node", "from-file")]
    assert all(a.registry == "reg.example" and a.tls_verify for a in found)
    assert [a.credential for a in accesses_for(ref, {})] == [None]  # anonymous, once


def _secret(kind: str, key: str, doc: object) -> dict[str, object]:
    return {"type": kind, "data": {key: base64.b64encode(json.dumps(doc).encode()).decode()}}


def test_pull_secret_objects() -> None:
    auth = base64.b64encode(b"puller:pw").decode()
    json_secret = _secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson",
                          {"auths": {"127.0.0.1:5000": {"auth": auth}}})
    assert pull_secret_keyring(json_secret) == {"127.0.0.1:5000": Credential("puller", "pw")}
    legacy = _secret("kubernetes.io/dockercfg", ".dockercfg", {"reg.example": {"auth": auth}})
    assert pull_secret_keyring(legacy) == {"reg.example": Credential("puller", "pw")}
    # another type, the key of the other type, no data: nothing (as the kubelet's MakeDockerKeyring)
    assert pull_secret_keyring(_secret("Opaque", ".dockerconfigjson", {"auths": {}})) == {}
    assert pull_secret_keyring(_secret("kubernetes.io/dockercfg", ".dockerconfigjson", {"auths": {}})) == {}
    assert pull_secret_keyring({"type": "kubernetes.io/dockerconfigjson"}) == {}
    with pytest.raises(ValueError, match=r"data\[.dockerconfigjson\]: not base64"):
        pull_secret_keyring({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "!!"}})
    with pytest.raises(ValueError, match=r"data\[.dockerconfigjson\]: must be a JSON object"):
        pull_secret_keyring(_secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson", []))
