"""The OCI bundle builder and the runtime's choice (pure): Kubernetes' command/args rule, env
merging, user resolution, resources, config.json, runc vs crun."""

from __future__ import annotations

import pytest

from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.runtime.oci.bundle import (
    DEFAULT_PATH,
    ContainerBundle,
    Mount,
    bind,
    combine_command,
    config_json,
    expand_command,
    merge_env,
    oci_resources,
    resolve_user,
)
from nodeagent.agent.runtime.oci.runtime import cgroups_path, container_id, is_runtime_process
from nodeagent.agent.runtime.oci.select import choose_runtime, is_hybrid
from nodeagent.core.errors import FieldError

EP = ["/entry"]
CMD = ["serve", "--port=80"]


@pytest.mark.parametrize("command,args,entrypoint,cmd,want", [
    ([], [], EP, CMD, ("/entry", "serve", "--port=80")),        # the image's own
    ([], ["x"], EP, CMD, ("/entry", "x")),                        # args replace Cmd, Entrypoint kept
    (["/bin/sh"], [], EP, CMD, ("/bin/sh",)),                     # command drops Cmd too
    (["/bin/sh"], ["-c", "true"], EP, CMD, ("/bin/sh", "-c", "true")),
    ([], [], [], CMD, ("serve", "--port=80")),                    # Cmd alone
    ([], ["/bin/true"], [], CMD, ("/bin/true",)),                 # args alone with no Entrypoint
])
def test_combine_command_follows_kubernetes(command, args, entrypoint, cmd, want):
    assert combine_command(command, args, entrypoint, cmd) == want


@pytest.mark.parametrize("command,args,entrypoint,cmd", [([], [], [], []), ([""], [], [], []), (["a\0b"], [], [], [])])
def test_combine_command_refuses_nothing_to_run(command, args, entrypoint, cmd):
    with pytest.raises(FieldError) as e:
        combine_command(command, args, entrypoint, cmd)
    assert e.value.path.startswith("command")


def test_expand_command_uses_the_containers_env_only():
    assert expand_command(["echo", "$(A)"], ["$(B)", "$$(A)"], {"A": "1"}) == (["echo", "1"], ["$(B)", "$(A)"])


@pytest.mark.parametrize("image_env,own,want", [
    ([], [], (f"PATH={DEFAULT_PATH}",)),
    (["PATH=/img/bin", "A=1"], [], ("PATH=/img/bin", "A=1")),
    (["A=1", "B=2"], [("B", "x"), ("C", "$(B)-y")], ("A=1", "B=x", "C=x-y", f"PATH={DEFAULT_PATH}")),
    (["A=1"], [("C", "$(A)")], ("A=1", "C=$(A)", f"PATH={DEFAULT_PATH}")),  # image vars are not expanded into
    (["junk", "=v", "A=a=b"], [], ("A=a=b", f"PATH={DEFAULT_PATH}")),
])
def test_merge_env(image_env, own, want):
    assert merge_env(image_env, own)[0] == want


def test_merge_env_refuses_bad_names():
    with pytest.raises(FieldError):
        merge_env([], [("A=B", "1")])


PASSWD = "root:x:0:0:root:/root:/bin/sh\nwww:x:33:44:www:/var/www:/bin/sh\n# comment\nbad:x:notanumber:1::/:\n"
GROUP = "root:x:0:\nstaff:x:50:\n"


@pytest.mark.parametrize("uid,gid,image_user,want", [
    (None, None, "", (0, 0)),
    (None, None, "1000", (1000, 0)),               # unknown uid: group 0
    (None, None, "33", (33, 44)),                  # primary group from the image's passwd
    (None, None, "www", (33, 44)),
    (None, None, "www:staff", (33, 50)),
    (None, None, "1000:7", (1000, 7)),
    (2000, None, "www", (2000, 0)),                # runAsUser wins over the image's User
    (33, None, "", (33, 44)),
    (None, 9, "www", (33, 9)),                     # runAsGroup over the user's primary group
    (5, 6, "www:staff", (5, 6)),
])
def test_resolve_user(uid, gid, image_user, want):
    assert resolve_user(uid, gid, image_user, PASSWD, GROUP) == want


@pytest.mark.parametrize("image_user", ["nobody", "www:nogroup", "bad"])
def test_resolve_user_unknown_names_are_config_errors(image_user):
    with pytest.raises(FieldError) as e:
        resolve_user(None, None, image_user, PASSWD, GROUP)
    assert e.value.path == "image.config.User"


def test_oci_resources_carry_the_container_limits():
    spec = CgroupSpec(cpu_shares=512, cpu_quota_us=50000, cpu_period_us=100000, memory_max=64 << 20, pids_max=100)
    r = oci_resources(spec)
    assert r["cpu"] == {"shares": 512, "quota": 50000, "period": 100000}
    assert r["memory"] == {"limit": 64 << 20}
    assert r["pids"] == {"limit": 100}
    assert "memory" not in oci_resources(CgroupSpec(cpu_shares=2))
    assert oci_resources(CgroupSpec(cpu_shares=2))["cpu"] == {"shares": 2}


