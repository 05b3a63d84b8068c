"""Bad records as a worker fetched them, kept for the dead-letter sink of the same process.

The sink sends each bad record with its own key, value and headers once its commit has landed,
reading it back from the source. One bad record in a hundred is spread over every batch of a
partition, so reading them back re-reads the whole topic. A worker that finds a bad record
already holds its bytes: it keeps a copy here, and the sink of its process (single mode: every
bad record; distributed mode: those of the coordinator's own worker) takes it instead of reading
it back. A record is immutable at its offset, so the copy is the record. Bounded by bytes, the
oldest dropped first: a record not here is read back, as always. Safe to use from several threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from frazil.kafka.fetch import Record

Key = tuple[str, int, int]   # topic, partition, offset

MAX_BYTES = 32 * 1024 * 1024


def _size(record: Record) -> int:
    return (len(record.key or b"") + len(record.value or b"")
            + sum(len(k) + len(v or b"") for k, v in record.headers) + 64)


class SourceCopies:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._max_bytes = max_bytes
        self._held: dict[Key, Record] = {}   # in the order kept: the oldest first
        self._bytes = 0
        self._lock = threading.Lock()
        self.dropped = 0   # records dropped for room: read back by the sink instead

    def keep(self, records: Iterable[Record]) -> None:
        with self._lock:
            for record in records:
                key = (record.topic, record.partition, record.offset)
                if key in self._held:
                    continue
                self._held[key] = record
                self._bytes += _size(record)
            while self._bytes > self._max_bytes and self._held:
                oldest = next(iter(self._held))
                self._bytes -= _size(self._held.pop(oldest))
                self.dropped += 1

    def take(self, keys: Iterable[Key]) -> dict[Key, Record]:
        """The copies of ``keys`` held (they are no longer held)."""
        out = {}
        with self._lock:
            for key in keys:
                record = self._held.pop(key, None)
                if record is not None:
                    self._bytes -= _size(record)
                    out[key] = record
        return out

    @property
    def held(self) -> int:
        return len(self._held)
