"""Config reload: what changed between two configs, and what a reload did (pure parts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodeagent.agent.config.settings import Config, restart_required_changes
from nodeagent.core.wellknown import NODEAGENT_API_VERSION


def changed_keys(old: Config, new: Config) -> list[str]:
    """Top-level keys (camelCase, as in the file) whose effective value differs."""
    return [f.alias or name for name, f in Config.model_fields.items() if getattr(old, name) != getattr(new, name)]


@dataclass
class ReloadResult:
    """The answer to SIGHUP / POST /api/v1/config/reload."""

    ok: bool
    applied: list[str] = field(default_factory=list)  # changed and in effect now
    restart_required: list[str] = field(default_factory=list)  # changed, effective after a restart
    errors: list[str] = field(default_factory=list)  # why the file was rejected (nothing changed)

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": NODEAGENT_API_VERSION, "kind": "ConfigReload", "ok": self.ok,
                "applied": self.applied, "restartRequired": self.restart_required, "errors": self.errors}


def plan(old: Config, new: Config) -> ReloadResult:
    """Split the changes into what a live reload applies and what needs a restart."""
    changed = changed_keys(old, new)
    restart = restart_required_changes(old, new)
    return ReloadResult(ok=True, applied=[k for k in changed if k not in restart], restart_required=restart)
