"""`python -m nodeagent`: the same as the `nodeagent` command."""

from nodeagent.cli.main import main

raise SystemExit(main())
