"""Secret values never reach a log line: the redaction helpers and the structlog processor."""

from __future__ import annotations

import json
from typing import Any

import structlog

from nodeagent.cluster.auth.redact import REDACTED, redact_headers, redact_object, redact_processor, redact_value

SECRET: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Secret",
    "metadata": {"name": "db", "namespace": "ns", "annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": '{"data":{"password":"aHVudGVyMg=="}}', "team": "a"}},
    "data": {"password": "aHVudGVyMg=="}, "stringData": {"user": "hunter2"}, "type": "Opaque",
}


def test_secret_keeps_keys_loses_values() -> None:
    before = json.dumps(SECRET, sort_keys=True)
    out = redact_object(SECRET)
    assert json.dumps(SECRET, sort_keys=True) == before  # the original is untouched
    assert out["data"] == {"password": REDACTED} and out["stringData"] == {"user": REDACTED}
    assert out["metadata"]["annotations"] == {"kubectl.kubernetes.io/last-applied-configuration": REDACTED,
                                              "team": "a"}
    assert out["metadata"]["name"] == "db" and out["type"] == "Opaque"
    text = json.dumps(out)
    assert "aHVudGVyMg" not in text and "hunter2" not in text


def test_lists_watch_events_and_other_kinds() -> None:
    listing = {"kind": "SecretList", "apiVersion": "v1", "items": [SECRET, SECRET]}
    assert "hunter2" not in json.dumps(redact_object(listing))
    event = {"type": "MODIFIED", "object": SECRET}
    assert "aHVudGVyMg" not in json.dumps(redact_object(event))
    cm = {"kind": "ConfigMap", "apiVersion": "v1", "data": {"a": "b"}}
    assert redact_object(cm) is cm
    assert redact_object([SECRET])[0]["data"] == {"password": REDACTED}
    assert redact_object({"kind": "Secret", "data": "garbage"})["data"] == REDACTED


def test_headers() -> None:
    out = redact_headers({"Authorization": "Bearer s3cret", "Accept": "application/json", "Cookie": "a=b",
                          "Sec-WebSocket-Protocol": "v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.czNjcmV0",
                          "Impersonate-Extra-Scopes": "x"})
    assert out == {"Authorization": f"Bearer {REDACTED}", "Accept": "application/json", "Cookie": REDACTED,
                   "Sec-WebSocket-Protocol": f"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.{REDACTED}",
                   "Impersonate-Extra-Scopes": REDACTED}
    assert redact_value("hunter2") == f"{REDACTED} (7 bytes)"


def test_processor_in_a_real_structlog_chain(capsys: Any) -> None:
    structlog.configure(processors=[redact_processor, structlog.processors.JSONRenderer()],
                        logger_factory=structlog.PrintLoggerFactory(), cache_logger_on_first_use=False)
    try:
        log = structlog.get_logger("t")
        log.info("object_rejected", obj=SECRET, headers={"Authorization": "Bearer s3cret"}, token="s3cret",
                 nested={"items": [{"password": "hunter2"}]}, name="db")
        line = capsys.readouterr().out
    finally:
        structlog.reset_defaults()
    assert "s3cret" not in line and "hunter2" not in line and "aHVudGVyMg" not in line
    event = json.loads(line)
    assert event["name"] == "db" and event["obj"]["data"] == {"password": REDACTED}
