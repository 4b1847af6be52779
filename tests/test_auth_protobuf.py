"""The review kinds in Kubernetes protobuf, as kubectl 1.37 posts them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.cluster.auth.protobuf import ProtobufError, decode

# captured from `kubectl auth can-i get /version` (kubectl 1.37.1)
CAN_I_VERSION = (b'k8s\x00\n2\n\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12/\n\x10\n\x00\x12\x00'
                 b'\x1a\x00"\x00*\x002\x008\x00B\x00\x12\x11\x12\x0f\n\x08/version\x12\x03get\x1a\x08\x08\x00\x12'
                 b'\x00\x1a\x00 \x00\x1a\x00"\x00')


def _len(field: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


def _s(field: int, text: str) -> bytes:
    return _len(field, text.encode())


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return b"k8s\x00" + _len(1, _s(1, api_version) + _s(2, kind)) + _len(2, raw) + _s(3, "") + _s(4, "")


def test_kubectls_can_i_body() -> None:
    assert decode(CAN_I_VERSION) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "metadata": {"name": "", "generateName": "", "namespace": "", "uid": "", "resourceVersion": ""},
        "spec": {"nonResourceAttributes": {"path": "/version", "verb": "get"}}}


def test_subject_access_review_with_groups_extra_and_selectors() -> None:
    ra = (_s(1, "team") + _s(2, "list") + _s(5, "pods")
          + _len(8, _s(1, "spec.nodeName=n1"))
          + _len(9, _len(2, _s(1, "app") + _s(2, "In") + _s(3, "web") + _s(3, "db"))))
    spec = (_len(1, ra) + _s(3, "alice") + _s(4, "dev") + _s(4, "ops")
            + _len(5, _s(1, "scopes") + _len(2, _s(1, "a") + _s(1, "b"))) + _s(6, "u-1"))
    body = _envelope("authorization.k8s.io/v1", "SubjectAccessReview", _len(2, spec) + _len(3, b"\x08\x01"))
    assert decode(body) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods",
                                        "fieldSelector": {"rawSelector": "spec.nodeName=n1"},
                                        "labelSelector": {"requirements": [{"key": "app", "operator": "In",
                                                                            "values": ["web", "db"]}]}},
                 "user": "alice", "groups": ["dev", "ops"], "extra": {"scopes": ["a", "b"]}, "uid": "u-1"}}


def test_rules_review_and_whoami() -> None:
    assert decode(_envelope("authorization.k8s.io/v1", "SelfSubjectRulesReview", _len(2, _s(1, "team"))))["spec"] == \
        {"namespace": "team"}
    assert decode(_envelope("authentication.k8s.io/v1", "SelfSubjectReview", b"")) == \
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


@pytest.mark.parametrize(("body", "message"), [
    (b'{"kind":"SelfSubjectAccessReview"}', "no k8s"),
    (CAN_I_VERSION[:-30], "truncated"),
    (b"k8s\x00\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "varint too long"),
    (b"k8s\x00\x0b", "unsupported wire type"),
    (_envelope("v1", "Pod", b""), "reads no protobuf Pod of v1"),
    (_envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", _len(2, _len(2, _len(1, b"\xff\xfe")))),
     "not UTF-8"),
    (_envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", bytes([2 << 3 | 0, 5])), "expected a message"),
])
def test_malformed_bodies_are_clear_errors(body: bytes, message: str) -> None:
    with pytest.raises(ProtobufError, match=message):
        decode(body)


@given(st.binary(max_size=200))
def test_random_bytes_never_crash(data: bytes) -> None:
    for body in (b"k8s\x00" + data, CAN_I_VERSION[:40] + data):
        try:
            decode(body)
        except ProtobufError:
            pass
