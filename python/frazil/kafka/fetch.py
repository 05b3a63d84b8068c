"""Raw fetches: a consumer's fetched record batches go to the native reader whole, one chunk per
partition fetch, instead of one aiokafka ConsumerRecord per record (docs/raw-fetch.md).

aiokafka keeps the consumer group, rebalances, positions, pause/resume and seeks; only the last
step of its fetch path changes. Its fetcher builds, for each partition of a fetch response,
``MemoryRecords(bytes)`` and ``PartitionRecords(tp, records, aborted, fetch_offset,
key_deserializer, ...)``, both looked up as globals of ``aiokafka.consumer.fetcher`` when a
response arrives. :func:`install` replaces the two names: ``MemoryRecords`` with a wrapper that
keeps the bytes (and delegates everything else), ``PartitionRecords`` with a factory that, for a
consumer made with ``key_deserializer=RAW``, returns :class:`_RawPartition` (every other consumer
gets aiokafka's own class, unchanged).

:class:`_RawPartition` keeps the contract aiokafka's ``FetchResult`` relies on:
``next_fetch_offset`` is the fetch offset until the first ``next()`` (so a seek, a pause or a
rebalance while the fetch was in flight drops it, as before), the first ``next()`` reads the
batches natively and returns one :class:`Chunk`, and then ``next_fetch_offset`` is past the
last whole batch read (aiokafka moves the position there; control batches and aborted
transactions move it with nothing returned). ``getmany(max_records=n)`` counts chunks.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiokafka
from aiokafka.consumer import fetcher as _fetcher

from frazil import _native
from frazil.errors import CorruptBatchError, FrazilError

AIOKAFKA_VERSION = "0.14.0"   # the fetcher internals below are read from this release; pinned in pyproject.toml
_PARTITION_RECORDS_PARAMS = ["self", "tp", "records", "aborted_transactions", "fetch_offset", "key_deserializer",
                             "value_deserializer", "check_crcs", "isolation_level"]

_MemoryRecords = _fetcher.MemoryRecords
_PartitionRecords = _fetcher.PartitionRecords


class RawFetches:
    """Passed as a consumer's ``key_deserializer``: its fetches come back as :class:`Chunk` s. It
    is never called (a raw consumer has no per-record step)."""

    def __call__(self, key: bytes | None) -> Any:
        raise AssertionError("a raw-fetch consumer never deserializes keys")


RAW = RawFetches()


@dataclass(frozen=True, slots=True)
class Record:
    """One record materialized from a chunk, for the paths that look at records one by one
    (routing by value, keyed tables, Avro, schema evolution, dead letters). Same attribute names
    as aiokafka's ConsumerRecord."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One partition fetch, read natively: its records stay in native memory."""

    topic: str
    partition: int
    fetched: _native.Fetched

    def __len__(self) -> int:
        return len(self.fetched)

    def records(self, start: int = 0, offsets: list[int] | None = None) -> list[Record]:
        """The records from index ``start`` on, or those at ``offsets`` (sorted), as objects."""
        cols = self.fetched.columns(start, offsets)
        topic, partition = self.topic, self.partition
        return [Record(topic, partition, o, t, k, v, tuple(h)) for o, t, k, v, h in zip(*cols, strict=True)]


class _RawRecords:
    """aiokafka's ``MemoryRecords`` with the bytes kept."""

    __slots__ = ("data", "inner")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.inner = _MemoryRecords(data)

    def has_next(self) -> bool:
        return bool(self.inner.has_next())

    def next_batch(self) -> Any:
        return self.inner.next_batch()

    def size_in_bytes(self) -> int:
        return int(self.inner.size_in_bytes())


class _RawPartition:
    """aiokafka's ``PartitionRecords`` for a raw consumer: yields one :class:`Chunk` (none when
    the fetch held only control batches, aborted transactions or records below the fetch offset)."""

    def __init__(self, tp: Any, data: bytes, aborted: Any, fetch_offset: int, check_crcs: bool,
                 read_committed: bool) -> None:
        self._tp = tp
        self._pending: tuple[bytes, list[tuple[int, int]], bool, bool] | None = (
            data, [(int(p), int(o)) for p, o in aborted or ()], check_crcs, read_committed)
        self.next_fetch_offset = fetch_offset

    def __iter__(self) -> Iterator[Chunk]:
        return self

    def __next__(self) -> Chunk:
        if self._pending is None:
            raise StopIteration
        (data, aborted, check_crcs, read_committed), self._pending = self._pending, None
        tp = self._tp
        try:
            fetched = _native.read_fetch(data, fetch_offset=self.next_fetch_offset, read_committed=read_committed,
                                         aborted=aborted, check_crcs=check_crcs)
        except _native.CorruptBatchError as exc:
            # the position stays at the fetch offset: nothing of this fetch is taken
            raise CorruptBatchError(topic=tp.topic, partition=tp.partition, offset=exc.args[1],
                                    detail=exc.args[0]) from None
        self.next_fetch_offset = fetched.next_offset
        if not len(fetched):
            raise StopIteration
        return Chunk(tp.topic, tp.partition, fetched)


def _partition_records(tp: Any, records: Any, aborted_transactions: Any, fetch_offset: int, key_deserializer: Any,
                       value_deserializer: Any, check_crcs: bool, isolation_level: Any) -> Any:
    if key_deserializer is RAW:
        return _RawPartition(tp, records.data, aborted_transactions, fetch_offset, check_crcs,
                             isolation_level == _fetcher.READ_COMMITTED)
    return _PartitionRecords(tp, records.inner, aborted_transactions, fetch_offset, key_deserializer,
                             value_deserializer, check_crcs, isolation_level)


def check() -> None:
    """Raise FrazilError unless aiokafka is the release whose fetcher the hook was written for."""
    found = getattr(aiokafka, "__version__", "?")
    if found != AIOKAFKA_VERSION:
        raise FrazilError(f"frazil reads Kafka record batches natively by hooking aiokafka {AIOKAFKA_VERSION}'s "
                          f"fetcher, but aiokafka {found} is installed: install aiokafka=={AIOKAFKA_VERSION} "
                          "(pyproject.toml pins it)")
    params = list(inspect.signature(_PartitionRecords.__init__).parameters)
    if params != _PARTITION_RECORDS_PARAMS or not hasattr(_fetcher, "READ_COMMITTED"):
        raise FrazilError("aiokafka's fetcher is not the one frazil's raw fetch was written for "
                          f"(PartitionRecords takes {params}); reinstall aiokafka=={AIOKAFKA_VERSION}")


def install() -> None:
    """Hook aiokafka's fetcher for raw consumers (idempotent). Other consumers are unchanged."""
    if _fetcher.PartitionRecords is _partition_records:
        return
    check()
    _fetcher.MemoryRecords = _RawRecords
    _fetcher.PartitionRecords = _partition_records


def installed() -> bool:
    return _fetcher.PartitionRecords is _partition_records and _fetcher.MemoryRecords is _RawRecords
