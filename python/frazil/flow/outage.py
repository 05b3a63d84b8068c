"""How long commits have been failing, and when to give up (rule 8). Pure: the caller passes
the clock. One clock per thing that can fail: the worker's cycles, and each table the
coordinator commits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Outage:
    timeout_s: float
    since: float | None = None   # when the first failure of the current outage began

    @property
    def failing(self) -> bool:
        return self.since is not None

    def failed(self, now: float, began: float | None = None) -> float:
        """One more failure; the outage began at ``began`` (default ``now``) unless one is already
        going on. Returns how long it has been failing."""
        if self.since is None:
            self.since = now if began is None else began
        return now - self.since

    def expired(self, now: float) -> bool:
        """Whether the outage has lasted ``timeout_s``: stop, loudly."""
        return self.since is not None and now - self.since >= self.timeout_s

    def ended(self, now: float) -> float | None:
        """A success: the outage (if any) is over. Returns how long it lasted, or None."""
        if self.since is None:
            return None
        lasted, self.since = now - self.since, None
        return lasted

    def seconds(self, now: float) -> float:
        return 0.0 if self.since is None else now - self.since
