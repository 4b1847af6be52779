"""The `nodeagent` command: main (argparse; the agent's `run` and `check-config`), client_commands
(status, pods, apply, delete, logs, events against a running agent), image_commands (`image
pull|import|ls|rm` through a running agent), client (their small HTTP client), render (tables for
people, pure), controlplane_commands (`nodeagent server run|kubeconfig|check-config`: the control
plane), server_commands (`nodeagent scheduler run|check-config`: the scheduler), daemons (what
those two share: loading the config, check-config's JSON, running the daemon).

May import: everything below it; the daemons are imported only by the verbs that run them.
"""