def _bundle(**kw):
    base = dict(argv=("/bin/sh",), env=("PATH=/bin",), cwd="/", uid=0, gid=0, hostname="web",
                cgroups_path="/kubepods/podu/app/oci", resources=CgroupSpec(memory_max=1 << 26),
                oom_score_adj=-997, sandbox_pid=42)
    base.update(kw)
    return ContainerBundle(**base)


def test_config_json_joins_the_sandbox_namespaces_and_keeps_the_cgroup():
    c = config_json(_bundle(mounts=(bind("/host/data", "/data", read_only=True),)))
    ns = {n["type"]: n.get("path") for n in c["linux"]["namespaces"]}
    assert ns == {"pid": None, "mount": None, "cgroup": None, "ipc": "/proc/42/ns/ipc", "uts": "/proc/42/ns/uts"}
    assert "network" not in ns
    assert c["linux"]["cgroupsPath"] == "/kubepods/podu/app/oci"
    assert c["linux"]["resources"]["memory"] == {"limit": 1 << 26}
    assert c["process"]["oomScoreAdj"] == -997
    assert c["process"]["user"] == {"uid": 0, "gid": 0}
    assert c["hostname"] == "web"
    assert c["mounts"][-1] == {"destination": "/data", "type": "bind", "source": "/host/data",
                               "options": ["rbind", "rprivate", "ro"]}
    assert c["root"] == {"path": "rootfs", "readonly": False}


def test_config_json_without_sandbox_has_private_namespaces():
    ns = config_json(_bundle(sandbox_pid=None))["linux"]["namespaces"]
    assert {"type": "ipc"} in ns and {"type": "uts"} in ns


@pytest.mark.parametrize("kw,path", [
    (dict(cwd="relative"), "workingDir"),
    (dict(oom_score_adj=1001), "oom_score_adj"),
    (dict(mounts=(Mount("data", "/x"),)), "volumeMounts.mountPath"),
    (dict(mounts=(Mount("/a/../etc", "/x"),)), "volumeMounts.mountPath"),
])
def test_config_json_refuses_bad_values(kw, path):
    with pytest.raises(FieldError) as e:
        config_json(_bundle(**kw))
    assert e.value.path == path


def test_ids_and_cgroup_paths():
    assert container_id("0b1c-22", "app") == "0b1c-22-app"
    assert cgroups_path("/", "kubepods/burstable/podu/app") == "/kubepods/burstable/podu/app/oci"
    assert cgroups_path("/it-root/", "kubepods/podu/app") == "/it-root/kubepods/podu/app/oci"


BOTH = {"runc": "/usr/sbin/runc", "crun": "/usr/bin/crun"}


@pytest.mark.parametrize("requested,found,hybrid,want", [
    ("auto", BOTH, True, "runc"),
    ("auto", BOTH, False, "runc"),
    ("auto", {"crun": "/c"}, False, "crun"),
    ("auto", {"crun": "/c"}, True, None),       # crun refuses hybrid: nothing usable
    ("auto", {}, False, None),
    ("none", BOTH, False, None),
    ("crun", BOTH, False, "crun"),
    ("runc", BOTH, True, "runc"),
])
def test_choose_runtime(requested, found, hybrid, want):
    assert choose_runtime(requested, found, hybrid=hybrid) == want


@pytest.mark.parametrize("requested,found,hybrid,words", [
    ("crun", BOTH, True, "hybrid"),
    ("runc", {"crun": "/c"}, False, "not installed"),
    ("docker", BOTH, False, "Unsupported value"),
])
def test_choose_runtime_refusals_name_the_key(requested, found, hybrid, words):
    with pytest.raises(FieldError) as e:
        choose_runtime(requested, found, hybrid=hybrid)
    assert e.value.path == "ociRuntime" and words in str(e.value)


def test_is_hybrid(tmp_path):
    f = tmp_path / "cgroup.controllers"
    f.write_text("hugetlb\n")
    assert is_hybrid(1, str(f))
    assert not is_hybrid(2, str(f))
    f.write_text("\n")
    assert not is_hybrid(1, str(f))
    assert not is_hybrid(1, str(tmp_path / "absent"))


@pytest.mark.parametrize(("comm", "exe", "runtime"), [
    ("runc:[2:INIT]", "/usr/sbin/runc", True),
    ("runc:[1:CHILD]", "/memfd:runc_cloned:/proc/self/exe (deleted)", True),
    ("exe", "/memfd:runc_cloned:/proc/self/exe (deleted)", True),  # re-exec'd, not yet renamed
    ("5", "/usr/sbin/runc", True),
    ("crun", "/usr/bin/crun", True),
    ("sh", "/bin/busybox", False),
    ("sleep", "/bin/sleep", False),
    ("exe", "/opt/app/exe", False),
])
def test_is_runtime_process(comm: str, exe: str, runtime: bool) -> None:
    """Running is reported once the container's own process is in its cgroup, not runc's init."""
    assert is_runtime_process(comm, exe) is runtime
