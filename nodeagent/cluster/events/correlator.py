"""The event correlator (dedupe with count, spam filter) lives in nodeagent.core.eventcorrelator,
shared with the agents; this name stays for the control plane's callers."""

from nodeagent.core.eventcorrelator import Correlator, event_key, spam_key

__all__ = ["Correlator", "event_key", "spam_key"]
