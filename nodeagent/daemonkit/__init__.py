"""What every nodeagent daemon is built from, whichever it is (agent or control plane).

configfile (strict YAML config files, shared field types, ConfigError), body (request bodies:
JSON or YAML, hostile input refused), protowire (the protobuf wire format, read, and the
Kubernetes envelope's magic and media type), yamlerrors (one wording for a YAML parse failure), status
(Kubernetes Status errors, the Invalid status, and the middleware that answers every failure with
one), auth (bearer tokens, client certificates, the Unix socket, loopback rules, TLS), tasks
(guarded background tasks), progress (what "making progress" means for each component: heartbeats,
bounded steps, the monitor the watchdog asks), sdnotify (systemd readiness and watchdog), logsetup
(structlog), heap (the start-up heap frozen out of the cyclic collector's reach).

May import: core.
"""
