"""Registry access (pure): TLS or plain HTTP, credentials from secrets then config, skopeo's
auth file, dockerconfigjson parsing, and skopeo's messages mapped to the image errors."""

from __future__ import annotations

import base64
import json

import pytest

from nodeagent.agent.config.settings import RegistryConfig, parse_config
from nodeagent.agent.images import errors as E
from nodeagent.agent.images.credentials import Credential, access_for, auth_file, parse_docker_config
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
    assert type(err) is cls and err.message == message and err.reason == "ErrImagePull"


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
