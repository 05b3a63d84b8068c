"""In-process fakes for unit tests of the ingest loop and the worker: a Kafka source that serves
record batches built by aiokafka's own batch builder and read by the native fetch reader (the same
bytes a broker sends), from positions it moves as a consumer would. No broker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence

from frazil import _native
from frazil.kafka.fetch import Chunk
from frazil_dev.batches import record_batch

TP = tuple[str, int]
Record = tuple[int, int, bytes | None, bytes | None]   # offset, timestamp (ms), key, value


def fetch_of(topic: str, partition: int, records: Sequence[Record]) -> Chunk:
    """``records`` (consecutive offsets) as one partition fetch, read natively."""
    built = record_batch([(offset, ts, key, value, ()) for offset, ts, key, value in records])
    return Chunk(topic, partition, _native.read_fetch(built, fetch_offset=records[0][0], read_committed=True,
                                                      aborted=[]))


def json_records(values: Sequence[dict[str, object] | None], *, first: int = 0) -> list[Record]:
    return [(first + i, 1_700_000_000_000 + i, None, None if v is None else json.dumps(v).encode())
            for i, v in enumerate(values)]


class FakeSource:
    """A consumer-group member that owns every partition of ``logs`` (one generation), positioned
    from the tables as the real source is (``on_assigned`` says where), serving at most
    ``per_fetch`` records per partition per poll."""

    def __init__(self, logs: Mapping[TP, Sequence[Record]], *, per_fetch: int = 50, generation: int = 1) -> None:
        self.logs = {tp: list(records) for tp, records in logs.items()}
        self.per_fetch = per_fetch
        self.generation = generation
        self.assignment: set[TP] = set()
        self.position: dict[TP, int] = {}
        self.paused = False
        self.joined = False
        self.fetched: list[tuple[TP, int, int]] = []   # (partition, first offset, count) of every fetch served
        self.low_watermarks: list[dict[TP, int]] = []
        # the broker's topic ids (kafka/topic_ids.py); None: a broker that gives none
        self.topic_ids: dict[str, str] | None = None
        self._on_assigned: Callable[[set[TP]], Awaitable[Mapping[TP, int]]] | None = None
        self._on_positioned: Callable[[set[TP], Mapping[TP, int]], None] | None = None
        self._on_revoked: Callable[[set[TP]], Awaitable[None]] | None = None

    def listen(self, *, on_assigned: Callable[[set[TP]], Awaitable[Mapping[TP, int]]],
               on_positioned: Callable[[set[TP], Mapping[TP, int]], None],
               on_revoked: Callable[[set[TP]], Awaitable[None]]) -> None:
        self._on_assigned, self._on_positioned, self._on_revoked = on_assigned, on_positioned, on_revoked

    async def start(self) -> None:
        assert self._on_assigned is not None and self._on_positioned is not None
        tps = set(self.logs)
        self.assignment = set(tps)
        stored = await self._on_assigned(tps)
        await self.seek(tps, stored)
        self._on_positioned(tps, stored)
        self.joined = True

    async def stop(self) -> None:
        self.joined = False

    async def seek(self, tps: set[TP], offsets: Mapping[TP, int]) -> None:
        for tp in tps:
            self.position[tp] = offsets.get(tp, self.logs[tp][0][0] if self.logs[tp] else 0)

    def seek_back(self, tp: TP, offset: int) -> None:
        self.position[tp] = offset

    async def poll(self, timeout_ms: int) -> dict[TP, list[Chunk]]:
        out: dict[TP, list[Chunk]] = {}
        if not self.paused:
            for tp in sorted(self.assignment):
                log = self.logs[tp]
                first = log[0][0] if log else 0
                records = log[self.position[tp] - first:self.position[tp] - first + self.per_fetch]
                if records:
                    out[tp] = [fetch_of(tp[0], tp[1], records)]
                    self.fetched.append((tp, records[0][0], len(records)))
                    self.position[tp] = records[-1][0] + 1
        if not out:
            await asyncio.sleep(min(timeout_ms, 20) / 1000)
        return out

    def highwaters(self) -> dict[TP, int]:
        return {tp: (log[-1][0] + 1 if log else 0) for tp, log in self.logs.items() if tp in self.assignment}

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def settled_assignment(self) -> set[TP]:
        return set(self.assignment)

    async def commit_low_watermark(self, offsets: Mapping[TP, int]) -> None:
        self.low_watermarks.append(dict(offsets))

    async def read_topic_ids(self, topics: set[str]) -> dict[str, str] | None:
        return None if self.topic_ids is None else {t: i for t, i in self.topic_ids.items() if t in topics}

    def read_to_end(self) -> bool:
        return all(self.position.get(tp, -1) > (log[-1][0] if log else -1) for tp, log in self.logs.items())
