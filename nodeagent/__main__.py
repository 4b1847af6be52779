"""`python -m nodeagent`: the same as the `nodeagent` command."""

from nodeagent.cli import main

raise SystemExit(main())
