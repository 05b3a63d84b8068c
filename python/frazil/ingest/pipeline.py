"""The single-process pipeline: Kafka records into the native buffer, committed on a trigger.

The worker and the committer talk in process. A commit cycle drains the buffer into a *pending*
batch (its rows, the offset range every source partition covered, a commit id) and commits it in
a background task, so polling, and with it heartbeats, never stops. The pending batch is written
as Parquet data files first; the files and the commit intent go to the transaction log before the
catalog commit, and its outcome after. On start, intents without an outcome are resolved against
the table by commit id, and files that never landed are committed once instead of being read
again from Kafka. If the commit cannot land
(catalog or storage outage), the same pending batch is retried every interval with the same
commit id, loudly, until ``outage_timeout_s`` passes; meanwhile records keep arriving into the
buffer until the memory budget pauses consumption. A rebalance waits for an in-flight commit,
then drops what is buffered and pending; the new assignment resumes from the table.

In distributed mode (``channel`` given) the same loop is a worker: it never commits; it answers
the coordinator's StartCommit with its data files, ranges and partitions in one Kafka
transaction, asks for an early cycle when full, and after CommitComplete reads everything again
from the table if its reply did not land (docs/architecture.md, distributed mode).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from aiokafka.errors import KafkaError
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from frazil import _native, faults
from frazil.config import Config
from frazil.errors import CommitOutcomeUnknown, FrazilError, OffsetGapError, OffsetOverlapError, RecordDecodeError
from frazil.flow.backpressure import Action, Backpressure
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg.committer import CommitResult, Committer
from frazil.iceberg.offsets import Range, TopicPartition
from frazil.ingest.buffer import RecordBuffer
from frazil.ingest.source import KafkaSource
from frazil.coordination.channel import ControlChannel
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
from frazil.iceberg.datafiles import to_ref
from frazil.metrics import Metrics
from frazil.spark.bulk import SparkWriter
from frazil.txlog import Journal, JournalPolicy, open_journal

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
    """A drained batch waiting to land: retried as is, with the same commit id (rule 5). Once its
    data files are written (and logged), ``data`` is released and ``files`` holds them."""

    data: pa.Table | None
    ranges: dict[TopicPartition, Range]
    commit_id: str
    rows: int
    files: tuple[DataFile, ...] | None = None


def _chain(batches: list[Pending]) -> Pending:
    """Written batches, oldest first, as one: one range per partition from the first batch's start
    to the last one's end (contiguous: nothing was re-read in between, or they would have been
    dropped), and every batch's files."""
    ranges: dict[TopicPartition, Range] = {}
    for batch in batches:
        for tp, rng in batch.ranges.items():
            before = ranges.get(tp)
            assert before is None or before.end == rng.start, f"{tp}: {before} then {rng}"
            ranges[tp] = rng if before is None else Range(before.start, rng.end)
    files = tuple(f for batch in batches for f in (batch.files or ()))
    return Pending(None, ranges, batches[-1].commit_id, sum(b.rows for b in batches), files)


def encode_ranges(ranges: Mapping[TopicPartition, Range]) -> dict[str, list[int]]:
    return {f"{t}/{p}": [r.start, r.end] for (t, p), r in sorted(ranges.items())}


def decode_ranges(encoded: Mapping[str, list[int]]) -> dict[TopicPartition, Range]:
    out = {}
    for key, (start, end) in encoded.items():
        topic, _, partition = key.rpartition("/")
        out[(topic, int(partition))] = Range(start, end)
    return out


