"""The `nodeagent` command: main (argparse, run and check-config), client_commands (status, pods,
apply, delete, logs, events against a running agent), client (its small HTTP client), render
(tables for people, pure), server_commands (`nodeagent scheduler|server run|check-config`).

May import: everything below it; the daemons are imported only by the verbs that run them.
"""
