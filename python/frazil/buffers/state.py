"""The buffers shared by the ingest loop (which fills them) and the worker (which drains them)."""

from __future__ import annotations

import asyncio

from frazil.buffers.positions import Positions
from frazil.buffers.targets import Targets


class Buffers:
    """Every table's buffer, the partitions' positions, the newest record time taken, and the
    lock: held by the loop while it appends a poll's records (its appends await: opening a table,
    asking the schema registry, changing a schema) and by the worker while it takes or drops what
    is buffered, so a batch is never taken between a buffer's append and the positions that count
    its records."""

    def __init__(self, targets: Targets) -> None:
        self.targets = targets
        self.positions = Positions()
        self.lock = asyncio.Lock()
        self.last_record_ms: int | None = None   # the newest record timestamp taken (VTTS)

    def took_until(self, timestamp_ms: int) -> None:
        self.last_record_ms = max(self.last_record_ms or 0, timestamp_ms)

    def drop(self) -> None:
        """Forget every buffered row; every partition takes nothing until positioned again. Call
        with :attr:`lock` held."""
        self.targets.clear()
        self.positions.forget()

    @property
    def rows(self) -> int:
        return self.targets.rows

    @property
    def bytes(self) -> int:
        return self.targets.bytes
