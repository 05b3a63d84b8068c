"""The single-process pipeline: Kafka records into the native buffer, committed on a trigger.

The worker and the committer talk in process. A commit cycle drains the buffer into a *pending*
batch (its rows, the offset range every source partition covered, a commit id) and commits it in
a background task, so polling, and with it heartbeats, never stops. If the commit cannot land
(catalog or storage outage), the same pending batch is retried every interval with the same
commit id, loudly, until ``outage_timeout_s`` passes; meanwhile records keep arriving into the
buffer until the memory budget pauses consumption. A rebalance waits for an in-flight commit,
then drops what is buffered and pending; the new assignment resumes from the table.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from frazil import _native, faults
from frazil.config import Config
from frazil.errors import CommitOutcomeUnknown, FrazilError, OffsetOverlapError, RecordDecodeError
from frazil.flow.backpressure import Action, Backpressure
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
    failed_commits: int = 0
    pauses: int = 0
    assignments: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Pending:
    """A drained batch waiting to land: retried as is, with the same commit id (rule 5)."""

    data: pa.Table
    ranges: dict[TopicPartition, Range]
    commit_id: str


class Pipeline:
    def __init__(self, cfg: Config, catalog: Catalog, table: Table) -> None:
        """``table`` is the target table as ``catalog.ensure_table`` left it. Build on the loop."""
        self._cfg = cfg
        self._committer = Committer(catalog, cfg.table.name, cfg.pipeline, max_attempts=cfg.max_commit_attempts)
        self._buffer = RecordBuffer(iceberg_catalog.arrow_schema(table), metadata_columns=cfg.table.metadata_columns,
                                    max_bytes=cfg.memory_budget_bytes)
        self._source = KafkaSource(cfg.kafka, on_assigned=self._on_assigned, on_positioned=self._on_positioned,
                                   on_revoked=self._on_revoked)
        self._flow = Backpressure(cfg.memory_budget_bytes)
        # Per source partition: the first offset the buffer's rows cover, and the next offset after
        # the last buffered record. A partition is in `_start` once it is assigned *and positioned*
        # at the table's offset (records of other partitions are dropped), in `_end` once it has
        # buffered data.
        self._start: dict[TopicPartition, int | None] = {}
        self._end: dict[TopicPartition, int] = {}
        self._pending: Pending | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing_since: float | None = None
        self._last_commit = time.monotonic()
        self.stats = Stats()
        self.last_result: CommitResult | None = None

    @property
    def bytes_in_use(self) -> int:
        return self._buffer.bytes + (self._pending.data.nbytes if self._pending else 0)

    async def run(self, stop: asyncio.Event) -> None:
        """Ingest until ``stop`` is set, then commit what is buffered and return."""
        await self._source.start()
        try:
            while not stop.is_set():
                batches = await self._source.poll(POLL_TIMEOUT_MS)
                if batches:
                    self._append(batches)
                self._check_task()
                self._flow_control()
                if self._task is None and self._due():
                    self._task = asyncio.create_task(self._cycle())
            await self._drain()
        finally:
            if self._task is not None and not self._task.done():
                self._task.cancel()
            await self._source.stop()
        elapsed = time.monotonic() - self.stats.started
        log.info("stopped after %.1fs: %d records in, %d rows committed in %d commits (%d failed), %d pause(s)",
                 elapsed, self.stats.records_in, self.stats.rows_committed, self.stats.commits,
                 self.stats.failed_commits, self.stats.pauses)

    def _due(self) -> bool:
        if not self._end and self._pending is None:
            self._last_commit = time.monotonic()
            return False
        elapsed = time.monotonic() - self._last_commit
        if self._failing_since is not None:  # retry a failing commit once per interval, no faster
            return elapsed >= self._cfg.commit_interval_s
        return (elapsed >= self._cfg.commit_interval_s or self._buffer.rows >= self._cfg.max_buffer_records
                or self._flow.paused)

    def _check_task(self) -> None:
        """Surface a commit task's failure on the loop that runs the pipeline."""
        if self._task is not None and self._task.done():
            task, self._task = self._task, None
            task.result()

    async def _wait_task(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            await asyncio.wait([task])
            task.result()

    def _flow_control(self) -> None:
        action = self._flow.update(self.bytes_in_use)
        if action is Action.PAUSE:
            self._source.pause()
            self.stats.pauses += 1
            log.warning("backpressure: %d bytes in use of a %d byte budget; pausing all partitions "
                        "(polling and heartbeats go on)%s", self.bytes_in_use, self._flow.budget_bytes,
                        "; a commit is failing" if self._failing_since else "")
        elif action is Action.RESUME:
            self._source.resume()
            log.info("backpressure: %d bytes in use; resuming all partitions", self.bytes_in_use)

    def _append(self, batches: Mapping[TopicPartition, list]) -> None:  # type: ignore[type-arg]
        full = False
        for tp, records in batches.items():
            if tp not in self._start:  # not positioned yet, or revoked while the fetch was in flight
                continue
            start = self._start[tp]
            # Rule 2: never take a record the table already holds, nor one already buffered.
            floor = self._end.get(tp, start)
            if floor is not None and records[0].offset < floor:
                kept = [r for r in records if r.offset >= floor]
                if tp in self._end:
                    log.warning("%s[%d]: records %d..%d were delivered again while %d..%d is buffered; skipped them",
                                tp[0], tp[1], records[0].offset, records[-1].offset, start, floor - 1)
                self.stats.records_skipped += len(records) - len(kept)
                records = kept
                if not records:
                    continue
            if full:
                self._source.seek_back(tp, records[0].offset)
                continue
            try:
                errors = self._buffer.append(tp[0], tp[1], records)
            except _native.BufferFullError:
                # Nothing of this batch was taken: fetch it again once there is room.
                full = True
                self._source.seek_back(tp, records[0].offset)
                continue
            if errors:
                first = errors[0]
                raise RecordDecodeError(topic=tp[0], partition=tp[1], offset=first.offset, field=first.field,
                                        reason=first.reason + (f" ({len(errors) - 1} more bad record(s) in the same batch)"
                                                               if len(errors) > 1 else ""))
            if start is None:
                self._start[tp] = records[0].offset
            self._end[tp] = records[-1].offset + 1
            self.stats.records_in += len(records)
        if full and not self._flow.paused:
            self._flow.paused = True
            self._flow.pauses += 1
            self.stats.pauses += 1
            self._source.pause()
            log.warning("backpressure: the buffer is at its %d byte cap; pausing all partitions", self._flow.budget_bytes)

    def _take_pending(self) -> Pending | None:
        """Move the buffer's rows into a pending batch; the next rows start where these end."""
        if not self._end:
            return None
        ranges = {tp: Range(start, self._end[tp]) for tp, start in self._start.items()
                  if tp in self._end and start is not None}
        data = self._buffer.drain()
        assert data is not None and data.num_rows > 0, "ranges without rows"
        for tp, rng in ranges.items():
            self._start[tp] = rng.end
        self._end.clear()
        return Pending(data, ranges, f"{self._cfg.pipeline}-{uuid.uuid4().hex}")

    async def _cycle(self) -> None:
        self._last_commit = started = time.monotonic()
        if self._pending is None:
            self._pending = self._take_pending()
        pending = self._pending
        if pending is None:
            return
        try:
            result = await asyncio.to_thread(self._committer.commit, pending.data, pending.ranges, pending.commit_id)
        except OffsetOverlapError as exc:
            log.warning("%s", exc)
            await self._rewind(set(self._start))
            return
        except FrazilError as exc:
            if not exc.retriable:
                raise
            self._failed(pending, exc, started)
            return
        if self._pending is pending:  # a rebalance may have dropped it meanwhile
            self._pending = None
        if self._failing_since is not None:
            log.warning("commit %s landed after %.0fs of failures; the outage is over", pending.commit_id,
                        time.monotonic() - self._failing_since)
            self._failing_since = None
        self.stats.commits += 1
        self.stats.rows_committed += result.rows
        self.last_result = result
        await self._source.commit_low_watermark(result.offsets)
        faults.hit("commit.after_kafka_offsets")

    def _failed(self, pending: Pending, exc: FrazilError, cycle_started: float) -> None:
        now = time.monotonic()
        self._failing_since = self._failing_since or cycle_started
        self.stats.failed_commits += 1
        failing = now - self._failing_since
        if failing >= self._cfg.outage_timeout_s:
            raise CommitOutcomeUnknown(
                f"commits to {self._cfg.table.name} have failed for {failing:.0f}s (outage_timeout_s="
                f"{self._cfg.outage_timeout_s:g}); stopping. Nothing is lost: a restart resumes from the table. "
                f"Last error: {exc}") from exc
        log.error("commit %s (%d rows) did not land: %s. Retrying every %.1fs for up to %.0fs more; "
                  "%d bytes held of a %d byte budget", pending.commit_id, pending.data.num_rows, exc,
                  self._cfg.commit_interval_s, self._cfg.outage_timeout_s - failing, self.bytes_in_use,
                  self._flow.budget_bytes)

    async def _drain(self) -> None:
        """On stop: land the pending batch and the buffer, or say what is left to read again."""
        await self._wait_task()
        for _ in range(2):  # the pending batch, then what the buffer holds
            if self._pending is None and not self._end:
                return
            log.info("draining: committing %d buffered and %d pending rows before stopping", self._buffer.rows,
                     self._pending.data.num_rows if self._pending else 0)
            await self._cycle()
            if self._failing_since is not None:
                break
        log.warning("stopping with uncommitted rows (%d buffered, %d pending); they are read again on restart",
                    self._buffer.rows, self._pending.data.num_rows if self._pending else 0)

    async def _rewind(self, tps: set[TopicPartition]) -> None:
        """Drop what is buffered and pending and read ``tps`` again from the table's offsets."""
        self._buffer.clear()
        self._end.clear()
        self._pending = None
        for tp in tps:  # take nothing of them until they are positioned again
            self._start.pop(tp, None)
        stored = await asyncio.to_thread(self._committer.stored_offsets)
        await self._source.seek(tps, stored)
        self._on_positioned(tps, stored)

    async def _on_revoked(self, tps: set[TopicPartition]) -> None:
        task = self._task
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait([task])  # its outcome is surfaced by the run loop
        dropped = self._buffer.rows + (self._pending.data.num_rows if self._pending else 0)
        if dropped:
            log.info("partitions revoked: dropping %d uncommitted rows; they are read again by the new owner", dropped)
        # Every partition is re-positioned from the table on the next assignment (aiokafka's
        # assignors are eager: an assignment always follows), so forget them all, not only the
        # revoked ones: a range must never claim records that were dropped here.
        self._buffer.clear()
        self._end.clear()
        self._start.clear()
        self._pending = None

    async def _on_assigned(self, tps: set[TopicPartition]) -> Mapping[TopicPartition, int]:
        self._buffer.clear()
        self._end.clear()
        self._pending = None
        self._start.clear()
        stored = await asyncio.to_thread(self._committer.stored_offsets)
        self.stats.assignments += 1
        return {tp: o for tp, o in stored.items() if tp in tps}

    def _on_positioned(self, tps: set[TopicPartition], stored: Mapping[TopicPartition, int]) -> None:
        for tp in tps:
            self._start[tp] = stored.get(tp)
