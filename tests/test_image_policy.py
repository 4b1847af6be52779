"""Pull policy defaulting and decisions, the image pull back-off, and the states failures show."""

from __future__ import annotations

import pytest

from nodeagent.agent.images import errors as E
from nodeagent.agent.images.backoff import PullBackoff, backoff_delay, backoff_key
from nodeagent.agent.images.policy import Decision, decide, default_pull_policy, resolve_pull_policy
from nodeagent.agent.images.reference import parse_reference
from nodeagent.core.clock import FakeClock
from nodeagent.core.errors import FieldError

D = "sha256:" + "b" * 64


@pytest.mark.parametrize("image, policy", [
    ("busybox", "Always"),  # no tag: :latest
    ("busybox:latest", "Always"),
    ("busybox:1.36", "IfNotPresent"),
    (f"busybox@{D}", "IfNotPresent"),  # a digest, no tag
    (f"busybox:latest@{D}", "Always"),  # the tag is latest (Kubernetes looks at the tag only)
    ("127.0.0.1:5000/app:v2", "IfNotPresent"),
])
def test_default_policy(image: str, policy: str) -> None:
    assert default_pull_policy(parse_reference(image)) == policy
    assert resolve_pull_policy(None, parse_reference(image)) == policy
    assert resolve_pull_policy("", parse_reference(image)) == policy


def test_explicit_policy_kept_and_bad_one_named() -> None:
    ref = parse_reference("busybox")
    assert resolve_pull_policy("Never", ref) == "Never"
    with pytest.raises(FieldError) as info:
        resolve_pull_policy("Sometimes", ref, "spec.containers[0].imagePullPolicy")
    assert info.value.path == "spec.containers[0].imagePullPolicy"
    assert 'Unsupported value: "Sometimes"' in info.value.message


@pytest.mark.parametrize("policy, present, decision", [
    ("Always", True, Decision.PULL),
    ("Always", False, Decision.PULL),
    ("IfNotPresent", True, Decision.USE_PRESENT),
    ("IfNotPresent", False, Decision.PULL),
    ("Never", True, Decision.USE_PRESENT),
    ("Never", False, Decision.NEVER_PULL),
])
def test_decide(policy: str, present: bool, decision: Decision) -> None:
    assert decide(policy, present) is decision  # type: ignore[arg-type]


@pytest.mark.parametrize("failures, delay", [(0, 0), (1, 10), (2, 20), (3, 40), (4, 80), (5, 160), (6, 300),
                                             (7, 300), (1000, 300)])
def test_backoff_delays(failures: int, delay: float) -> None:
    assert backoff_delay(failures) == delay


def test_backoff_runs_on_the_clock() -> None:
    clock = FakeClock()
    b = PullBackoff(clock)
    key = backoff_key("uid-1", "busybox")
    assert not b.in_backoff(key)
    assert b.failed(key) == 10
    assert b.in_backoff(key) and b.remaining(key) == 10
    clock.advance(9.5)
    assert b.in_backoff(key)
    clock.advance(0.5)
    assert not b.in_backoff(key)  # the next attempt may pull
    assert b.failed(key) == 20
    clock.advance(19)
    assert b.in_backoff(key)
    for want in (40, 80, 160, 300, 300):
        clock.advance(b.remaining(key))
        assert b.failed(key) == want
    assert b.delay(key) == 300
    # keys are independent
    assert not b.in_backoff(backoff_key("uid-2", "busybox"))


def test_backoff_expires_after_twice_the_maximum_and_success_forgets() -> None:
    clock = FakeClock()
    b = PullBackoff(clock)
    b.failed("k")
    b.failed("k")
    assert b.delay("k") == 20
    clock.advance(601)
    assert b.delay("k") == 0
    assert b.failed("k") == 10  # the curve starts again
    b.succeeded("k")
    assert not b.in_backoff("k") and b.delay("k") == 0
    b.failed("gone")
    clock.advance(601)
    b.gc()
    assert b._entries == {}


def test_backoff_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        PullBackoff(FakeClock(), initial=0)
    with pytest.raises(ValueError):
        PullBackoff(FakeClock(), initial=20, maximum=10)


def test_waiting_states() -> None:
    image = "reg.example/app:1"
    pull = E.ImageNotFound("reading manifest 1 in reg.example/app: manifest unknown")
    assert E.waiting_for(image, pull) == E.Waiting("ErrImagePull", pull.message)
    backoff = E.waiting_for(image, pull, in_backoff=True)
    assert backoff.reason == "ImagePullBackOff"
    assert backoff.message == f'Back-off pulling image "{image}": ErrImagePull: {pull.message}'
    invalid = E.InvalidImageName(E.invalid_name_message("Bad", "couldn't parse image name"))
    assert E.waiting_for("Bad", invalid, in_backoff=True).reason == "InvalidImageName"
    never = E.NeverPull(E.never_pull_message(image))
    assert E.waiting_for(image, never) == E.Waiting(
        "ErrImageNeverPull", f'Container image "{image}" is not present with pull policy of Never')
    for cls in (E.Unauthorized, E.RegistryUnavailable, E.DigestMismatch, E.BadLayer, E.NoSpace):
        assert cls("x").reason == "ErrImagePull"


@pytest.mark.parametrize("seconds, text", [(0.85, "850ms"), (1.0, "1s"), (1.2345, "1.234s"), (59.5, "59.5s"),
                                           (123.5, "2m3.5s"), (120.0, "2m0s")])
def test_go_durations_in_messages(seconds: float, text: str) -> None:
    assert E.format_seconds(seconds) == text


def test_pulled_message() -> None:
    assert E.pulled_message("busybox", 1.5, 2.0, 1234) == (
        'Successfully pulled image "busybox" in 1.5s (2s including waiting). Image size: 1234 bytes.')
