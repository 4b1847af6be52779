"""Static pod directory scanning on a real temp dir: add, change, remove, broken files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from structlog.testing import capture_logs

from nodeagent.agent.node.static_pods import (
    HASH_ANNOTATION,
    SOURCE_ANNOTATION,
    StaticPodSource,
    static_defaults,
)
from nodeagent.core.qos import is_critical, is_static

WEB = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "3600"]
    resources:
      limits: {memory: 64Mi}
"""


def pod_json(name: str, ns: str = "kube-system") -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "namespace": ns},
                       "spec": {"containers": [{"name": "c", "command": ["true"]}]}})


@pytest.fixture
def src(tmp_path: Path) -> StaticPodSource:
    return StaticPodSource(tmp_path, "Node-A")


def names(pods: list) -> list[str]:  # type: ignore[type-arg]
    return sorted(p.pod.metadata.name for p in pods)


def test_add_and_kubelet_style_defaults(src: StaticPodSource, tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text(WEB)
    (tmp_path / "db.json").write_text(pod_json("db"))
    diff = src.scan()
    assert names(diff.added) == ["db-node-a", "web-node-a"]
    assert diff.changed == diff.removed == diff.errors == []
    web = src.pods[("default", "web-node-a")]
    meta = web.pod.metadata
    assert meta.annotations[SOURCE_ANNOTATION] == "file"
    assert meta.annotations[HASH_ANNOTATION] == web.hash == meta.uid
    assert len(web.hash) == 32 and meta.labels == {"app": "web"}
    assert web.pod.spec.node_name == "node-a"
    assert any(t.operator == "Exists" and t.effect == "NoExecute"
               for t in web.pod.spec.tolerations)
    assert web.pod.spec.containers[0].requests["memory"] == web.pod.spec.containers[0].limits[
        "memory"]  # parse_pod defaulting applied
    assert is_static(web.pod) and is_critical(web.pod)
    assert src.pods[("kube-system", "db-node-a")].path == tmp_path / "db.json"
    assert src.scan().empty  # nothing changed on disk


def test_change_remove_and_cosmetic_edit(src: StaticPodSource, tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text(WEB)
    (tmp_path / "db.json").write_text(pod_json("db"))
    first = src.scan()
    old_hash = src.pods[("default", "web-node-a")].hash
    # reformatting and comments: same content, no restart
    (tmp_path / "web.yaml").write_text("# managed by ops\n" + yaml.safe_dump(yaml.safe_load(WEB)))
    assert src.scan().empty
    # a real change
    (tmp_path / "web.yaml").write_text(WEB.replace("3600", "60"))
    diff = src.scan()
    assert names(diff.changed) == ["web-node-a"] and not diff.added and not diff.removed
    new = diff.changed[0]
    assert new.hash != old_hash and new.pod.metadata.uid == new.hash
    assert new.pod.spec.containers[0].command == ["sleep", "60"]
    (tmp_path / "db.json").unlink()
    diff = src.scan()
    assert names(diff.removed) == ["db-node-a"] and not diff.added and not diff.changed
    assert len(first.added) == 2


def test_broken_files_next_to_good_ones(src: StaticPodSource, tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(WEB)
    (tmp_path / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: [oops\n")
    (tmp_path / "invalid.yml").write_text(WEB.replace("name: app", "name: Bad_Name"))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "noname.json").write_text(json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {},
         "spec": {"containers": [{"name": "c", "command": ["x"]}]}}))
    with capture_logs() as logs:
        diff = src.scan()
    assert names(diff.added) == ["web-node-a"]
    by_file = {e.path.name: e for e in diff.errors}
    assert set(by_file) == {"broken.yaml", "invalid.yml", "list.json", "noname.json"}
    assert by_file["broken.yaml"].field == "" and "line 4" in by_file["broken.yaml"].message
    assert by_file["invalid.yml"].field == "spec.containers[0].name"
    assert "Bad_Name" in by_file["invalid.yml"].message
    assert by_file["list.json"].field == "" and "list" in by_file["list.json"].message
    assert by_file["noname.json"].field == "metadata.name"
    assert str(by_file["invalid.yml"]).startswith(str(tmp_path / "invalid.yml") + ": spec.")
    assert sum(e["event"] == "static_pod_invalid" for e in logs) == 4
    with capture_logs() as logs:
        again = src.scan()  # still broken: still reported, but logged only once
    assert again.empty and len(again.errors) == 4 and logs == []


def test_broken_edit_keeps_last_good_pod(src: StaticPodSource, tmp_path: Path) -> None:
    f = tmp_path / "web.yaml"
    f.write_text(WEB)
    src.scan()
    good_hash = src.pods[("default", "web-node-a")].hash
    f.write_text(WEB[:40])  # an editor's half-written save
    diff = src.scan()
    assert diff.empty and diff.errors and diff.errors[0].path == f
    assert src.pods[("default", "web-node-a")].hash == good_hash
    assert src.scan().errors  # unchanged broken file stays reported
    f.write_text(WEB)
    diff = src.scan()
    assert diff.empty and diff.errors == []
    f.write_text(WEB[:40])
    src.scan()
    f.unlink()  # deleting the broken file does remove the pod
    assert names(src.scan().removed) == ["web-node-a"]


def test_ignored_files_and_duplicates(src: StaticPodSource, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(WEB)
    (tmp_path / "b.yml").write_text(WEB)  # same pod name
    (tmp_path / ".web.yaml.swp").write_text(WEB)
    (tmp_path / ".hidden.yaml").write_text(WEB.replace("web", "hidden"))
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / "sub.yaml").mkdir()
    diff = src.scan()
    assert names(diff.added) == ["web-node-a"]
    assert src.pods[("default", "web-node-a")].path == tmp_path / "a.yaml"
    assert [(e.path.name, e.field) for e in diff.errors] == [("b.yml", "metadata.name")]
    assert "already defined in" in diff.errors[0].message


def test_missing_directory_means_no_pods(tmp_path: Path) -> None:
    src = StaticPodSource(tmp_path / "nope", "n1")
    assert src.scan().empty and src.scan().errors == []


def test_hash_depends_on_node_and_content_only() -> None:
    doc = yaml.safe_load(WEB)
    m1, h1 = static_defaults(doc, "n1")
    _, h2 = static_defaults(doc, "n2")
    _, h3 = static_defaults({**doc, "spec": {**doc["spec"], "priority": 5}}, "n1")
    assert len({h1, h2, h3}) == 3
    assert static_defaults(doc, "n1")[1] == h1
    assert doc["metadata"]["name"] == "web" and "annotations" not in doc["metadata"]  # no mutation
    assert m1["metadata"]["uid"] == h1
    explicit = {**doc, "metadata": {**doc["metadata"], "uid": "my-uid"}}
    assert static_defaults(explicit, "n1")[0]["metadata"]["uid"] == "my-uid"
