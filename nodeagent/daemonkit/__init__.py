"""What every nodeagent daemon is built from, whichever it is (agent or control plane).

configfile (strict YAML config files, shared field types, ConfigError), body (request bodies:
JSON or YAML, hostile input refused), status (Kubernetes Status errors and the middleware that
answers every failure with one), auth (bearer tokens, client certificates, the Unix socket,
loopback rules, TLS), sdnotify (systemd readiness and watchdog), logsetup (structlog).

May import: core.
"""
