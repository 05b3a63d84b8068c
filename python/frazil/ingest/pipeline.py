"""The single-process pipeline: Kafka records into the native buffer, committed on a trigger.

The worker and the committer talk in process: each cycle drains the buffer and commits it with
the offset range every source partition covered since the last commit. A rebalance waits for an
in-flight commit, then drops what is buffered; the new assignment resumes from the table.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from frazil import faults
from frazil.config import Config
from frazil.errors import OffsetOverlapError, RecordDecodeError
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg.committer import CommitResult, Committer
from frazil.iceberg.offsets import Range, TopicPartition
from frazil.ingest.buffer import RecordBuffer
from frazil.ingest.source import KafkaSource

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 200


@dataclass
class Stats:
    records_in: int = 0
    records_skipped: int = 0
    rows_committed: int = 0
    commits: int = 0
    started: float = field(default_factory=time.monotonic)


class Pipeline:
    def __init__(self, cfg: Config, catalog: Catalog, table: Table) -> None:
        """``table`` is the target table as ``catalog.ensure_table`` left it. Build on the loop."""
        self._cfg = cfg
        self._committer = Committer(catalog, cfg.table.name, cfg.pipeline, max_attempts=cfg.max_commit_attempts)
        self._buffer = RecordBuffer(iceberg_catalog.arrow_schema(table), metadata_columns=cfg.table.metadata_columns)
        self._source = KafkaSource(cfg.kafka, on_assigned=self._on_assigned, on_revoked=self._on_revoked)
        # Per source partition: the first offset this cycle covers, and the next offset after the
        # last record buffered. A partition is in `_start` once assigned, in `_end` once it has data.
        self._start: dict[TopicPartition, int | None] = {}
        self._end: dict[TopicPartition, int] = {}
        self._lock = asyncio.Lock()
        self._last_commit = time.monotonic()
        self.stats = Stats()
        self.last_result: CommitResult | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Ingest until ``stop`` is set, then commit what is buffered and return."""
        await self._source.start()
        try:
            while not stop.is_set():
                batches = await self._source.poll(POLL_TIMEOUT_MS)
                if batches:
                    async with self._lock:
                        self._append(batches)
                if self._due():
                    await self.commit()
            log.info("draining: committing %d buffered rows before stopping", self._buffer.rows)
            await self.commit()
        finally:
            await self._source.stop()
        elapsed = time.monotonic() - self.stats.started
        log.info("stopped after %.1fs: %d records in, %d rows committed in %d commits", elapsed,
                 self.stats.records_in, self.stats.rows_committed, self.stats.commits)

    def _due(self) -> bool:
        if not self._end:
            self._last_commit = time.monotonic()
            return False
        return (time.monotonic() - self._last_commit >= self._cfg.commit_interval_s
                or self._buffer.rows >= self._cfg.max_buffer_records)

    def _append(self, batches: Mapping[TopicPartition, list]) -> None:  # type: ignore[type-arg]
        for tp, records in batches.items():
            if tp not in self._start:  # revoked while the fetch was in flight
                continue
            start = self._start[tp]
            if start is not None and records[0].offset < start:
                # Rule 2: never take a record the table already holds.
                kept = [r for r in records if r.offset >= start]
                self.stats.records_skipped += len(records) - len(kept)
                records = kept
                if not records:
                    continue
            errors = self._buffer.append(tp[0], tp[1], records)
            if errors:
                first = errors[0]
                raise RecordDecodeError(topic=tp[0], partition=tp[1], offset=first.offset, field=first.field,
                                        reason=first.reason + (f" ({len(errors) - 1} more bad record(s) in the same batch)"
                                                               if len(errors) > 1 else ""))
            if start is None:
                self._start[tp] = records[0].offset
            self._end[tp] = records[-1].offset + 1
            self.stats.records_in += len(records)

    async def commit(self) -> CommitResult | None:
        async with self._lock:
            self._last_commit = time.monotonic()
            if not self._end:
                return None
            ranges = {tp: Range(start, self._end[tp]) for tp, start in self._start.items()
                      if tp in self._end and start is not None}
            data = self._buffer.drain()
            assert data is not None and data.num_rows > 0, "ranges without rows"
            commit_id = f"{self._cfg.pipeline}-{uuid.uuid4().hex}"
            try:
                result = await asyncio.to_thread(self._committer.commit, data, ranges, commit_id)
            except OffsetOverlapError as exc:
                log.warning("%s", exc)
                await self._rewind(set(self._start))
                return None
            for tp in ranges:
                self._start[tp] = self._end.pop(tp)
            self.stats.commits += 1
            self.stats.rows_committed += result.rows
            self.last_result = result
        await self._source.commit_low_watermark(result.offsets)
        faults.hit("commit.after_kafka_offsets")
        return result

    async def _rewind(self, tps: set[TopicPartition]) -> None:
        """Drop what is buffered and read ``tps`` again from the table's offsets."""
        self._buffer.clear()
        self._end.clear()
        stored = await asyncio.to_thread(self._committer.stored_offsets)
        for tp in tps:
            self._start[tp] = stored.get(tp)
        await self._source.seek(tps, stored)

    async def _on_revoked(self, tps: set[TopicPartition]) -> None:
        async with self._lock:  # waits for an in-flight commit
            if self._buffer.rows:
                log.info("partitions revoked: dropping %d buffered rows; they are read again by the new owner",
                         self._buffer.rows)
            # Every partition is re-positioned from the table on the next assignment (aiokafka's
            # assignors are eager: an assignment always follows), so forget them all, not only
            # the revoked ones: a range must never claim records that were dropped here.
            self._buffer.clear()
            self._end.clear()
            self._start.clear()

    async def _on_assigned(self, tps: set[TopicPartition]) -> Mapping[TopicPartition, int]:
        async with self._lock:
            stored = await asyncio.to_thread(self._committer.stored_offsets)
            self._buffer.clear()
            self._end.clear()
            self._start = {tp: stored.get(tp) for tp in tps}
            return {tp: o for tp, o in stored.items() if tp in tps}
