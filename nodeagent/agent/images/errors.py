"""What can go wrong with an image, and the container state and event each one shows (pure).

Every failure is an ImageError with the kubelet's container-state reason, so a pod worker turns
it into `state.waiting` without knowing the cause:

    InvalidImageName    the reference does not parse (event InspectFailed); no pull is tried
    ErrImageNeverPull   absent under imagePullPolicy Never (event ErrImageNeverPull)
    ErrImagePull        a pull failed: unknown image, denied, registry down or too slow, a blob that
                        does not match its digest, a malformed or hostile layer, no room (event Failed)
    ImagePullBackOff    a later attempt while the back-off of the last ErrImagePull runs (event BackOff)

The message wording is the kubelet's (pkg/kubelet/images), so operators can search for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.core.names import quote

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
INVALID_IMAGE_NAME = "InvalidImageName"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"

EVENT_PULLING = "Pulling"
EVENT_PULLED = "Pulled"
EVENT_FAILED = "Failed"
EVENT_BACKOFF = "BackOff"
EVENT_INSPECT_FAILED = "InspectFailed"


class ImageError(Exception):
    """An image could not be made available; `reason` is the container state's waiting reason."""

    reason = ERR_IMAGE_PULL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidImageName(ImageError):
    reason = INVALID_IMAGE_NAME


class NeverPull(ImageError):
    reason = ERR_IMAGE_NEVER_PULL


class PullFailed(ImageError):
    """Any failed pull or import; subclasses say why, for tests and logs."""


class ImageNotFound(PullFailed):
    """The registry has no such repository, tag or digest (or the layout/archive has not)."""


class Unauthorized(PullFailed):
    """The registry refused the credentials, or asked for some and there were none."""


class RegistryUnavailable(PullFailed):
    """Connection refused, TLS refused, or the registry did not answer in time."""


class DigestMismatch(PullFailed):
    """A blob's content does not hash to the digest its descriptor names (a lying registry or a
    damaged store)."""


class BadLayer(PullFailed):
    """A layer that is not a tar, or one that tries to leave its directory, make devices, ..."""


class NoSpace(PullFailed):
    """The image does not fit on imagefs (after image garbage collection)."""


class InUse(Exception):
    """Removal refused: containers hold a lease on the image."""

    def __init__(self, image: str, holders: list[str]) -> None:
        super().__init__(f"image {image} is in use by {', '.join(holders)}")
        self.image = image
        self.holders = holders


class NotPresent(LookupError):
    """No image in the store matches the reference or id."""


@dataclass(frozen=True)
class Waiting:
    """A container's `state.waiting` (reason, message) while its image is not there."""

    reason: str
    message: str


def invalid_name_message(image: str, detail: str) -> str:
    return f"Failed to apply default image tag {quote(image)}: {detail}"


def never_pull_message(image: str) -> str:
    return f"Container image {quote(image)} is not present with pull policy of Never"


def failed_event_message(image: str, error: ImageError) -> str:
    return f"Failed to pull image {quote(image)}: {error.message}"


def backoff_message(image: str) -> str:
    return f"Back-off pulling image {quote(image)}"


def pulled_message(image: str, seconds: float, total_seconds: float, size: int) -> str:
    return (f"Successfully pulled image {quote(image)} in {format_seconds(seconds)} "
            f"({format_seconds(total_seconds)} including waiting). Image size: {size} bytes.")


def present_message(image: str) -> str:
    return f"Container image {quote(image)} already present on machine"


def format_seconds(seconds: float) -> str:
    """Go's time.Duration String for the event messages: 1.234s, 850ms, 2m3.5s."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3f}".rstrip("0").rstrip(".") + "s"


def waiting_for(image: str, error: ImageError, in_backoff: bool = False) -> Waiting:
    """The container's waiting state for this failure; in back-off, ImagePullBackOff with the
    error that caused it, as current kubelets show it."""
    if isinstance(error, (InvalidImageName, NeverPull)):
        return Waiting(error.reason, error.message)
    if in_backoff:
        return Waiting(IMAGE_PULL_BACKOFF, f"{backoff_message(image)}: {ERR_IMAGE_PULL}: {error.message}")
    return Waiting(ERR_IMAGE_PULL, error.message)


__all__ = [
    "ERR_IMAGE_NEVER_PULL", "ERR_IMAGE_PULL", "IMAGE_PULL_BACKOFF", "INVALID_IMAGE_NAME",
    "BadLayer", "DigestMismatch", "ImageError", "ImageNotFound", "InUse", "InvalidImageName",
    "NeverPull", "NoSpace", "NotPresent", "PullFailed", "RegistryUnavailable", "Unauthorized",
    "Waiting", "waiting_for",
]
