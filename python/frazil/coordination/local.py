"""The control topic's semantics inside one process: single mode's channel.

In single mode the worker and the coordinator run in the same process and talk through a
``LocalTopic`` exactly as distributed processes talk through the control topic: one ordered log
of events; a send is one transaction (every payload becomes visible at once, or, if it fails
before the end, none does); the worker reads from the end; the coordinator reads from its own
position. Nothing is durable: what must survive a crash is in the transaction log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from frazil import faults
from frazil.coordination.channel import Received
from frazil.events.payloads import Event, Payload

TRIM_AT = 1024   # events every reader has read are dropped once this many are held


class LocalTopic:
    def __init__(self) -> None:
        self._events: list[Event] = []
        self._first = 0                 # the offset of _events[0]
        self._readers: list[LocalChannel] = []
        self._arrived = asyncio.Event()
        self.committed: int | None = None   # the coordinator's position

    @property
    def end(self) -> int:
        return self._first + len(self._events)

    def append(self, events: list[Event]) -> None:
        self._events.extend(events)
        arrived, self._arrived = self._arrived, asyncio.Event()
        arrived.set()
        if len(self._events) >= TRIM_AT and self._readers:
            keep = min(r.position for r in self._readers)
            del self._events[:max(0, keep - self._first)]
            self._first = max(self._first, keep)

    def read(self, position: int) -> list[Received]:
        start = max(position, self._first)
        return [Received(e, start + i) for i, e in enumerate(self._events[start - self._first:])]

    async def wait(self, position: int, timeout_s: float) -> None:
        """Until an event at or past ``position`` exists, or ``timeout_s`` passed."""
        if self.end > position or timeout_s <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._arrived.wait(), timeout_s)


class LocalChannel:
    """One member's end of a ``LocalTopic``; the same calls as ``ControlChannel``."""

    def __init__(self, topic: LocalTopic, *, group: str, member: str, coordinator: bool = False) -> None:
        self._topic, self._group, self._member, self._coordinator = topic, group, member, coordinator
        self.position = topic.end

    async def start(self) -> None:
        if self._coordinator:
            self.position = self._topic.committed if self._topic.committed is not None else self._topic._first
        else:
            self.position = self._topic.end
        self._topic._readers.append(self)

    async def stop(self) -> None:
        if self in self._topic._readers:
            self._topic._readers.remove(self)

    async def send(self, payloads: list[Payload], *, fault_point: str | None = None) -> None:
        now = int(time.time() * 1000)
        events = [Event(self._group, self._member, now, payload=p) for p in payloads]
        if fault_point is not None:
            faults.hit(fault_point)   # inside the "transaction": a failure here makes none of it visible
        self._topic.append(events)

    async def poll(self, timeout_ms: int) -> list[Received]:
        await self._topic.wait(self.position, timeout_ms / 1000)
        out = self._topic.read(self.position)
        self.position = self._topic.end
        return out

    async def caught_up(self) -> bool:
        return self.position >= self._topic.end

    async def commit_position(self, offset: int) -> None:
        assert self._coordinator, "only the coordinator keeps a position"
        self._topic.committed = offset

    async def reset_producer(self) -> None:
        """Nothing to reset: an in-process send cannot be left half done."""