class Pipeline:
    def __init__(self, cfg: Config, catalog: Catalog, table: Table, *, bulk: SparkWriter | None = None,
                 on_committed: Callable[[CommitResult], None] | None = None,
                 channel: ControlChannel | None = None) -> None:
        """``table`` is the target table as ``catalog.ensure_table`` left it. Flushes of at least
        ``spark.bulk_min_rows`` rows are written by ``bulk`` when given. ``on_committed`` hears of
        every landed commit. Build on the loop."""
        self._cfg = cfg
        self._bulk = bulk
        self.on_committed = on_committed
        # Distributed mode: this process is a worker; the coordinator (maybe in another process)
        # asks for data on the control channel and commits it. Events are handled one at a time.
        self._channel = channel
        self._control: deque[Payload] = deque()
        self._in_flight: Pending | None = None      # replied, waiting for its CommitComplete
        # Not yet landed, to report in the next reply, oldest first: a batch whose files could not
        # be written or reported (storage or catalog down), or a reply whose table commit failed.
        self._held: list[Pending] = []
        self._last_record_ms: int | None = None
        self._requested: float | None = None          # when a CommitRequest went out, not yet answered
        self._committer = Committer(catalog, cfg.table.name, cfg.pipeline, max_attempts=cfg.max_commit_attempts)
        self._buffer = RecordBuffer(iceberg_catalog.arrow_schema(table), metadata_columns=cfg.table.metadata_columns,
                                    max_bytes=cfg.memory_budget_bytes)
        self._source = KafkaSource(cfg.kafka, on_assigned=self._on_assigned, on_positioned=self._on_positioned,
                                   on_revoked=self._on_revoked)
        self._flow = Backpressure(cfg.memory_budget_bytes)
        self.metrics = Metrics(cfg.pipeline, cfg.table.name)
        self.metrics.budget_bytes.set(cfg.memory_budget_bytes)
        # Per source partition: the first offset the buffer's rows cover, and the next offset after
        # the last buffered record. A partition is in `_start` once it is assigned *and positioned*
        # at the table's offset (records of other partitions are dropped), in `_end` once it has
        # buffered data.
        self._start: dict[TopicPartition, int | None] = {}
        self._end: dict[TopicPartition, int] = {}
        self._pending: Pending | None = None
        self._journal: Journal | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing_since: float | None = None
        self._last_commit = time.monotonic()
        self.stats = Stats()
        self.last_result: CommitResult | None = None

    @property
    def bytes_in_use(self) -> int:
        pending = self._pending.data.nbytes if self._pending is not None and self._pending.data is not None else 0
        held = sum(int(p.data.nbytes) for p in self._held if p.data is not None)
        return self._buffer.bytes + pending + held

    def assignment(self) -> set[TopicPartition]:
        """The source partitions this process owns now; during a rebalance, the ones it owned
        before (a coordinator is not stopped by a rebalance that leaves it the election partition)."""
        return self._source.settled_assignment()

    def positions(self) -> dict[TopicPartition, int]:
        """The next offset this pipeline takes from each positioned partition."""
        return {tp: self._end.get(tp, start) for tp, start in self._start.items() if start is not None}

    async def run(self, stop: asyncio.Event) -> None:
        """Recover the transaction log, ingest until ``stop`` is set, commit what is buffered."""
        self._journal = await asyncio.to_thread(self._recover)
        await self._source.start()
        try:
            while not stop.is_set():
                batches = await self._source.poll(POLL_TIMEOUT_MS)
                if batches:
                    self._append(batches)
                if self._channel is not None:
                    self._control.extend(r.event.payload for r in await self._channel.poll(0))
                self._check_task()
                if self._task is None and self._control:
                    self._task = asyncio.create_task(self._handle(self._control.popleft()))
                if self._channel is not None and self._task is None and self._full() and (
                        self._requested is None
                        or time.monotonic() - self._requested >= self._cfg.coordination.commit_timeout_s):
                    # once per cycle (cleared by our next reply), again if no cycle came (a lost request)
                    self._requested = time.monotonic()
                    self._task = asyncio.create_task(self._channel.send([CommitRequest(
                        f"{self._buffer.rows} rows buffered" if self._buffer.rows >= self._cfg.max_buffer_records
                        else "memory budget reached")]))
                self._flow_control()
                self.metrics.failing_seconds.set(time.monotonic() - self._failing_since if self._failing_since else 0)
                if self._task is None and self._due():
                    self._task = asyncio.create_task(self._cycle())
            await self._drain()
        finally:
            if self._task is not None and not self._task.done():
                self._task.cancel()
            await self._source.stop()
            self._journal.close()
        elapsed = time.monotonic() - self.stats.started
        log.info("stopped after %.1fs: %d records in, %d rows committed in %d commits (%d failed), %d pause(s)",
                 elapsed, self.stats.records_in, self.stats.rows_committed, self.stats.commits,
                 self.stats.failed_commits, self.stats.pauses)

    def _full(self) -> bool:
        """The record-count and bytes triggers."""
        return self._buffer.rows >= self._cfg.max_buffer_records or self._flow.paused

    def _due(self) -> bool:
        if self._channel is not None:  # the coordinator decides when (a full buffer asks it)
            return False
        if not self._end and self._pending is None:
            self._last_commit = time.monotonic()
            return False
        elapsed = time.monotonic() - self._last_commit
        if self._failing_since is not None:  # retry a failing commit once per interval, no faster
            return elapsed >= self._cfg.commit_interval_s
        return elapsed >= self._cfg.commit_interval_s or self._full()

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
        self._apply(self._flow.update(self.bytes_in_use))
        self.metrics.bytes_in_use.set(self.bytes_in_use)

    def _apply(self, action: Action, why: str = "") -> None:
        """Carry out a backpressure decision on the consumer, in the log and in the metrics."""
        self.metrics.paused.set(1 if self._flow.paused else 0)
        if action is Action.PAUSE:
            self._source.pause()
            self.stats.pauses += 1
            self.metrics.pauses.inc()
            log.warning("backpressure: %s; pausing all partitions (polling and heartbeats go on)%s",
                        why or f"{self.bytes_in_use} bytes in use of a {self._flow.budget_bytes} byte budget",
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
            self._last_record_ms = max(self._last_record_ms or 0, max(r.timestamp for r in records))
            self.stats.records_in += len(records)
            self.metrics.records_consumed.inc(len(records))
        if full:
            self._apply(self._flow.full(), f"the buffer is at its {self._flow.budget_bytes} byte cap")

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
        return Pending(data, ranges, f"{self._cfg.pipeline}-{uuid.uuid4().hex}", data.num_rows)

    async def _cycle(self) -> None:
        self._last_commit = started = time.monotonic()
        if self._pending is None:
            self._pending = self._take_pending()
        pending = self._pending
        if pending is None:
            return
        wrote = started  # when the data files were written (now, if a retry already has them)
        try:
            if pending.files is None:
                assert pending.data is not None
                files = await asyncio.to_thread(self._write_files, pending.data, pending.commit_id)
                wrote = time.monotonic()
                await self._log([
                    {"type": "files", "table": self._cfg.table.name, "files": [f.file_path for f in files],
                     "ranges": encode_ranges(pending.ranges)},
                    {"type": "intent", "commit_id": pending.commit_id, "table": self._cfg.table.name,
                     "ranges": encode_ranges(pending.ranges), "files": [f.file_path for f in files]}])
                pending = dataclasses.replace(pending, files=tuple(files), data=None)
                if self._pending is not None and self._pending.commit_id == pending.commit_id:
                    self._pending = pending
            assert pending.files is not None
            journaled = time.monotonic()
            result = await asyncio.to_thread(self._committer.commit_files, pending.files, pending.ranges,
                                             pending.commit_id)
            committed = time.monotonic()
        except OffsetOverlapError as exc:
            log.warning("%s", exc)
            await self._abandon(pending)
            await self._rewind(set(self._start))
            return
        except FrazilError as exc:
            if not exc.retriable:
                raise
            self._failed(pending, exc, started)
            return
        await self._log([
            {"type": "outcome", "commit_id": pending.commit_id,
             "status": "abandoned" if result.already_committed else "committed", "snapshot_id": result.snapshot_id},
            {"type": "offsets", "table": self._cfg.table.name,
             "offsets": {f"{t}/{p}": o for (t, p), o in sorted(result.offsets.items())}}])
        now = time.monotonic()
        log.info("cycle %s: %d rows in %.0f ms (write files %.0f, journal %.0f, commit %.0f, log outcome %.0f)",
                 pending.commit_id, pending.rows, 1000 * (now - started), 1000 * (wrote - started),
                 1000 * (journaled - wrote), 1000 * (committed - journaled), 1000 * (now - committed))
        if self._pending is not None and self._pending.commit_id == pending.commit_id:
            self._pending = None  # (a rebalance may have dropped it meanwhile)
        if self._failing_since is not None:
            log.warning("commit %s landed after %.0fs of failures; the outage is over", pending.commit_id,
                        time.monotonic() - self._failing_since)
            self._failing_since = None
        self.metrics.commit_seconds.observe(result.seconds)
        self.last_result = result
        if self.on_committed is not None:
            self.on_committed(result)
        await self._landed(result.rows, "abandoned" if result.already_committed else "committed", result.offsets)
        faults.hit("commit.after_kafka_offsets")

    async def _landed(self, rows: int, outcome: str, stored: Mapping[TopicPartition, int]) -> None:
        """Count a landed cycle (in process or by the coordinator) and move the consumer group's
        low watermark to the table's offsets."""
        self.stats.commits += 1
        self.stats.rows_committed += rows
        self.metrics.commit(outcome)
        self.metrics.rows_committed.inc(rows)
        await self._source.commit_low_watermark(stored)

    async def _handle(self, payload: Payload) -> None:
        """A control event, as a worker: answer a StartCommit; settle a reply on its CommitComplete."""
        if isinstance(payload, StartCommit):
            await self._reply(payload.commit_id)
        elif isinstance(payload, CommitComplete) and self._in_flight is not None \
                and payload.commit_id == self._in_flight.commit_id:
            await self._settle(payload.failed_tables)

    async def _reply(self, commit_id: str) -> None:
        """Everything buffered, written as data files and reported with its ranges, and every owned
        partition reported complete: one Kafka transaction (exactly-once.md, the commit cycle)."""
        assert self._channel is not None
        self._requested = None
        if self._in_flight is not None:   # its CommitComplete never came (the coordinator changed)
            await self._settle()
        if not self._start and not self._source.assignment:
            return  # not positioned yet: the coordinator waits for our partitions or times out
        new = self._take_pending()
        if new is not None:
            self._held.append(new)
        generation = self._source.generation
        payloads: list[Payload] = []
        nfiles = 0
        pending: Pending | None = None
        try:
            for i, held in enumerate(self._held):
                if held.files is None:
                    assert held.data is not None
                    files = await asyncio.to_thread(self._write_files, held.data, commit_id)
                    self._held[i] = dataclasses.replace(held, data=None, files=tuple(files))
            if new is not None:
                faults.hit("worker.after_files_written")
            table = await asyncio.to_thread(self._load_table) if self._held else None
        except (FrazilError, OSError) as exc:
            if isinstance(exc, FrazilError) and not exc.retriable:
                raise
            self._reply_failed(commit_id, exc)
            return  # no reply: the cycle goes on without our partitions; we try again at the next one
        if self._failing_since is not None:
            log.warning("reply to commit %s: files written and the table loaded after %.0fs of failures", commit_id,
                        time.monotonic() - self._failing_since)
            self._failing_since = None
        if self._held:
            assert table is not None
            pending = dataclasses.replace(_chain(self._held), commit_id=commit_id)
            self._held.clear()
            assert pending.files is not None
            refs = tuple(to_ref(f, table.spec(), table.schema()) for f in pending.files)
            ranges = tuple(OffsetRange(t, p, r.start, r.end, generation) for (t, p), r in sorted(pending.ranges.items()))
            payloads.append(DataWritten(commit_id, self._cfg.table.name, refs, ranges, str(table.metadata.table_uuid)))
            nfiles = len(refs)
            self._in_flight = pending
        owned = tuple(Assignment(t, p, generation) for t, p in sorted(self._source.assignment))
        payloads.append(DataComplete(commit_id, owned, self._last_record_ms))
        faults.hit("worker.before_reply")
        try:
            await self._channel.send(payloads, fault_point="worker.in_reply_transaction")
        except KafkaError as exc:
            # e.g. paused past the transaction timeout: the broker aborted the reply. If it did land
            # after all, our next reply overlaps the table and is refused; either way: read again.
            log.warning("reply to commit %s could not be sent (%s: %s); reading every partition again from the "
                        "table with a new control-topic producer", commit_id, type(exc).__name__, exc)
            self._in_flight = None
            self.metrics.commit("abandoned")
            await self._channel.reset_producer()
            await self._rewind(set(self._start))
            return
        faults.hit("worker.after_reply")
        log.info("replied to commit %s: %d rows in %d file(s) for %d partition(s), generation %d", commit_id,
                 pending.rows if pending else 0, nfiles, len(owned), generation)

    async def _settle(self, failed_tables: tuple[str, ...] = ()) -> None:
        """After a cycle: did our reply land? If its table's commit failed (``failed_tables``, a
        catalog or storage outage), keep the files for the next reply (rule 6). If it was refused
        (dropped as stale, an overlap), or the cycle's CommitComplete never came, read every
        partition again from the table's offsets."""
        in_flight, self._in_flight = self._in_flight, None
        assert in_flight is not None
        try:
            stored = await asyncio.to_thread(self._committer.stored_offsets)
        except Exception:
            if self._cfg.table.name not in failed_tables:
                raise
            # The catalog is down and the commit failed: hold the files. Had it landed after all,
            # the next reply would overlap the table and be refused (then we read again).
            stored = {tp: r.start for tp, r in in_flight.ranges.items()}
        missing = {tp: (stored.get(tp), r.end) for tp, r in in_flight.ranges.items() if stored.get(tp, -1) < r.end}
        if not missing:
            await self._landed(in_flight.rows, "committed", stored)
            return
        if self._cfg.table.name in failed_tables and all(stored.get(tp, r.start) == r.start
                                                          for tp, r in in_flight.ranges.items()):
            self._held.insert(0, in_flight)
            self.metrics.commit("failed")
            log.warning("commit %s of %s failed; keeping its %d file(s) (%d rows) to report again in the next cycle",
                        in_flight.commit_id, self._cfg.table.name, len(in_flight.files or ()), in_flight.rows)
            return
        log.warning("reply %s did not land for %s (table offset, reply end); reading every partition again from "
                    "the table", in_flight.commit_id,
                    ", ".join(f"{t}[{p}]={v}" for (t, p), v in sorted(missing.items())[:5]))
        self.metrics.commit("abandoned")
        await self._rewind(set(self._start))

    def _load_table(self) -> Table:
        try:
            return self._committer.load()
        except Exception as exc:  # noqa: BLE001 - catalog unreachable
            raise CommitOutcomeUnknown(f"cannot load {self._cfg.table.name}: {type(exc).__name__}: {exc}") from exc

    def _reply_failed(self, commit_id: str, exc: BaseException) -> None:
        """A worker could not write or report its files: hold them for the next cycle, loudly."""
        failing = self._outage(time.monotonic(), exc, f"a worker of {self._cfg.pipeline} could not write or "
                               "report its data files", "the partitions' next owner reads them again from the table")
        log.error("cannot answer commit %s: %s: %s. Holding %d rows for the next cycle (failing for %.0fs of "
                  "outage_timeout_s=%g); %d bytes held of a %d byte budget", commit_id, type(exc).__name__, exc,
                  sum(p.rows for p in self._held), failing, self._cfg.outage_timeout_s, self.bytes_in_use,
                  self._flow.budget_bytes)

    def _write_files(self, data: pa.Table, commit_id: str) -> list[DataFile]:
        """Data files for a pending batch: through Spark when it is a bulk flush, else in process."""
        if self._bulk is not None and data.num_rows >= self._cfg.spark.bulk_min_rows:
            # a fresh folder per attempt: a failed attempt's files are left for orphan removal
            return self._bulk.write(self._committer.load(), data, f"{commit_id}-{uuid.uuid4().hex[:8]}")
        return self._committer.write_files(data)

    async def _log(self, records: list[dict[str, Any]]) -> None:
        """Make ``records`` durable in the transaction log (fsync off the event loop)."""
        assert self._journal is not None
        await asyncio.to_thread(self._journal.append, records)

    async def _abandon(self, pending: Pending | None) -> None:
        """Give up a logged intent: its records are read again from the table's offsets."""
        if pending is not None and pending.files is not None and self._journal is not None:
            await self._log([{"type": "outcome", "commit_id": pending.commit_id, "status": "abandoned"}])
            self.metrics.commit("abandoned")

    def _recover(self) -> Journal:
        """Open the transaction log; settle every intent it has no outcome for (blocking)."""
        policy = JournalPolicy(fsync=self._cfg.txlog_fsync)
        journal, recovered = open_journal(self._cfg.txlog_dir, policy)
        for name, position, why in recovered.truncated:
            log.warning("txlog: cut a torn tail off %s at byte %d (%s)", name, position, why)
        for commit_id, intent in sorted(recovered.state.unresolved().items()):
            outcome: dict[str, Any] = {"type": "outcome", "commit_id": commit_id, "status": "abandoned"}
            try:
                files = self._committer.files_at(intent["files"])
                result = self._committer.commit_files(files, decode_ranges(intent["ranges"]), commit_id)
            except (OffsetOverlapError, OffsetGapError, FileNotFoundError) as exc:
                log.warning("txlog: commit %s from the log cannot land (%s); its records are read again from "
                            "the table's offsets", commit_id, exc)
            else:
                if result.already_committed:
                    log.info("txlog: commit %s: its records are already in the table", commit_id)
                else:
                    outcome.update(status="committed", snapshot_id=result.snapshot_id)
                    log.info("txlog: commit %s recovered: %d rows from %d logged data file(s) are in snapshot %s; "
                             "they are not read again from Kafka", commit_id, result.rows, len(files), result.snapshot_id)
            journal.append([outcome])
        return journal

    def _outage(self, started: float, exc: BaseException, failing_what: str, why_nothing_is_lost: str) -> float:
        """Count one failed cycle of an outage that began at ``started`` (if none is going on);
        after ``outage_timeout_s`` stop (rule 8). Returns how long it has been failing."""
        self._failing_since = self._failing_since or started
        self.stats.failed_commits += 1
        self.metrics.commit("failed")
        failing = time.monotonic() - self._failing_since
        if failing >= self._cfg.outage_timeout_s:
            raise CommitOutcomeUnknown(
                f"{failing_what} for {failing:.0f}s (outage_timeout_s={self._cfg.outage_timeout_s:g}); stopping. "
                f"Nothing is lost: {why_nothing_is_lost}. Last error: {type(exc).__name__}: {exc}") from exc
        return failing

    def _failed(self, pending: Pending, exc: FrazilError, cycle_started: float) -> None:
        failing = self._outage(cycle_started, exc, f"commits to {self._cfg.table.name} have failed",
                               "a restart resumes from the table")
        log.error("commit %s (%d rows) did not land: %s. Retrying every %.1fs for up to %.0fs more; "
                  "%d bytes held of a %d byte budget", pending.commit_id, pending.rows, exc,
                  self._cfg.commit_interval_s, self._cfg.outage_timeout_s - failing, self.bytes_in_use,
                  self._flow.budget_bytes)

    async def _drain(self) -> None:
        """On stop: land the pending batch and the buffer, or say what is left to read again."""
        await self._wait_task()
        if self._channel is not None:
            if self._end or self._in_flight is not None or self._held:
                log.info("stopping a worker: %d buffered rows are not replied; the partitions' next owner reads them "
                         "again from the table%s", self._buffer.rows,
                         f"; reply {self._in_flight.commit_id} lands if the coordinator commits it"
                         if self._in_flight else "")
            return
        for _ in range(2):  # the pending batch, then what the buffer holds
            if self._pending is None and not self._end:
                return
            log.info("draining: committing %d buffered and %d pending rows before stopping", self._buffer.rows,
                     self._pending.rows if self._pending else 0)
            await self._cycle()
            if self._failing_since is not None:
                break
        log.warning("stopping with uncommitted rows (%d buffered, %d pending); they are read again on restart",
                    self._buffer.rows, self._pending.rows if self._pending else 0)

    async def _rewind(self, tps: set[TopicPartition]) -> None:
        """Drop what is buffered and pending and read ``tps`` again from the table's offsets."""
        self._buffer.clear()
        self._end.clear()
        self._pending = None  # the caller abandoned it in the log
        self._held.clear()
        for tp in tps:  # take nothing of them until they are positioned again
            self._start.pop(tp, None)
        stored = await asyncio.to_thread(self._committer.stored_offsets)
        await self._source.seek(tps, stored)
        self._on_positioned(tps, stored)

    async def _on_revoked(self, tps: set[TopicPartition]) -> None:
        task = self._task
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait([task])  # its outcome is surfaced by the run loop
        dropped = (self._buffer.rows + (self._pending.rows if self._pending else 0)
                   + sum(p.rows for p in self._held))
        await self._abandon(self._pending)
        log.info("partitions revoked (%d): dropping %d uncommitted rows%s; they are read again from the table",
                 len(tps), dropped, f" and reply {self._in_flight.commit_id}" if self._in_flight else "")
        # Every partition is re-positioned from the table on the next assignment (aiokafka's
        # assignors are eager: an assignment always follows), so forget them all, not only the
        # revoked ones: a range must never claim records that were dropped here.
        self._buffer.clear()
        self._end.clear()
        self._start.clear()
        self._pending = None
        self._in_flight = None  # it may still land; the next assignment resumes from the table either way
        self._held.clear()

    async def _on_assigned(self, tps: set[TopicPartition]) -> Mapping[TopicPartition, int]:
        self._buffer.clear()
        self._end.clear()
        self._pending = None
        self._held.clear()
        self._start.clear()
        stored = await asyncio.to_thread(self._committer.stored_offsets)
        self.stats.assignments += 1
        self.metrics.assignments.inc()
        return {tp: o for tp, o in stored.items() if tp in tps}

    def _on_positioned(self, tps: set[TopicPartition], stored: Mapping[TopicPartition, int]) -> None:
        for tp in tps:
            self._start[tp] = stored.get(tp)
