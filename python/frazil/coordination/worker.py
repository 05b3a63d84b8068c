"""The worker role: answers the coordinator's StartCommit with what it buffered, and settles each
reply on CommitComplete. The same in both modes; only the channel differs (in process in single
mode, the control topic in distributed mode).

A worker holds at most one *batch*: the rows drained from every table's buffer, one *part* per
table that took rows, with the offset range each source partition covers (per table: from the
offset that table holds); each reply drains the buffers into it. A reply writes the parts' data
files (once: a part keeps its files until it lands), logs them in the transaction log and sends, in
one transaction, one ``DataWritten`` per part (files and ranges, with the assignment generation) and
``DataComplete`` (every owned partition with its watermark: the first offset not yet in every table
that takes it).
After the cycle's ``CommitComplete`` the worker compares each part's table offsets with its ranges:
- landed: the part is gone (the table's floors move); once every part has landed, so is the batch,
  and the consumer group's low watermark moves to the batch's end;
- the table's commit failed (``failed_tables``: catalog or storage down), or the table cannot be
  read: the part's files are kept and reported again next cycle (rule 6). The rows that table
  takes meanwhile wait unwritten in the part (``later``), so an outage never piles up files, and
  are written once the files have landed; the other tables' parts go on landing every cycle. The
  buffered bytes count toward backpressure, which pauses consumption when they fill;
- refused (a zombie's reply, an overlap) or no CommitComplete came: everything buffered is dropped
  and every partition is read again from the tables' offsets.
A table whose files cannot be written sits the cycle out, keeping its rows; the reply carries the
other tables. The watermark stays at the oldest offset not landed in every table. Failures of
either kind are counted on one outage clock; after ``outage_timeout_s`` the worker stops (rule 8).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from aiokafka.errors import KafkaError

from frazil import faults
from frazil.buffers.state import Buffers
from frazil.config import Config
from frazil.coordination.batch import Batch, Part
from frazil.coordination.channel import Received
from frazil.coordination.writing import PartWriter
from frazil.errors import CatalogUnavailable, CommitFailed, FrazilError, OutageTimeout, TopicMismatchError
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
from frazil.flow import retry
from frazil.flow.outage import Outage
from frazil.iceberg import offsets
from frazil.iceberg.datafiles import to_ref
from frazil.iceberg.offsets import Range, TopicPartition
from frazil.metrics import Metrics, Stats
from frazil.spark.bulk import SparkWriter
from frazil.txlog import Journal
from frazil.txlog import records as txrecords

log = logging.getLogger(__name__)
POSITION_BACKOFF = retry.Backoff(0.5, 10.0)   # reading assigned partitions' offsets in a catalog outage
# What the Parquet writers hold while a batch is written, per byte of the batch's Arrow data: measured
# 50-98 MB of resident memory for 243 MB flushes of clickstream and wide rows (pyarrow on jemalloc, cli.py).
# Counted against memory_budget_mb while the write runs.
WRITE_WORKING_SET = 0.3


class WorkerChannel(Protocol):
    async def send(self, payloads: list[Payload], *, fault_point: str | None = None) -> None: ...
    async def poll(self, timeout_ms: int) -> list[Received]: ...
    async def reset_producer(self) -> None: ...


class SourceControl(Protocol):
    """What the worker needs of the Kafka source: which partitions this process owns and in which
    group generation, moving them (a rewind), and the group's low watermark."""

    @property
    def assignment(self) -> set[TopicPartition]: ...
    @property
    def generation(self) -> int: ...
    async def seek(self, tps: set[TopicPartition], offsets: Mapping[TopicPartition, int]) -> None: ...
    async def commit_low_watermark(self, offsets: Mapping[TopicPartition, int]) -> None: ...
    async def read_topic_ids(self, topics: set[str]) -> dict[str, str] | None: ...


