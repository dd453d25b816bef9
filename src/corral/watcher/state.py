"""What the watcher remembers from one run to the next (``watcher.state.json``).

Per instance, the restart attempts since it was last seen running and when the last
one was made (the limit and back-off); per node, the boot id it had, so that a node
that rebooted since is noticed. Losing the file is harmless, as with Ganeti's: the
counters start again from zero and every node counts as freshly booted.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.utils.files import write_private

__all__ = ["Attempts", "WatcherState"]


@dataclass
class Attempts:
    """Restart attempts of one instance since it last ran: how many, the last when."""

    count: int = 0
    last: float = 0.0


@dataclass
class WatcherState:
    """The watcher's memory: restart attempts by instance, boot ids by node."""

    instances: dict[str, Attempts] = field(default_factory=dict)
    boot_ids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> WatcherState:
        """The state kept at ``path``; an empty one when it is missing or unreadable."""
        try:
            data: Any = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls()
        state = cls()
        if not isinstance(data, dict):
            return state
        for name, entry in (data.get("instances") or {}).items():
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                state.instances[str(name)] = Attempts(int(entry["count"]),
                                                      float(entry["last"]))
        for name, boot_id in (data.get("boot_ids") or {}).items():
            if isinstance(boot_id, str):
                state.boot_ids[str(name)] = boot_id
        return state

    def save(self, path: Path) -> None:
        """Write the state atomically."""
        data = {"instances": {name: {"count": a.count, "last": a.last}
                              for name, a in sorted(self.instances.items())},
                "boot_ids": dict(sorted(self.boot_ids.items()))}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, json.dumps(data, indent=1) + "\n", 0o600)

    def attempts(self, name: str) -> Attempts:
        """The attempts recorded for instance ``name`` (none yet: zero)."""
        return self.instances.get(name, Attempts())

    def record_attempt(self, name: str, when: float) -> Attempts:
        """Count one more restart attempt of ``name`` made at ``when``."""
        attempts = self.instances.setdefault(name, Attempts())
        attempts.count += 1
        attempts.last = when
        return attempts

    def forget(self, name: str) -> None:
        """``name`` runs again (or is gone): its counter starts from zero."""
        self.instances.pop(name, None)
