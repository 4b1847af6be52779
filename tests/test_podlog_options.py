"""pods/log's pure part (cluster/apiserver/podlog.py): PodLogOptions from the query with kube's
validation, the container as kube-apiserver's LogLocation chooses it, the agent's query."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import MultiDict

from nodeagent.cluster.apiserver.podlog import LogOptions, agent_query, choose_container, log_options, waiting_reason
from nodeagent.cluster.registry.errors import StatusError


def pod(*apps: str, inits: tuple[str, ...] = (), ephemeral: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": n} for n in apps]}
    if inits:
        spec["initContainers"] = [{"name": n} for n in inits]
    if ephemeral:
        spec["ephemeralContainers"] = [{"name": n} for n in ephemeral]
    return {"metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize(("query", "expected"), [
    ({}, LogOptions()),
    ({"container": "c", "follow": "true", "previous": "1", "timestamps": "yes"},
     LogOptions(container="c", follow=True, previous=True, timestamps=True)),
    ({"follow": "false", "previous": "0", "timestamps": "no"}, LogOptions()),  # apimachinery's false spellings
    ({"follow": "F", "previous": "N"}, LogOptions()),
    ({"tailLines": "0", "limitBytes": "1", "sinceSeconds": "1"}, LogOptions(tail_lines=0, limit_bytes=1, since_seconds=1)),
    ({"sinceTime": "2026-12-06T10:00:00Z"}, LogOptions(since_time="2026-12-06T10:00:00Z")),
    ({"tailLines": ""}, LogOptions()),
])
def test_log_options(query: dict[str, str], expected: LogOptions) -> None:
    assert log_options(MultiDict(query), "p") == expected


@pytest.mark.parametrize(("query", "code", "message"), [
    ({"tailLines": "-1"}, 422, 'PodLogOptions "p" is invalid: tailLines: Invalid value: -1: must be greater than or '
                               "equal to 0"),
    ({"limitBytes": "0"}, 422, 'PodLogOptions "p" is invalid: limitBytes: Invalid value: 0: must be greater than 0'),
    ({"sinceSeconds": "0"}, 422, 'PodLogOptions "p" is invalid: sinceSeconds: Invalid value: 0: must be greater '
                                 "than 0"),
    ({"sinceSeconds": "5", "sinceTime": "2026-12-06T10:00:00Z"}, 422,
     'PodLogOptions "p" is invalid: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified'),
    ({"tailLines": "ten"}, 400, 'strconv.ParseInt: parsing "ten": invalid syntax for tailLines'),
    ({"sinceTime": "yesterday"}, 400, 'parsing time "yesterday" as RFC 3339: invalid sinceTime'),
])
def test_log_options_errors(query: dict[str, str], code: int, message: str) -> None:
    with pytest.raises(StatusError) as err:
        log_options(MultiDict(query), "p")
    assert (err.value.code, err.value.message) == (code, message)
    if code == 422:
        assert err.value.status["details"]["kind"] == "PodLogOptions"


@pytest.mark.parametrize(("the_pod", "asked", "chosen"), [
    (pod("only"), "", "only"),
    (pod("a", "b"), "b", "b"),
    (pod("a", inits=("init",)), "", "a"),  # init containers do not count for the default
    (pod("a", "b", inits=("init",)), "init", "init"),
    (pod("a", ephemeral=("debug",)), "debug", "debug"),
])
def test_choose_container(the_pod: dict[str, Any], asked: str, chosen: str) -> None:
    assert choose_container(the_pod, asked) == chosen


@pytest.mark.parametrize(("the_pod", "asked", "message"), [
    (pod("a", "b"), "", "a container name must be specified for pod p, choose one of: [a b]"),
    (pod("a", "b", inits=("i1", "i2")), "",
     "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i1 i2]"),
    (pod(), "", "a container name must be specified for pod p"),
    (pod("a"), "z", "container z is not valid for pod p"),
])
def test_choose_container_errors(the_pod: dict[str, Any], asked: str, message: str) -> None:
    with pytest.raises(StatusError) as err:
        choose_container(the_pod, asked)
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


@pytest.mark.parametrize(("opts", "expected"), [
    (LogOptions(), {"container": "c"}),
    (LogOptions(follow=True, tail_lines=0, limit_bytes=10),
     {"container": "c", "follow": "true", "tailLines": "0", "limitBytes": "10"}),
    (LogOptions(previous=True, timestamps=True, since_seconds=5),
     {"container": "c", "previous": "true", "timestamps": "true", "sinceSeconds": "5"}),
    (LogOptions(since_time="2026-12-06T10:00:00Z"), {"container": "c", "sinceTime": "2026-12-06T10:00:00Z"}),
])
def test_agent_query(opts: LogOptions, expected: dict[str, str]) -> None:
    assert agent_query(opts, "c") == expected


@pytest.mark.parametrize(("status", "reason"), [
    ({}, "ContainerCreating"),
    ({"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}, "ImagePullBackOff"),
    ({"initContainerStatuses": [{"name": "c", "state": {"waiting": {"reason": "PodInitializing"}}}]},
     "PodInitializing"),
    ({"containerStatuses": [{"name": "other", "state": {"waiting": {"reason": "X"}}}]}, "ContainerCreating"),
    ({"containerStatuses": [{"name": "c", "state": {"running": {}}}]}, "ContainerCreating"),
])
def test_waiting_reason(status: dict[str, Any], reason: str) -> None:
    assert waiting_reason({"status": status}, "c") == reason
