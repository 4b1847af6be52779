"""core/v1 Events recorded by the control plane's own parts (scheduler, admission, controllers).

    correlator   client-go's dedupe and spam filter, pure: same object/reason/message -> count++
    recorder     the async writer: events go through the registry (same path as HTTP), off the caller's path

May import: registry, core.
"""
