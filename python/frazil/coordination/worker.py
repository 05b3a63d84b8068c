"""The worker role: answers the coordinator's StartCommit with what it buffered, and settles each
reply on CommitComplete. The same in both modes; only the channel differs (in process in single
mode, the control topic in distributed mode).

A worker holds at most one *batch*: rows drained from the buffer with the offset range each
source partition covers. A reply writes the batch's data files (once: a batch keeps its files
until it lands), logs them in the transaction log and sends, in one transaction, ``DataWritten``
(files and ranges, with the assignment generation) and ``DataComplete`` (every owned partition).
After the cycle's ``CommitComplete`` the worker compares the table's offsets with its ranges:
- landed: the batch is gone, the consumer group's low watermark moves to the table's offsets;
- the table's commit failed (``failed_tables``: catalog or storage down): the batch is kept and
  reported again next cycle (rule 6), and no new batch is drained meanwhile, so an outage never
  piles up files; the buffer fills until backpressure pauses consumption;
- refused (a zombie's reply, an overlap) or no CommitComplete came: everything buffered is dropped
  and every partition is read again from the table's offsets.
A worker that cannot write its files answers nothing that cycle and keeps the batch. Failures of
either kind are counted on one outage clock; after ``outage_timeout_s`` the worker stops (rule 8).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
from aiokafka.errors import KafkaError
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from frazil import faults
from frazil.config import Config
from frazil.coordination.channel import Received
from frazil.errors import CommitOutcomeUnknown, FrazilError
from frazil.events.payloads import (
    Assignment,
    CommitComplete,
    CommitRequest,
    DataComplete,
    DataWritten,
    OffsetRange,
    Payload,
    StartCommit,
)
from frazil.flow.outage import Outage
from frazil.iceberg.committer import Committer
from frazil.iceberg.datafiles import to_ref
from frazil.iceberg.offsets import Range, TopicPartition
from frazil.ingest.buffer import RecordBuffer
from frazil.ingest.positions import Positions
from frazil.ingest.source import KafkaSource
from frazil.metrics import Metrics
from frazil.spark.bulk import SparkWriter
from frazil.txlog import Journal
from frazil.txlog import records as txrecords

log = logging.getLogger(__name__)


class WorkerChannel(Protocol):
    async def send(self, payloads: list[Payload], *, fault_point: str | None = None) -> None: ...
    async def poll(self, timeout_ms: int) -> list[Received]: ...
    async def reset_producer(self) -> None: ...


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
class Batch:
    """Rows drained from the buffer, not yet landed. Once its data files are written (and
    logged), ``data`` is released and ``files`` holds them."""

    data: pa.Table | None
    ranges: dict[TopicPartition, Range]
    rows: int
    files: tuple[DataFile, ...] | None = None

    @property
    def paths(self) -> list[str]:
        return [f.file_path for f in self.files or ()]


class Worker:
    def __init__(self, cfg: Config, *, table: Table, committer: Committer, channel: WorkerChannel, journal: Journal,
                 buffer: RecordBuffer, positions: Positions, source: KafkaSource, metrics: Metrics, stats: Stats,
                 bulk: SparkWriter | None = None) -> None:
        """``table`` as loaded at start: written against while the catalog cannot be reached."""
        self._cfg, self._table, self._committer, self._channel = cfg, table, committer, channel
        self._journal, self._buffer, self._positions, self._source = journal, buffer, positions, source
        self._metrics, self._stats, self._bulk = metrics, stats, bulk
        self.batch: Batch | None = None
        self.in_flight: str | None = None         # the commit id the batch was last reported under
        self.last_record_ms: int | None = None
        self.outage = Outage(cfg.outage_timeout_s)
        self._requested: float | None = None      # when a CommitRequest went out, not yet answered

    @property
    def batch_bytes(self) -> int:
        return int(self.batch.data.nbytes) if self.batch is not None and self.batch.data is not None else 0

    @property
    def idle(self) -> bool:
        """Nothing buffered, held or waiting for its cycle."""
        return not self._positions.buffered and self.batch is None and self.in_flight is None

    async def handle(self, payload: Payload, sent_ms: int | None = None) -> None:
        """One control event (sent at ``sent_ms``): answer a StartCommit; settle a reply on its
        CommitComplete."""
        if isinstance(payload, StartCommit):
            await self.reply(payload.commit_id, sent_ms)
        elif isinstance(payload, CommitComplete) and payload.commit_id == self.in_flight:
            await self.settle(payload.failed_tables)

    def request_due(self, full: bool, now: float) -> bool:
        """Ask for a cycle now? When full (the record-count and bytes triggers): once per cycle,
        again after ``commit_timeout_s`` if no cycle came (a lost request). Not while a batch that
        failed to land is held: the next cycle could only retry it, and the interval paces retries
        during an outage."""
        if not full or (self.batch is not None and self.outage.failing):
            return False
        return self._requested is None or now - self._requested >= self._cfg.coordination.commit_timeout_s

    async def request(self, reason: str) -> None:
        self._requested = time.monotonic()
        await self._channel.send([CommitRequest(reason)])

    async def reply(self, commit_id: str, sent_ms: int | None = None) -> None:
        """The batch (drained now if there is none), written as data files and reported with its
        ranges, and every owned partition reported complete: one transaction."""
        started = time.monotonic()
        waited_ms = max(0, int(time.time() * 1000) - sent_ms) if sent_ms is not None else 0
        self._requested = None
        if self.in_flight is not None:   # its CommitComplete never came (the coordinator changed)
            await self.settle()
        if not self._positions.partitions() and not self._source.assignment:
            return  # not positioned yet: the coordinator waits for our partitions or times out
        if self.batch is None and self._positions.buffered:
            self.batch = self._take()
        taken = loaded = wrote = time.monotonic()
        generation = self._source.generation
        payloads: list[Payload] = []
        batch = self.batch
        if batch is not None:
            try:
                table = await asyncio.to_thread(self._load_table)
                loaded = time.monotonic()
                if batch.files is None:
                    assert batch.data is not None
                    files = await asyncio.to_thread(self._write_files, table, batch.data, commit_id)
                    wrote = time.monotonic()
                    batch = dataclasses.replace(batch, data=None, files=tuple(files))
                    await asyncio.to_thread(self._journal.append,
                                            [txrecords.files(self._cfg.table.name, batch.paths, batch.ranges)])
                    self.batch = batch
                    faults.hit("worker.after_files_written")
            except (FrazilError, OSError) as exc:
                if isinstance(exc, FrazilError) and not exc.retriable:
                    raise
                self._not_landed(commit_id, exc, "could not write or report its data files", answered=False)
                return  # no reply: the cycle goes on without our partitions; we try again at the next one
            assert batch.files is not None
            refs = tuple(to_ref(f, table.spec(), table.schema()) for f in batch.files)
            ranges = tuple(OffsetRange(t, p, r.start, r.end, generation) for (t, p), r in sorted(batch.ranges.items()))
            payloads.append(DataWritten(commit_id, self._cfg.table.name, refs, ranges, str(table.metadata.table_uuid)))
            self.in_flight = commit_id
        owned = tuple(Assignment(t, p, generation) for t, p in sorted(self._source.assignment))
        payloads.append(DataComplete(commit_id, owned, self.last_record_ms))
        faults.hit("worker.before_reply")
        logged = time.monotonic()
        try:
            await self._channel.send(payloads, fault_point="worker.in_reply_transaction")
        except KafkaError as exc:
            # e.g. paused past the transaction timeout: the broker aborted the reply. If it did land
            # after all, our next reply overlaps the table and is refused; either way: read again.
            log.warning("reply to commit %s could not be sent (%s: %s); reading every partition again from the "
                        "table with a new control-topic producer", commit_id, type(exc).__name__, exc)
            self._metrics.commit("abandoned")
            await self._channel.reset_producer()
            await self.rewind()
            return
        if batch is not None:
            await asyncio.to_thread(self._journal.append, [txrecords.reply(commit_id, self._cfg.table.name, batch.paths)])
        faults.hit("worker.after_reply")
        now = time.monotonic()
        log.info("replied to commit %s: %d rows in %d file(s) for %d partition(s), generation %d; %d ms after "
                 "StartCommit (drain %.0f, load %.0f, write %.0f, log %.0f, send %.0f ms)", commit_id,
                 batch.rows if batch else 0, len(batch.files or ()) if batch else 0, len(owned), generation,
                 waited_ms + 1000 * (now - started), 1000 * (taken - started), 1000 * (loaded - taken),
                 1000 * (wrote - loaded), 1000 * (logged - wrote), 1000 * (now - logged))

    async def settle(self, failed_tables: tuple[str, ...] = ()) -> None:
        """After a cycle: did our reply land? If its table's commit failed (``failed_tables``, a
        catalog or storage outage), keep the batch for the next reply (rule 6). If it was refused
        (dropped as stale, an overlap), or the cycle's CommitComplete never came, read every
        partition again from the table's offsets."""
        commit_id, self.in_flight = self.in_flight, None
        batch = self.batch
        assert commit_id is not None and batch is not None
        table = self._cfg.table.name
        started = time.monotonic()
        try:
            faults.hit("worker.before_settle")
            stored = await asyncio.to_thread(self._committer.stored_offsets)
        except Exception as exc:  # noqa: BLE001 - the catalog went down after (or while) the coordinator committed
            # Whether it landed or not, hold the files and report them again: the coordinator checks
            # offsets inside its compare-and-swap, so had they landed, the next reply overlaps the
            # table and is refused, and the settle after it (catalog back) finds them in the table.
            self._not_landed(commit_id, exc, f"could not read {table}'s offsets to see whether it landed"
                             + (" (the coordinator's commit failed)" if table in failed_tables else
                                " (the coordinator committed; checked again at the next cycle)"), answered=True)
            return
        missing = {tp: (stored.get(tp), r.end) for tp, r in batch.ranges.items() if stored.get(tp, -1) < r.end}
        if not missing:
            self.batch = None
            loaded = time.monotonic()
            await asyncio.to_thread(self._journal.append, [txrecords.settled(table, batch.paths, "landed")])
            logged = time.monotonic()
            lasted = self.outage.ended(logged)
            if lasted is not None:
                log.warning("commit %s landed after %.0fs of failures; the outage is over", commit_id, lasted)
            await self.landed(batch.rows, "committed", stored)
            log.info("commit %s settled: %d rows landed (offsets %.0f, log %.0f, low watermark %.0f ms)", commit_id,
                     batch.rows, 1000 * (loaded - started), 1000 * (logged - loaded), 1000 * (time.monotonic() - logged))
            return
        if table in failed_tables and all(stored.get(tp, r.start) == r.start for tp, r in batch.ranges.items()):
            self._not_landed(commit_id, CommitOutcomeUnknown(f"the coordinator could not commit {table}"),
                             f"could not land in {table}", answered=True)
            return
        log.warning("reply %s did not land for %s (table offset, reply end); reading every partition again from "
                    "the table", commit_id, ", ".join(f"{t}[{p}]={v}" for (t, p), v in sorted(missing.items())[:5]))
        self._metrics.commit("abandoned")
        await self.rewind(stored)

    async def landed(self, rows: int, outcome: str, stored: Mapping[TopicPartition, int]) -> None:
        """Count a landed cycle and move the consumer group's low watermark to the table's offsets."""
        self._stats.commits += 1
        self._stats.rows_committed += rows
        self._metrics.commit(outcome)
        self._metrics.rows_committed.inc(rows)
        await self._source.commit_low_watermark(stored)
        faults.hit("commit.after_kafka_offsets")

    def _not_landed(self, commit_id: str, exc: BaseException, what: str, *, answered: bool) -> None:
        """A cycle our batch did not land in (storage or catalog down): keep it, say so loudly, and
        stop after ``outage_timeout_s`` (rule 8)."""
        now = time.monotonic()
        failing = self.outage.failed(now)
        self._stats.failed_commits += 1
        self._metrics.commit("failed")
        if self.outage.expired(now):
            raise CommitOutcomeUnknown(
                f"commits to {self._cfg.table.name} have failed for {failing:.0f}s (outage_timeout_s="
                f"{self._cfg.outage_timeout_s:g}); stopping. Nothing is lost: a restart, or the partitions' next "
                f"owner, resumes from the table. Last error: {type(exc).__name__}: {exc}") from exc
        batch = self.batch
        rows = batch.rows if batch else 0
        if answered:
            log.warning("commit %s of %s failed; keeping its %d file(s) (%d rows) to report again in the next cycle",
                        commit_id, self._cfg.table.name, len(batch.files or ()) if batch else 0, rows)
        log.error("commit %s (%d rows) did not land: %s: %s: %s. Holding them for the next cycle (failing for %.0fs "
                  "of outage_timeout_s=%g)", commit_id, rows, what, type(exc).__name__, exc, failing,
                  self._cfg.outage_timeout_s)

    def _take(self) -> Batch | None:
        """Move the buffer's rows into a batch; the next rows start where these end."""
        ranges = self._positions.take()
        data = self._buffer.drain()
        if not ranges:
            return None
        assert data is not None and data.num_rows > 0, "ranges without rows"
        return Batch(data, ranges, data.num_rows)

    def _load_table(self) -> Table:
        """The table now; while the catalog cannot be reached, the last one loaded (files are
        written against its schema and spec, and the coordinator's commit checks them)."""
        try:
            self._table = self._committer.load()
        except Exception as exc:  # noqa: BLE001 - catalog unreachable
            log.warning("cannot load %s (%s: %s); writing against the table as last loaded", self._cfg.table.name,
                        type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
        return self._table

    def _write_files(self, table: Table, data: pa.Table, commit_id: str) -> list[DataFile]:
        """Data files for a batch: through Spark when it is a bulk flush, else in process."""
        if self._bulk is not None and data.num_rows >= self._cfg.spark.bulk_min_rows:
            # a fresh folder per attempt: a failed attempt's files are left for orphan removal
            return self._bulk.write(table, data, f"{commit_id}-{uuid.uuid4().hex[:8]}")
        return self._committer.write_files(data, table)

    async def rewind(self, stored: Mapping[TopicPartition, int] | None = None) -> None:
        """Drop what is buffered and held and read every positioned partition again from the table
        (its offsets as just read, ``stored``, or read now)."""
        tps = self._positions.partitions()
        self.drop()
        self._positions.forget(tps)
        if stored is None:
            stored = await asyncio.to_thread(self._committer.stored_offsets)
        await self._source.seek(tps, stored)
        self._positions.positioned(tps, stored)

    def drop(self) -> None:
        """Forget the buffer, the batch and the reply in flight (a rebalance, a rewind); their
        records are read again from the table's offsets."""
        if self.batch is not None and self.batch.files:
            self._journal.append([txrecords.settled(self._cfg.table.name, self.batch.paths, "abandoned")])
        self._buffer.clear()
        self.batch = None
        self.in_flight = None