class Worker:
    def __init__(self, cfg: Config, *, buffers: Buffers, channel: WorkerChannel, journal: Journal,
                 source: SourceControl, metrics: Metrics, stats: Stats, bulk: SparkWriter | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``buffers``: what the ingest loop fills (the worker takes batches from it under its
        lock); ``clock``: monotonic seconds (the outage clock, the request timer, the timings)."""
        self._cfg, self._buffers, self._targets, self._channel = cfg, buffers, buffers.targets, channel
        self._journal, self._positions, self._source = journal, buffers.positions, source
        self._metrics, self._stats, self._clock = metrics, stats, clock
        self._writer = PartWriter(cfg, buffers.targets, journal, metrics, bulk, clock)
        self.batch: Batch | None = None
        self.in_flight: str | None = None         # the commit id the batch was last reported under
        self.reported: frozenset[str] = frozenset()   # the tables whose parts it reported
        self._sat_out = False                      # a table's files could not be written for that reply
        self.outage = Outage(cfg.outage_timeout_s)
        self._requested: float | None = None      # when a CommitRequest went out, not yet answered
        # when the cycle last answered began (its StartCommit): an outage is counted from the first
        # failed cycle's start, as the coordinator counts it, so both say the same duration
        self._cycle_began: float | None = None
        # the cycle last answered, until its CommitComplete: even a reply with no files carries the
        # watermark the coordinator keeps, so a draining stop waits for it
        self._answered: str | None = None
        self.writing_bytes = 0   # an estimate of what the Parquet writers hold while a batch is written
        # the id of each topic this process reads, as the broker gave it when its partitions were
        # positioned: sent with every range, so a commit never mixes two topics of one name
        self._topic_ids: dict[str, str] = {}

    @property
    def batch_bytes(self) -> int:
        """The batch's rows, and while its data files are written, the writers' working set."""
        return (self.batch.nbytes if self.batch is not None else 0) + self.writing_bytes

    @property
    def dead_letters(self) -> int:
        """Bad records held in the batch, for the dead-letter topic."""
        return sum(p.total_dead for p in self.batch.parts.values()) if self.batch is not None else 0

    @property
    def holds_records(self) -> bool:
        """Records taken from the source that a cycle would carry: buffered, or in the batch."""
        return self._positions.buffered or self.batch is not None

    @property
    def idle(self) -> bool:
        """Nothing buffered, held or waiting for its cycle."""
        return (not self._positions.buffered and self.batch is None and self.in_flight is None
                and self._answered is None)

    async def handle(self, payload: Payload, sent_ms: int | None = None) -> None:
        """One control event (sent at ``sent_ms``): answer a StartCommit; settle a reply on its
        CommitComplete."""
        if isinstance(payload, StartCommit):
            await self.reply(payload.commit_id, sent_ms)
        elif isinstance(payload, CommitComplete):
            if payload.commit_id == self._answered:
                self._answered = None
            if payload.commit_id == self.in_flight:
                await self.settle(payload.failed_tables)

    def request_due(self, full: bool, now: float) -> bool:
        """Ask for a cycle now? When full (the record-count and bytes triggers): once per cycle,
        again after ``commit_timeout_s`` if no cycle came (a lost request). While a part that
        failed to land is held, only the record count asks: the bytes may be that table's waiting
        rows, which an early cycle could only retry; the interval paces retries during an outage."""
        if not full:
            return False
        if self.batch is not None and self.outage.failing and self._targets.rows < self._cfg.max_buffer_records:
            return False
        return self._requested is None or now - self._requested >= self._cfg.coordination.commit_timeout_s

    async def request(self, reason: str) -> None:
        self._requested = self._clock()
        await self._channel.send([CommitRequest(reason)])

    async def reply(self, commit_id: str, sent_ms: int | None = None) -> None:
        """The batch (drained now if there is none), written as data files per table and reported
        with its ranges, and every owned partition reported complete with its watermark: one
        transaction."""
        started = self._clock()
        waited_ms = max(0, int(time.time() * 1000) - sent_ms) if sent_ms is not None else 0
        self._requested = None
        if self.in_flight is not None:   # its CommitComplete never came (the coordinator changed)
            await self.settle()   # a failure found here dates from the cycle it answered
        self._cycle_began = started - waited_ms / 1000   # when the coordinator started this cycle
        if not self._positions.partitions() and not self._source.assignment:
            return  # not positioned yet: the coordinator waits for our partitions or times out
        if self._positions.buffered and self._worth_taking():
            async with self._buffers.lock:
                taken_now = self._take()
            if taken_now is not None:
                # a held batch (a table's commit or write failed) takes the new rows too: the other
                # tables go on landing while it waits
                self.batch = taken_now if self.batch is None else self.batch.merge(taken_now)
        taken = self._clock()
        loaded_s = wrote_s = 0.0
        generation = self._source.generation
        payloads: list[Payload] = []
        batch = self.batch
        self.reported, self._sat_out = frozenset(), False
        if batch is not None:
            # every part in one worker thread: each await is a pass of the busy loop
            # the Parquet writers' working set counts against the budget while they run (backpressure)
            self.writing_bytes = int(WRITE_WORKING_SET * batch.nbytes)
            try:
                written, tables, loaded_s, wrote_s, failures = await asyncio.to_thread(
                    self._writer.write, batch, commit_id)
            finally:
                self.writing_bytes = 0
            batch = self.batch = written
            for _name, exc in sorted(failures.items()):   # the first by table name
                if isinstance(exc, FrazilError) and not exc.retriable:
                    raise exc
            if failures:
                # the tables that failed sit this cycle out, holding their rows; the others are reported
                self._sat_out = True
                name, exc = min(failures.items())
                self._not_landed(commit_id, exc, f"could not write or report its data files for "
                                 f"{', '.join(sorted(failures))}", answered=False)
            for name, part in sorted(batch.parts.items()):
                if name in failures:
                    continue
                table = tables[name]
                refs = tuple(to_ref(f, table.spec(), table.schema()) for f in part.files)
                ranges = tuple(OffsetRange(t, p, r.start, r.end, generation, self._topic_ids.get(t, ""))
                               for (t, p), r in sorted(part.ranges.items()))
                payloads.append(DataWritten(commit_id, name, refs, ranges, str(table.metadata.table_uuid), part.dead))
            self.reported = frozenset(batch.parts) - frozenset(failures)
            self.in_flight = commit_id if self.reported else None
        owned_tps = sorted(self._source.assignment)
        marks, once_landed = self._watermarks(owned_tps), self._watermarks(owned_tps, if_landed=True)
        owned = tuple(Assignment(t, p, generation, marks[(t, p)], once_landed[(t, p)]) for t, p in owned_tps)
        payloads.append(DataComplete(commit_id, owned, self._buffers.last_record_ms))
        faults.hit("worker.before_reply")
        logged = self._clock()
        try:
            await self._channel.send(payloads, fault_point="worker.in_reply_transaction")
            self._answered = commit_id
        except KafkaError as exc:
            # e.g. paused past the transaction timeout: the broker aborted the reply. If it did land
            # after all, our next reply overlaps the table and is refused; either way: read again.
            log.warning("reply to commit %s could not be sent (%s: %s); reading every partition again from the "
                        "table with a new control-topic producer", commit_id, type(exc).__name__, exc)
            self._metrics.commit("abandoned")
            await self._channel.reset_producer()
            await self.rewind()
            return
        if batch is not None and self.reported:
            await asyncio.to_thread(self._journal.append, [txrecords.reply(commit_id, name, batch.parts[name].paths)
                                                           for name in sorted(self.reported)])
        elif batch is not None and not batch.parts:
            self.batch = None   # every record of it was routed to no table: nothing to land
        faults.hit("worker.after_reply")
        now = self._clock()
        sent = [batch.parts[name] for name in sorted(self.reported)] if batch else []
        log.info("replied to commit %s: %d rows in %d file(s)%s for %d table(s), %d partition(s), generation %d; %d ms "
                 "after StartCommit (drain %.0f, load %.0f, write %.0f, log %.0f, send %.0f ms)", commit_id,
                 sum(p.rows for p in sent), sum(len(p.files) for p in sent),
                 f" and {n} bad record(s)" if (n := sum(len(p.dead) for p in sent)) else "", len(sent), len(owned),
                 generation, waited_ms + 1000 * (now - started), 1000 * (taken - started), 1000 * loaded_s,
                 1000 * wrote_s, 1000 * (logged - taken - loaded_s - wrote_s), 1000 * (now - logged))

    def _worth_taking(self) -> bool:
        """Drain the buffers into the batch now? Always, unless every table with buffered rows is
        one whose files wait to land: then nothing else would go on, and the rows stay in the
        native buffer (its hard cap, backpressure) rather than moving into Python memory."""
        if self.batch is None:
            return True
        waiting = {name for name, part in self.batch.parts.items() if part.files}
        return any((t.rows or t.dead) and t.name not in waiting for t in self._targets)

    def _watermarks(self, tps: Iterable[TopicPartition], *,
                    if_landed: bool = False) -> dict[TopicPartition, int | None]:
        """Per partition of ``tps``, the first offset not yet in every table that takes it: the
        oldest start of a part that has not landed, else the next batch's start. ``if_landed``:
        as it will be once every part of the reply just sent has landed (only what waits behind
        those parts, and the parts not reported, hold it back). Every part is looked at once,
        not once per partition (a cycle over many tables and partitions)."""
        waiting: dict[TopicPartition, int] = {}
        for name, part in self.batch.parts.items() if self.batch is not None else ():
            held: Part | None = part.later if if_landed and name in self.reported else part
            for tp, start in held.waiting() if held is not None else ():
                waiting[tp] = min(start, waiting.get(tp, start))
        return {tp: waiting[tp] if tp in waiting else self._positions.start(tp) for tp in tps}

    async def settle(self, failed_tables: tuple[str, ...] = ()) -> None:
        """After a cycle: did each part of our reply land? If its table's commit failed
        (``failed_tables``, a catalog or storage outage) or the table cannot be read, keep the part
        for the next reply (rule 6). If one was refused (dropped as stale, an overlap), or the
        cycle's CommitComplete never came, read every partition again from the tables' offsets."""
        commit_id, self.in_flight = self.in_flight, None
        batch = self.batch
        assert commit_id is not None and batch is not None
        started = self._clock()
        # a part that was not reported (its write failed) waits for the next reply as it is
        kept: dict[str, Part] = {n: p for n, p in batch.parts.items() if n not in self.reported}
        why: list[tuple[str, BaseException]] = []
        read = await asyncio.to_thread(self._read_offsets, sorted(self.reported))   # one thread for every table
        landed: list[txrecords.Record] = []
        done: set[str] = set()   # parts that landed
        for name in sorted(self.reported):
            part = batch.parts[name]
            target = self._targets[name]
            stored_or_error = read[name]
            if isinstance(stored_or_error, Exception):
                exc = stored_or_error
                # Whether it landed or not, hold the files and report them again: the coordinator checks
                # offsets inside its compare-and-swap, so had they landed, the next reply overlaps the
                # table and is refused, and the settle after it (catalog back) finds them in the table.
                kept[name] = part
                why.append((f"could not read {name}'s offsets to see whether it landed"
                            + (" (the coordinator's commit failed)" if name in failed_tables else
                               " (the coordinator committed; checked again at the next cycle)"), exc))
                continue
            stored = stored_or_error
            missing = {tp: (stored.get(tp), r.end) for tp, r in part.ranges.items() if stored.get(tp, -1) < r.end}
            if not missing:
                target.floors.update({tp: stored[tp] for tp in part.ranges})
                landed.append(txrecords.settled(name, part.paths, "landed"))
                done.add(name)
                self._stats.rows_committed += part.rows
                self._metrics.rows_committed.inc(part.rows)
                self._metrics.landed(name, part.rows, sum(f.file_size_in_bytes for f in part.files))
                if part.later is not None:
                    kept[name] = part.later   # the rows taken while these files waited: written next cycle
                continue
            if name in failed_tables and all(stored.get(tp, r.start) == r.start for tp, r in part.ranges.items()):
                kept[name] = part
                why.append((f"could not land in {name}", CommitFailed(f"the coordinator could not commit {name}")))
                continue
            log.warning("reply %s did not land in %s (table offset, reply end: %s); reading every partition again "
                        "from the tables", commit_id, name,
                        ", ".join(f"{t}[{p}]={v}" for (t, p), v in sorted(missing.items())[:5]))
            self._metrics.commit("abandoned")
            if landed:
                await asyncio.to_thread(self._journal.append, landed)
            self.batch = dataclasses.replace(batch, parts={n: p for n, p in batch.parts.items() if n not in done})
            await self.rewind()   # abandons the parts not landed
            return
        if landed:
            await asyncio.to_thread(self._journal.append, landed)
        self.batch = dataclasses.replace(batch, parts=kept) if kept else None
        logged = self._clock()
        if not why and not self._sat_out:   # a cycle in which every table we hold landed
            lasted = self.outage.ended(logged)
            if lasted is not None:
                log.warning("commit %s landed: the rows this worker held are in; the outage is over after %.0fs "
                            "(from the start of the first cycle that failed)", commit_id, lasted)
        if done:
            await self.landed({tp: w for tp, w in self._watermarks(batch.ranges).items() if w is not None})
        if kept:
            if done:
                log.info("commit %s settled: %d rows landed in %d table(s); %d row(s) of %s wait for the next cycle",
                         commit_id, sum(batch.parts[n].rows for n in done), len(done),
                         sum(p.total_rows for p in kept.values()), ", ".join(sorted(kept)))
            if why:
                self._not_landed(commit_id, why[0][1], "; ".join(w for w, _ in why), answered=True)
            return
        log.info("commit %s settled: %d rows landed in %d table(s) (offsets and log %.0f, low watermark %.0f ms)",
                 commit_id, batch.rows, len(batch.parts), 1000 * (logged - started), 1000 * (self._clock() - logged))

    def _read_offsets(self, names: list[str]) -> dict[str, dict[TopicPartition, int] | Exception]:
        """Blocking. Each table's offsets, or why they could not be read."""
        out: dict[str, dict[TopicPartition, int] | Exception] = {}
        for name in names:
            try:
                faults.hit("worker.before_settle", name)
                out[name] = self._targets[name].committer.stored_offsets()
            except Exception as exc:  # noqa: BLE001 - the catalog went down after (or while) the coordinator committed
                out[name] = exc
        return out

    async def landed(self, watermark: Mapping[TopicPartition, int]) -> None:
        """Count a cycle that landed rows and move the consumer group's low watermark (never ahead
        of what every table holds or does not need)."""
        self._stats.commits += 1
        self._metrics.commit("committed")
        await self._source.commit_low_watermark(watermark)
        faults.hit("commit.after_kafka_offsets")

    def _not_landed(self, commit_id: str, exc: BaseException, what: str, *, answered: bool) -> None:
        """A cycle our batch did not (wholly) land in (storage or catalog down): keep what did not,
        say so loudly, and stop after ``outage_timeout_s`` (rule 8)."""
        now = self._clock()
        failing = self.outage.failed(now, began=self._cycle_began)
        self._stats.failed_commits += 1
        self._metrics.commit("failed")
        tables = ", ".join(sorted(self.batch.parts)) if self.batch else "?"
        if self.outage.expired(now):
            raise OutageTimeout(
                f"commits to {tables} have failed for {failing:.0f}s (outage_timeout_s="
                f"{self._cfg.outage_timeout_s:g}); stopping. Nothing is lost: a restart, or the partitions' next "
                f"owner, resumes from the tables. Last error: {type(exc).__name__}: {exc}") from exc
        batch = self.batch
        rows = batch.rows if batch else 0
        if answered:
            log.warning("commit %s of %s failed; keeping its %d file(s) (%d rows) to report again in the next cycle",
                        commit_id, tables, batch.files if batch else 0, rows)
        log.error("commit %s (%d rows) did not land: %s: %s: %s. Holding them for the next cycle (failing for %.0fs "
                  "of outage_timeout_s=%g)", commit_id, rows, what, type(exc).__name__, exc, failing,
                  self._cfg.outage_timeout_s)

    def _take(self) -> Batch | None:
        """Move every buffer's rows into a batch; the next rows start where these end. A table's
        range for a partition starts at the offset it holds (it took none of the records between)."""
        ranges = self._positions.take()
        if not ranges:
            return None
        parts = {}
        for name, tps in self._positions.taken_by.items():
            target = self._targets[name]
            data = target.drain()
            deletes = target.drain_deletes()
            dead, target.dead = tuple(target.dead), []
            if data is None:   # every record it took was bad, or a delete
                assert dead or deletes is not None, f"{name}: ranges without rows"
                data = target.buffer.schema.empty_table()
            part_ranges = {tp: Range(target.floors.get(tp, ranges[tp].start), ranges[tp].end) for tp in tps}
            held = 0 if deletes is None else deletes.num_rows
            parts[name] = Part(name, data, part_ranges, data.num_rows + held,
                               nbytes=int(data.nbytes) + (0 if deletes is None else int(deletes.nbytes)),
                               since={tp: ranges[tp].start for tp in tps}, dead=dead, deletes=deletes)
        return Batch(ranges, parts)

    async def position(self, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Where ``tps`` are read from: every table's offsets and watermark (rule 2). The catalog
        or storage failing (an outage, a locked catalog) is waited out, as commits are: read again
        with backoff, loudly, for up to ``outage_timeout_s``; nothing is consumed meanwhile."""
        timeout_s = self._cfg.outage_timeout_s

        def expired(exc: BaseException, failing: float) -> BaseException:
            return CatalogUnavailable(
                f"cannot read the tables' offsets for {len(tps)} assigned partition(s) for {failing:.0f}s "
                f"(outage_timeout_s={timeout_s:g}): {type(exc).__name__}: {exc}. Nothing is lost: a restart reads "
                "them again")

        resume: dict[TopicPartition, int] = await retry.wait_out(
            lambda: asyncio.to_thread(self._targets.read_positions, tps),
            what=f"cannot read the tables' offsets for {len(tps)} assigned partition(s); nothing is consumed meanwhile",
            timeout_s=timeout_s, backoff=POSITION_BACKOFF, clock=self._clock, expired=expired,
            # frazil's own verdicts (a gap, a mismatch) are not an outage
            retriable=lambda exc: not isinstance(exc, FrazilError))
        await self._check_topics({t for t, _ in tps})
        return resume

    async def _check_topics(self, topics: set[str]) -> None:
        """Each topic's id now against the one every table keeps with its offsets (read by
        ``position`` just before): a topic deleted and created again under its name must not be read
        from offsets of the one before, whatever its log's bounds are now. Brokers without topic ids
        leave only the bounds check (``ingest/source.py``)."""
        if not topics:
            return
        for topic in topics:   # an id read before is never sent for records read after this (a recreation)
            self._topic_ids.pop(topic, None)
        current = await self._source.read_topic_ids(topics)
        if current is None:
            return
        # a topic the answer left out (a broker whose metadata lags) goes unjudged and unsent this time
        self._topic_ids.update(current)
        for target in self._targets:
            changed = offsets.recreated({t: i for t, i in target.topic_ids.items() if t in topics}, current)
            if changed:
                pipeline = self._cfg.pipeline
                detail = "; ".join(f"table {target.name} keeps offsets read from topic {t} when its id was {was}, and "
                                   f"{t} has id {now} now" for t, (was, now) in changed.items())
                raise TopicMismatchError(
                    f"{detail} (table property {offsets.topic_ids_key(pipeline)}): the topic was deleted and created "
                    "again. Nothing of the new topic was read or committed. "
                    + offsets.RECREATED_FIX.format(pipeline=pipeline))

    async def rewind(self) -> None:
        """Drop what is buffered and held and read every positioned partition again from the tables."""
        async with self._buffers.lock:   # held for no await: the loop takes nothing of tps until positioned
            tps = self._positions.partitions()
            self.drop()
        resume = await self.position(tps)
        await self._source.seek(tps, resume)
        self._positions.positioned(tps, resume)

    def drop(self) -> None:
        """Forget the buffers, the batch and the reply in flight (a rebalance, a rewind); their
        records are read again from the tables' offsets, and every partition takes nothing until
        positioned again. Call with the buffers' lock held."""
        if self.batch is not None:
            self._journal.append([txrecords.settled(name, part.paths, "abandoned")
                                  for name, part in sorted(self.batch.parts.items()) if part.files])
        self._buffers.drop()
        self.batch = None
        self.in_flight = None
        self._answered = None
        self.reported = frozenset()
