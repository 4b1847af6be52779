"""The finalizer-removal expectations of the Job loop (tracking_utils.go uidTrackingExpectations):
per Job, the uids of pods whose `batch.kubernetes.io/job-tracking` finalizer removal was sent and
not yet seen in the pod cache. A sync passes them to the core as `expected_removed`, so a pod the
cache still shows with its finalizer is neither counted twice nor patched again. In-memory state
owned by the loop: after a restart the cache is listed first and nothing is expected.
"""

from __future__ import annotations

from collections.abc import Iterable


class FinalizerExpectations:
    def __init__(self) -> None:
        self._uids: dict[str, set[str]] = {}

    def expect_removed(self, job_key: str, uids: Iterable[str]) -> None:
        """expectFinalizersRemoved: added to what is already expected."""
        new = set(uids)
        if new:
            self._uids.setdefault(job_key, set()).update(new)

    def removal_observed(self, job_key: str, uid: str) -> None:
        """finalizerRemovalObserved: the pod was seen without the finalizer, or gone, or the patch failed."""
        got = self._uids.get(job_key)
        if got is not None:
            got.discard(uid)
            if not got:
                del self._uids[job_key]

    def expected(self, job_key: str) -> frozenset[str]:
        return frozenset(self._uids.get(job_key) or ())

    def delete(self, job_key: str) -> None:
        self._uids.pop(job_key, None)
