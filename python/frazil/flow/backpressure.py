"""Pause and resume decisions from the bytes in use (pure; the pipeline does the I/O).

One budget covers everything ingestion holds in memory: the native buffer plus the batch that is
drained and waiting to be committed. Above the high watermark every assigned partition is paused;
below the low watermark they all resume. Pausing all partitions, not the largest ones: what fills
the budget during an outage is the commit that cannot land, and it holds every partition's
records, so no single partition's pause would bring the total down. Polling (and with it
heartbeats) goes on while paused, so the group does not rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Action(Enum):
    NONE = "none"
    PAUSE = "pause"
    RESUME = "resume"


@dataclass
class Backpressure:
    budget_bytes: int
    high: float = 0.8
    low: float = 0.5
    paused: bool = False
    pauses: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.low < self.high <= 1:
            raise ValueError(f"watermarks need 0 < low < high <= 1, got low={self.low} high={self.high}")

    @property
    def high_bytes(self) -> int:
        return int(self.budget_bytes * self.high)

    @property
    def low_bytes(self) -> int:
        return int(self.budget_bytes * self.low)

    def full(self) -> Action:
        """The buffer refused an append at its hard cap: pause now, whatever the count says."""
        if self.paused:
            return Action.NONE
        self.paused = True
        self.pauses += 1
        return Action.PAUSE

    def update(self, used_bytes: int) -> Action:
        if not self.paused and used_bytes >= self.high_bytes:
            self.paused = True
            self.pauses += 1
            return Action.PAUSE
        if self.paused and used_bytes <= self.low_bytes:
            self.paused = False
            return Action.RESUME
        return Action.NONE
