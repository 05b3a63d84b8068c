"""The ingest loop of one process: Kafka records into the native buffer, control events to the
worker role, backpressure, rebalances. It never commits: the worker answers the coordinator's
cycles over the channel (in process in single mode, the control topic in distributed mode), and
the coordinator commits (docs/architecture.md, the commit cycle).

Each pass: poll the source, take the records the table does not hold yet (rule 2), read the
control channel, hand one control event at a time to the worker in a background task (so polling,
and with it heartbeats, never stops), ask for an early cycle when the buffer is full, and pause or
resume consumption by the bytes held. On stop, single mode lands what is buffered through the
in-process coordinator; in distributed mode the partitions' next owner reads it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from frazil import _native
from frazil.config import Config
from frazil.coordination.worker import Stats, Worker, WorkerChannel
from frazil.errors import ConfigError, FrazilError, RecordDecodeError
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import evolution, inference
from frazil.events.payloads import CommitComplete, DeadLetter, Event, StartCommit
from frazil.flow.backpressure import Action, Backpressure
from frazil.flow.catch_up import CatchUp
from frazil.iceberg.offsets import TopicPartition
from frazil.ingest.buffer import RecordBuffer, RecordProblem, append_routed, values_of
from frazil.ingest.fetch import Chunk
from frazil.ingest.changes import ChangeBuffer
from frazil.ingest.positions import Positions
from frazil.ingest.routing import Router
from frazil.ingest.source import KafkaSource
from frazil.ingest import avro
from frazil.ingest.registry import Unusable, WriterSchemas
from frazil.ingest.targets import Target, Targets
from frazil.ingest.targets import value_options
from frazil.metrics import Metrics
from frazil.spark.bulk import SparkWriter
from frazil.txlog import Journal

__all__ = ["Pipeline", "Stats"]

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 200
BUSY_POLL_TIMEOUT_MS = 10   # while a control event waits or the worker's task runs: hand over quickly
LAG_EVERY_S = 2.0   # how often the per-partition lag gauges are set
DRAIN_CYCLES = 3   # on stop, at most this many cycles to land the batch and the buffer
# bad records held before a cycle is asked for: a reply names each one (~100-300 bytes on the control topic)
MAX_DEAD_LETTERS = 2_000
DECODE_THREADS = max(1, os.cpu_count() or 1)   # a poll's fetches decoded at once
EARLY_CYCLE_SHARE = 0.5   # of memory_budget_mb buffered (no batch held): ask for a cycle
CATCH_UP_LAG = 50_000     # records behind the partitions' ends that make a backlog (flow/catch_up.py)
EVOLVE_ROUNDS = 8   # schema changes one batch may make, one problem per record at a time
MAX_SCHEMA_CHANGES = 100   # Avro: schema changes one batch may make (each writer schema id may ask for one)


class Pipeline:
    def __init__(self, cfg: Config, catalog: Catalog, tables: Mapping[str, Table], *, channel: WorkerChannel,
                 journal: Journal, bulk: SparkWriter | None = None, drain_on_stop: bool = True) -> None:
        """``tables``: every configured table as ``catalog.ensure_table`` left it; ``journal`` the
        process's transaction log, already settled. Flushes of at least ``spark.bulk_min_rows``
        rows are written by ``bulk`` when given. Build on the loop."""
        self._cfg = cfg
        self._channel = channel
        self._drain_on_stop = drain_on_stop
        self._control: deque[Event] = deque()
        self._catalog = catalog
        self._targets = Targets(cfg, catalog, tables)
        self._router = Router(cfg.tables, cfg.dynamic)
        self._fan_out = not self._targets.single   # appends check the buffers' sum against the budget first
        self._dead_letter = cfg.on_bad_record == "dead_letter"
        self._writers = WriterSchemas(cfg.values) if cfg.values.avro else None   # Avro values: writer schemas by id
        self.on_new_table: Callable[[str], None] | None = None   # a table named by the records was opened
        self._positions = Positions()
        self._source = KafkaSource(cfg.kafka, on_assigned=self._on_assigned, on_positioned=self._positions.positioned,
                                   on_revoked=self._on_revoked, outage_timeout_s=cfg.outage_timeout_s)
        self._flow = Backpressure(cfg.memory_budget_bytes)
        self.metrics = Metrics(cfg.pipeline, cfg.tables[0].name if len(cfg.tables) == 1 and cfg.dynamic is None
                               else "several")
        self.metrics.budget_bytes.set(cfg.memory_budget_bytes)
        self._lag_due = 0.0   # when the lag gauges are set next (monotonic)
        self._catch_up = CatchUp(CATCH_UP_LAG)
        self.stats = Stats()
        self.worker = Worker(cfg, targets=self._targets, channel=channel, journal=journal, positions=self._positions,
                             source=self._source, metrics=self.metrics, stats=self.stats, bulk=bulk)
        self._task: asyncio.Task[None] | None = None
        self.coordinator: asyncio.Task[None] | None = None   # the in-process coordinator, when there is one

    @property
    def bytes_in_use(self) -> int:
        return self._targets.bytes + self.worker.batch_bytes

    def assignment(self) -> set[TopicPartition]:
        """The source partitions this process owns now; during a rebalance, the ones it owned
        before (a coordinator is not stopped by a rebalance that leaves it the election partition)."""
        return self._source.settled_assignment()

    @property
    def joined(self) -> bool:
        """The group assigned this process its partitions (maybe none) and they are positioned."""
        return self._source.joined

    @property
    def paused(self) -> bool:
        """Consumption is paused by backpressure."""
        return self._source.paused

    def positions(self) -> dict[TopicPartition, int]:
        """The next offset this pipeline takes from each positioned partition."""
        return self._positions.next_offsets()

    async def run(self, stop: asyncio.Event) -> None:
        """Ingest until ``stop`` is set, then drain."""
        await self._source.start()
        try:
            while not stop.is_set():
                busy = self._task is not None or self._control
                batches = await self._source.poll(BUSY_POLL_TIMEOUT_MS if busy else POLL_TIMEOUT_MS)
                if batches:
                    before = self.stats.records_in
                    await self._append(batches)
                    self._catch_up.polled(sum(self._lags().values()), self.stats.records_in - before, self._targets.rows)
                self._control.extend(r.event for r in await self._channel.poll(0) if _for_worker(r.event))
                self._check_task()
                if self._task is None and self._control:
                    self._task = self._next_control()
                full = self._full()
                if self._task is None and self.worker.request_due(full or self._catch_up.due(self._targets.rows),
                                                                  time.monotonic()):
                    self._catch_up.asked()
                    self._task = asyncio.create_task(self.worker.request(
                        f"{self._targets.rows} rows buffered" if self._targets.rows >= self._cfg.max_buffer_records
                        else "memory budget reached" if full
                        else f"caught up with a backlog: {self._targets.rows} rows buffered"))
                self._flow_control()
                now = time.monotonic()
                self.metrics.failing_seconds.set(self.worker.outage.seconds(now))
                if now >= self._lag_due:
                    self._lag_due = now + LAG_EVERY_S
                    self._report_lag()
            await self._drain()
        finally:
            if self._task is not None and not self._task.done():
                self._task.cancel()
            await self._source.stop()
        elapsed = time.monotonic() - self.stats.started
        log.info("stopped after %.1fs: %d records in (%d taken by no table, %d tombstones, %d bad), %d rows committed "
                 "in %d commits (%d failed), %d pause(s)", elapsed, self.stats.records_in, self.stats.records_unrouted,
                 self.stats.records_tombstones, self.stats.records_bad, self.stats.rows_committed, self.stats.commits,
                 self.stats.failed_commits, self.stats.pauses)

    def _lags(self) -> dict[TopicPartition, int]:
        """Per owned partition: the high watermark of its last fetch minus the next offset this
        process takes (the table's offset until it takes one)."""
        marks = self._source.highwaters()
        nexts = self._positions.next_offsets()
        return {tp: max(0, mark - nexts[tp]) for tp, mark in marks.items() if tp in nexts}

    def _report_lag(self) -> None:
        self.metrics.lag(self._lags())

    def _next_control(self) -> asyncio.Task[None] | None:
        """The worker's task for the next control event; a StartCommit whose CommitComplete is
        already here is skipped (that cycle ended without us: answering would only be refused)."""
        event = self._control.popleft()
        payload = event.payload
        if isinstance(payload, StartCommit) and any(
                isinstance(e.payload, CommitComplete) and e.payload.commit_id == payload.commit_id for e in self._control):
            log.info("commit %s ended before this worker could answer it; skipping it", payload.commit_id)
            return None
        return asyncio.create_task(self.worker.handle(payload, event.sent_ms))

    def _full(self) -> bool:
        """The record-count and bytes triggers (bad records held for the dead-letter topic count:
        a flood of them is sent in cycles of bounded size). The bytes trigger is half the budget
        while no batch is held: a backfill's rows are written while the other half fills, instead
        of ingestion pausing at the budget while one big batch is written."""
        held = self._dead_letters_held()
        return (self._targets.rows + held >= self._cfg.max_buffer_records or held >= MAX_DEAD_LETTERS
                or self._flow.paused
                or (self.worker.batch is None and self._targets.bytes >= self._flow.budget_bytes * EARLY_CYCLE_SHARE))

    def _dead_letters_held(self) -> int:
        """Bad records buffered and in the batch; none to count unless they go to a dead-letter topic."""
        return self._targets.dead_letters + self.worker.dead_letters if self._dead_letter else 0

    def _check_task(self) -> None:
        """Surface a worker task's failure on the loop that runs the pipeline."""
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
                        "; a commit is failing" if self.worker.outage.failing else "")
        elif action is Action.RESUME:
            self._source.resume()
            log.info("backpressure: %d bytes in use; resuming all partitions", self.bytes_in_use)

    async def _append(self, batches: Mapping[TopicPartition, list[Chunk]]) -> None:
        async with self.worker.appending:   # no batch is taken, and no partition dropped, halfway through
            await self._append_locked(batches)

    async def _append_locked(self, batches: Mapping[TopicPartition, list[Chunk]]) -> None:
        """Take a poll's partition fetches: in rounds of one fetch per partition (a partition's
        next fetch only after its last one was taken), the fetches that go straight to their
        tables decoded at once, on as many threads as there are cores."""
        full = False
        # several buffers: their sum against the budget, once per poll (it can pass it by one poll's records)
        room = not self._fan_out or self._targets.bytes < self._flow.budget_bytes
        pending = {tp: list(chunks) for tp, chunks in batches.items()}
        while pending:
            direct: list[_Direct] = []
            for tp in list(pending):
                chunk = pending[tp].pop(0)
                if not pending[tp]:
                    del pending[tp]
                if not self._positions.is_positioned(tp):  # not yet, or revoked while the fetch was in flight
                    pending.pop(tp, None)
                    continue
                admitted = self._admit(tp, chunk, refuse=full or not room)
                if admitted is None or admitted is False:   # left to be fetched again
                    full = full or admitted is None
                    pending.pop(tp, None)
                    continue
                if admitted is True:   # nothing in it the tables do not hold
                    continue
                start, summary = admitted
                tables = self._native_tables(tp)
                if tables is not None:
                    direct.append(_Direct(tp, chunk, start, summary, tables))
                elif not await self._take_records(tp, chunk, start, summary):
                    full = True
                    pending.pop(tp, None)
            for job, outcome in zip(direct, await self._decode(direct), strict=True):
                if outcome is None:   # the buffer's hard cap refused it whole: fetched again once there is room
                    self._source.seek_back(job.tp, job.summary.first_offset)
                    full = True
                    pending.pop(job.tp, None)
                    continue
                rows = job.summary.records - job.summary.tombstones
                if not job.tables and rows:
                    self.stats.records_unrouted += rows
                    self.metrics.records_unrouted.inc(rows)
                    log.debug("%s[%d]: %d record(s) from offset %d taken by no table", job.tp[0], job.tp[1], rows,
                              job.summary.first_offset)
                for name, these, errors, buffer in outcome:
                    await self._appended(name, job.tp, errors, these.records - these.tombstones, these.value_bytes,
                                         functools.partial(_records_at, job.chunk), decoded_by=buffer)
                self._took(job.tp, job.chunk, job.summary)
        if full:
            self._apply(self._flow.full(), f"the buffer is at its {self._flow.budget_bytes} byte cap")

    def _admit(self, tp: TopicPartition, chunk: Chunk, *, refuse: bool
               ) -> tuple[int, _native.FetchSummary] | bool | None:
        """What of one partition fetch is to be taken: ``(start, summary)``, the index of its first
        record the tables do not hold yet and the counts from there; True when there is none;
        False when it is left to be fetched again (too many bad records held), None when there is
        no room for it (``refuse``; fetched again too)."""
        fetched = chunk.fetched
        # Rule 2: never take a record the table already holds, nor one already buffered.
        start = 0
        floor = self._positions.floor(tp)
        if floor is not None:
            start = fetched.index_of(floor)
            if start:
                if self._positions.is_buffering(tp):
                    log.warning("%s[%d]: records from offset %d were delivered again below offset %d, which is "
                                "buffered; skipped them", tp[0], tp[1], fetched.summary(0).first_offset, floor)
                self.stats.records_skipped += start
            if start == len(fetched):
                return True
        summary = fetched.summary(start)
        if refuse:
            self._source.seek_back(tp, summary.first_offset)
            return None
        if self._dead_letters_held() >= MAX_DEAD_LETTERS:
            # each held bad record names itself in a reply: fetched again once they have gone out
            # (the full trigger has asked for a cycle)
            self._source.seek_back(tp, summary.first_offset)
            return False
        return start, summary

    async def _take_records(self, tp: TopicPartition, chunk: Chunk, start: int, summary: _native.FetchSummary) -> bool:
        """A fetch whose records are looked at one by one (routing by value, keyed tables, Avro,
        an operator's skips); False when the buffer's hard cap refused it (fetched again)."""
        records = chunk.records(start)
        values = [r for r in records if r.value is not None]
        try:
            if values:
                await self._route(tp, values)
            if len(values) < len(records):
                self._tombstones(tp, [r for r in records if r.value is None])
        except _native.BufferFullError:
            # Nothing of this batch was taken (one table: the buffer's hard cap refused it whole).
            self._source.seek_back(tp, summary.first_offset)
            return False
        self._took(tp, chunk, summary)
        return True

    def _took(self, tp: TopicPartition, chunk: Chunk, summary: _native.FetchSummary) -> None:
        """A fetch's records from ``summary.first_offset`` on are in the buffers."""
        # A null value (a tombstone, e.g. on a compacted topic) deletes a key: in a keyed table with
        # tombstones = "delete" it deletes the row of its Kafka key; elsewhere there is nothing to
        # land: accounted as read and counted, like a record no table takes.
        if summary.tombstones:
            self.stats.records_tombstones += summary.tombstones
            self.metrics.tombstones.inc(summary.tombstones)
            log.debug("%s[%d]: %d tombstone(s) (null values) among offsets %d..%d", tp[0], tp[1],
                      summary.tombstones, summary.first_offset, summary.last_offset)
        # the range reaches past the fetch's last whole batch: transaction markers and aborted or
        # compacted-away offsets after the last record hold no record, and a table that stops
        # short of them would show a lag of one forever on a transactional topic
        self._positions.took(tp, summary.first_offset, chunk.fetched.next_offset - 1)
        self.worker.last_record_ms = max(self.worker.last_record_ms or 0, summary.max_timestamp_ms)
        self.stats.records_in += summary.records
        self.metrics.records_consumed.inc(summary.records)

    def _native_tables(self, tp: TopicPartition) -> tuple[str, ...] | None:
        """The tables that take every record of ``tp`` when its records can go to them straight
        from the fetch (JSON values, routed by topic alone, tables open and not keyed, no
        operator's skips); None when the records must be looked at one by one first."""
        if self._writers is not None:
            return None
        route = self._router.for_topic(tp[0])
        if route.by_value:
            return None
        for name in route.always:
            if name not in self._targets:
                return None
            target = self._targets[name]
            if isinstance(target.buffer, ChangeBuffer) or target.skips(self._cfg.pipeline).get(tp):
                return None
        return route.always

    async def _decode(self, jobs: Sequence[_Direct]
                      ) -> list[list[tuple[str, _native.FetchSummary, list[RecordProblem], RecordBuffer]] | None]:
        """Every fetch of ``jobs`` into each of its tables' buffers, straight from the fetched
        bytes, each table skipping what it holds (rule 2): per job its tables' (name, counts,
        bad records, the buffer that took them), or None when the buffer's hard cap refused it. The decoding runs without the
        GIL on one thread per core (the loop goes on fetching and heartbeating meanwhile)."""
        work: list[tuple[int, str, RecordBuffer, int, _native.FetchSummary]] = []
        for i, job in enumerate(jobs):
            fetched = job.chunk.fetched
            for name in job.tables:
                target = self._targets[name]
                floor = target.floors.get(job.tp)
                begin = job.start if floor is None or floor <= job.summary.first_offset else max(job.start, fetched.index_of(floor))
                these = job.summary if begin == job.start else fetched.summary(begin)
                if these.records > these.tombstones:
                    work.append((i, name, target.buffer, begin, these))
        results: list[list[RecordProblem] | None] = [None] * len(work)

        def run(items: range) -> None:
            for k in items:
                i, _, buffer, begin, _ = work[k]
                try:
                    results[k] = buffer.append_fetched(jobs[i].tp[0], jobs[i].tp[1], jobs[i].chunk.fetched, begin)
                except _native.BufferFullError:
                    results[k] = None

        threads = min(DECODE_THREADS, len(work))
        if threads:
            await asyncio.gather(*(asyncio.to_thread(run, range(t, len(work), threads)) for t in range(threads)))
        out: list[list[tuple[str, _native.FetchSummary, list[RecordProblem], RecordBuffer]] | None] = [[] for _ in jobs]
        for (i, name, buffer, _, these), errors in zip(work, results, strict=True):
            done = out[i]
            if errors is None and len(jobs[i].tables) > 1:
                # several tables never have a cap (targets.py): a refusal here would leave some appended
                raise FrazilError(f"table {name}: its buffer refused a fetch of {jobs[i].tp[0]}[{jobs[i].tp[1]}] that "
                                  "other tables took; stopping rather than taking it twice")
            if errors is None or done is None:
                out[i] = None
                continue
            done.append((name, these, errors, buffer))
        return out

    async def _route(self, tp: TopicPartition, records: list) -> None:  # type: ignore[type-arg]
        """Append ``records`` of ``tp`` to the buffer of every table that takes them, each table
        skipping what it already holds (rule 2, per table). Records no table takes are counted; a
        table named by the records is opened (created) first."""
        values = values_of(records) if self._fan_out or self._router.for_topic(tp[0]).by_value else []
        groups = self._router.groups(tp[0], values)
        everything = range(len(records))

        def members_of(name: str) -> list[int]:
            return sorted({i for g in groups if name in g.tables for i in (everything if g.indices is None else g.indices)})

        refused: dict[str, str] = {}   # tables named by the records that cannot be opened (dead-letter mode): why
        routing_bad: list[DeadLetter] = []   # held by the carrier once the appends below went through
        for group in groups:
            members = everything if group.indices is None else group.indices
            if group.bad is not None:
                routing_bad += self._bad_for_routing(tp, records, members, *group.bad, meant_for="")
            for name in group.tables:
                if name not in self._targets and name not in refused:
                    try:
                        await self._open_table(name, tp, records[members[0]].offset, [values[i] for i in members_of(name)])
                    except RecordDecodeError as exc:
                        if not self._dead_letter:
                            raise
                        refused[name] = exc.reason
        for name, reason in refused.items():
            routing_bad += self._bad_for_routing(tp, records, members_of(name), "", reason, meant_for=name)
        if refused:   # a group left with no table is bad records now, not unrouted ones
            groups = [dataclasses.replace(g, tables=rest, bad=g.bad or (("", refused[g.tables[0]])
                                                                       if g.tables and not rest else None))
                      for g in groups for rest in [tuple(t for t in g.tables if t not in refused)]]
        taken: dict[str, list[int] | None] = {}   # by table: the indices of the records it takes (None: all)
        mixed: set[str] = set()                    # tables taking records of several groups
        for tables, indices, bad in ((g.tables, g.indices, g.bad) for g in groups):
            if not tables:
                if bad is not None:   # bad records, counted as such
                    continue
                members = everything if indices is None else indices
                self.stats.records_unrouted += len(members)
                self.metrics.records_unrouted.inc(len(members))
                log.debug("%s[%d]: %d record(s) from offset %d taken by no table", tp[0], tp[1], len(members),
                          records[members[0]].offset)
                continue
            for name in tables:
                if name not in taken:
                    taken[name] = indices   # None: all, no index list on the one-table hot path
                    continue
                merged = taken[name]
                taken[name] = [*(everything if merged is None else merged), *(everything if indices is None else indices)]
                mixed.add(name)
        targets: list[tuple[str, RecordBuffer, list[int] | None]] = []
        for name, chosen in taken.items():
            target = self._targets[name]
            floor = target.floors.get(tp)
            if name in mixed:
                assert chosen is not None
                chosen.sort()   # in offset order
            if floor is not None and records[0 if chosen is None else chosen[0]].offset < floor:   # rule 2, per table
                chosen = [i for i in (everything if chosen is None else chosen) if records[i].offset >= floor]
            skip = target.skips(self._cfg.pipeline).get(tp)
            if skip and min(skip) <= records[-1].offset and max(skip) >= records[0].offset:   # `frazil offsets --skip`
                kept = [i for i in (everything if chosen is None else chosen) if records[i].offset not in skip]
                for i in sorted(set(everything if chosen is None else chosen) - set(kept)):
                    log.warning("%s[%d]@%d: skipped for %s, as an operator said (frazil offsets --skip)", tp[0], tp[1],
                                records[i].offset, name)
                    self.metrics.records_skipped.inc()
                    self.stats.records_skipped_on_request += 1
                chosen = kept
            if chosen is None or chosen:
                targets.append((name, target.buffer, chosen))
        if self._writers is not None:   # Avro: each table's writer schemas are decided before its records go in
            results = [await self._append_avro(name, tp, records if chosen is None else [records[i] for i in chosen])
                       for name, _, chosen in targets]
        elif not self._fan_out:   # one table: its buffer's hard cap refuses a batch whole (BufferFullError)
            results = [buffer.append(tp[0], tp[1], records if chosen is None else [records[i] for i in chosen])
                       for _, buffer, chosen in targets]
        else:
            # keyed tables split each record into a row or a key first: appended one by one
            plain = [(buffer, list(everything) if chosen is None else chosen) for _, buffer, chosen in targets
                     if not isinstance(buffer, ChangeBuffer)]
            routed = iter(append_routed(tp[0], tp[1], records, values, plain) if plain else [])
            results = [buffer.append(tp[0], tp[1], records if chosen is None else [records[i] for i in chosen])
                       if isinstance(buffer, ChangeBuffer) else next(routed) for _, buffer, chosen in targets]
        if routing_bad:   # the appends went through (a full buffer would have this batch fetched again)
            self._hold_for_routing(tp, routing_bad)
        for (name, _, chosen), errors in zip(targets, results):
            chosen_records = records if chosen is None else [records[i] for i in chosen]
            await self._appended(name, tp, errors, len(chosen_records),
                                 sum(r.serialized_value_size for r in chosen_records if r.value is not None),
                                 functools.partial(_at, chosen_records))

    async def _appended(self, name: str, tp: TopicPartition, errors: list[RecordProblem], records: int,
                        value_bytes: int, lookup: Callable[[list[int]], list[Any]],
                        decoded_by: RecordBuffer | None = None) -> None:
        """After ``records`` records of ``tp`` (``value_bytes`` of values) went to table ``name``'s
        buffer (``decoded_by``, when it may since have been replaced): metrics, then its bad
        records (``errors``): schema evolution first when the table evolves (``lookup`` gives the
        records at some offsets), then the dead-letter topic or a stop."""
        buffer = self._targets[name].buffer   # a schema change may have replaced it
        if buffer.fields_ignored:
            self.metrics.fields_ignored.inc(buffer.fields_ignored)
            buffer.fields_ignored = 0
        if errors and self._targets[name].cfg.unknown_fields == "evolve" and self._writers is None:
            errors = await self._evolve(name, tp, lookup([e.offset for e in errors]), errors, decoded_by or buffer)
        self.metrics.taken(name, records - len(errors), value_bytes)
        if errors:
            first = errors[0]
            self.metrics.records_bad.inc(len(errors))
            if not self._dead_letter:
                raise RecordDecodeError(topic=tp[0], partition=tp[1], offset=first.offset, field=first.field,
                                        reason=first.reason + (f" ({len(errors) - 1} more bad record(s) in the "
                                                               "same batch)" if len(errors) > 1 else "")
                                        + (f" (for table {name})" if self._fan_out else ""))
            # not in the buffer: held with its rows, and sent once the range they share has landed
            self._targets[name].dead.extend(DeadLetter(tp[0], tp[1], e.offset, e.field, e.reason) for e in errors)
            self.stats.records_bad += len(errors)
            log.debug("%s[%d]: %d bad record(s) for %s, first at offset %d (field %r: %s); held for the dead-letter "
                      "topic", tp[0], tp[1], len(errors), name, first.offset, first.field, first.reason)
        self._positions.table_took(name, tp)

    def _tombstones(self, tp: TopicPartition, records: list) -> None:  # type: ignore[type-arg]
        """Tombstones of ``tp`` to every open keyed table that takes the topic and deletes on
        them (routing by value cannot apply: there is no value), less what each table holds."""
        for target in self._targets:
            buffer = target.buffer
            if not isinstance(buffer, ChangeBuffer) or buffer.changes.tombstones != "delete":
                continue
            if target.cfg.topics and re.fullmatch(target.cfg.topics, tp[0]) is None:
                continue
            floor = target.floors.get(tp)
            skip = target.skips(self._cfg.pipeline).get(tp, frozenset())
            taken = [r for r in records if (floor is None or r.offset >= floor) and r.offset not in skip]
            if not taken:
                continue
            errors = buffer.append_tombstones(tp[0], tp[1], taken)
            self.metrics.taken(target.name, len(taken) - len(errors), 0)
            if errors:
                self.metrics.records_bad.inc(len(errors))
                first = errors[0]
                if not self._dead_letter:
                    raise RecordDecodeError(topic=tp[0], partition=tp[1], offset=first.offset, field=first.field,
                                            reason=first.reason + (f" ({len(errors) - 1} more bad record(s) in the "
                                                                   "same batch)" if len(errors) > 1 else "")
                                            + f" (tombstone for table {target.name})")
                target.dead.extend(DeadLetter(tp[0], tp[1], e.offset, e.field, e.reason) for e in errors)
                self.stats.records_bad += len(errors)
            self._positions.table_took(target.name, tp)

    def _carrier(self) -> Target | None:
        """The table whose commits count the records routing finds bad: the first declared one."""
        first = self._cfg.tables[0].name if self._cfg.tables else None
        return self._targets[first] if first is not None and first in self._targets else None

    def _bad_for_routing(self, tp: TopicPartition, records: list, members: Sequence[int], field: str,  # type: ignore[type-arg]
                         reason: str, *, meant_for: str) -> list[DeadLetter]:
        """``records`` at ``members`` are bad records for routing itself (``meant_for``: the table
        they name, which cannot be opened; "" for none). With ``on_bad_record = "fail"`` the
        pipeline stops on the first. With ``"dead_letter"`` they are returned for
        :meth:`_hold_for_routing`, less those below the carrier's offsets (counted before); without
        a carrier open, the pipeline stops, saying so."""
        first = records[members[0]]
        more = f" ({len(members) - 1} more such record(s) in the same batch)" if len(members) > 1 else ""
        carrier = self._carrier()
        if not self._dead_letter or carrier is None:
            why = "" if not self._dead_letter else (
                "; on_bad_record = \"dead_letter\" counts records that routing finds bad in the commits of the "
                "pipeline's first declared table, and "
                + (f"{self._cfg.tables[0].name} is not open yet" if self._cfg.tables else "there is none: declare one "
                   "([table] or [[tables]], with its columns)"))
            raise RecordDecodeError(topic=tp[0], partition=tp[1], offset=first.offset, field=field,
                                    reason=reason + more + why)
        floor = carrier.floors.get(tp)
        return [DeadLetter(tp[0], tp[1], records[i].offset, field, reason, meant_for) for i in members
                if floor is None or records[i].offset >= floor]

    def _hold_for_routing(self, tp: TopicPartition, letters: list[DeadLetter]) -> None:
        """Records routing found bad go with the commits of the pipeline's first declared table
        (its *carrier*: always the same one, so across restarts its offsets say which were
        counted, as for its own bad records): its range of ``tp`` covers them."""
        carrier = self._carrier()
        assert carrier is not None   # _bad_for_routing checked
        letters.sort(key=lambda d: d.offset)
        carrier.dead.extend(letters)
        self._positions.table_took(carrier.name, tp)   # its commit counts them
        self.metrics.records_bad.inc(len(letters))
        self.stats.records_bad += len(letters)
        log.debug("%s[%d]: %d bad record(s) for routing, first at offset %d (%s: %s); held with %s for the dead-letter "
                  "topic", tp[0], tp[1], len(letters), letters[0].offset, letters[0].meant_for or "no table",
                  letters[0].reason, carrier.name)

    async def _evolve(self, name: str, tp: TopicPartition, records: list, errors: list[RecordProblem],  # type: ignore[type-arg]
                      decoded_by: RecordBuffer) -> list[RecordProblem]:
        """``unknown_fields = "evolve"``: the ``records`` of ``tp`` that did not fit table ``name``
        (``errors``, from buffer ``decoded_by``) change its schema where the evolution rules allow,
        and are appended again; a record shows one problem at a time (a new field, then a value an
        int cannot hold), so up to ``EVOLVE_ROUNDS`` times. Returns the ones that still do not fit:
        bad records."""
        target = self._targets[name]
        if target.buffer is not decoded_by:
            # A poll's fetches are decoded at once: another partition's records changed the schema
            # after these were decoded under the old one. Tried again under the new one first; only
            # what still does not fit asks for a change of its own.
            failed = {e.offset for e in errors}
            errors = target.buffer.append(tp[0], tp[1], [r for r in records if r.offset in failed])
        for _ in range(EVOLVE_ROUNDS):
            if not errors:
                return errors
            failed = {e.offset for e in errors}
            still = await self._evolve_once(name, tp, [r for r in records if r.offset in failed], errors)
            if still is None:   # the schema did not change: they are bad records
                return errors
            if not still:
                return still
            errors = still
        return errors

    async def _evolve_once(self, name: str, tp: TopicPartition, failed: list,  # type: ignore[type-arg]
                           errors: list[RecordProblem]) -> list[RecordProblem] | None:
        """One round (``iceberg/evolution.py``): once per change across every process (a change
        another made first is taken, not made again), the rows buffered so far carried under the
        new schema, then ``failed`` appended again; what still does not fit, or None when the
        schema did not change."""
        target = self._targets[name]
        # records with a field the table lacks first: their shape is what the change is made of; a
        # record that disagrees with them (bad for its own reason) is left out of the shape
        columns = {f.name for f in target.table.schema().fields}
        unknown = {e.offset for e in errors if e.field.split(".", 1)[0] not in columns}
        ordered = sorted(failed, key=lambda r: r.offset not in unknown)
        shape = inference.infer_lenient([r.value for r in ordered], maps=target.cfg.maps)
        problems = [(e.field, e.reason) for e in errors]
        if not evolution.plan(target.table.schema(), shape, problems):
            return None   # nothing the schema as last loaded lacks (a change made elsewhere would show here)
        before = target.buffer.schema
        try:
            table, made = await asyncio.to_thread(evolution.apply, target.committer.load,
                                                  lambda schema: evolution.plan(schema, shape, problems))
        except evolution.EvolutionError as exc:
            log.warning("table %s: %s[%d]@%d asks for a schema change that cannot be made: %s", name, tp[0], tp[1],
                        errors[0].offset, exc)
            return None
        schema = iceberg_catalog.arrow_schema(table, value_options(target.cfg))
        if schema == before:
            return None   # nothing to change: bad records
        if made:
            self.metrics.schema_changes.inc(len(made))
            log.warning("table %s: schema evolved to id %d by %s[%d]@%d: %s; %d buffered row(s) go under it with NULL "
                        "in new columns", name, table.schema().schema_id, tp[0], tp[1], errors[0].offset,
                        evolution.describe(made), target.rows)
        else:
            log.info("table %s: schema id %d, changed by another writer, taken for %s[%d]@%d", name,
                     table.schema().schema_id, tp[0], tp[1], errors[0].offset)
        self._targets.evolved(target, table)
        return target.buffer.append(tp[0], tp[1], failed)

    async def _append_avro(self, name: str, tp: TopicPartition, records: list) -> list[RecordProblem]:  # type: ignore[type-arg]
        """Avro ``records`` of ``tp`` into table ``name``'s buffer; writer schemas it has not seen
        are fetched and decided first (:meth:`_learn`), and the append is made again. Each schema
        change is progress (a batch may hold many writer schemas); a round that changes nothing
        decides every id, so the append after it cannot name an unknown one."""
        changes = 0
        while True:
            try:
                return self._targets[name].buffer.append(tp[0], tp[1], records)
            except _native.UnknownSchemaError as exc:
                ids = list(exc.args[1])
            if not await self._learn(name, tp, records[0].offset, ids):
                return self._targets[name].buffer.append(tp[0], tp[1], records)
            changes += 1
            if changes >= MAX_SCHEMA_CHANGES:
                raise FrazilError(f"table {name}: the writer schemas of {tp[0]}[{tp[1]}] from offset {records[0].offset} "
                                  f"changed the table's schema {changes} times in one batch; stopping rather than "
                                  "going on changing it (see the log for the changes)")

    async def _learn(self, name: str, tp: TopicPartition, offset: int, ids: list[int]) -> bool:
        """Decide each writer schema in ``ids`` for table ``name`` (``ingest/avro.py``): register it,
        refuse it (its records are bad records), or, with ``unknown_fields = "evolve"``, change the
        table first (then the buffer is new, and every id is decided again on the next append:
        returns True)."""
        assert self._writers is not None
        target = self._targets[name]
        for schema_id in ids:
            writer = await asyncio.to_thread(self._writers.get, schema_id)   # SchemaRegistryError: stop, loudly
            if isinstance(writer, Unusable):
                target.buffer.refuse(schema_id, "", writer.reason)   # type: ignore[attr-defined]
                continue
            try:
                parsed = avro.parse(writer)
            except ValueError as exc:
                target.buffer.refuse(schema_id, "", f"writer schema {schema_id}: {exc}")   # type: ignore[attr-defined]
                continue
            decision = self._decide(target, parsed)
            if isinstance(decision, avro.Evolve):
                if await self._evolve_avro(target, tp, offset, schema_id, parsed, decision):
                    return True
                decision = self._decide(target, parsed)
                if isinstance(decision, avro.Evolve):
                    change = decision.changes[0]
                    decision = avro.Refused(".".join(change.path), f"writer schema {schema_id} needs a schema change "
                                                                   f"that cannot be made ({change}); see the log")
            where = f"writer schema {schema_id}" if self._cfg.values.format == "avro-confluent" else "the writer schema"
            if isinstance(decision, avro.Refused):
                log.warning("table %s: %s (first at %s[%d]@%d) is refused, its records are bad records: field %r: %s",
                            name, where, tp[0], tp[1], offset, decision.field, decision.reason)
                target.buffer.refuse(schema_id, decision.field, f"{decision.reason} ({where})")   # type: ignore[attr-defined]
                continue
            try:
                target.buffer.register(schema_id, decision.writer, decision.reader, len(decision.ignored))   # type: ignore[attr-defined]
            except FrazilError as exc:
                target.buffer.refuse(schema_id, "", str(exc))   # type: ignore[attr-defined]
                continue
            log.info("table %s: reading %s from %s[%d]@%d%s", name, where, tp[0], tp[1], offset,
                     f" (ignoring its field(s) {', '.join(decision.ignored)})" if decision.ignored else "")
        return False

    def _decide(self, target: Target, writer: object, schema: Schema | None = None) -> avro.Readable | avro.Refused | avro.Evolve:
        return avro.resolve(writer, target.table.schema() if schema is None else schema,
                            exclude=tuple(m[0] for m in iceberg_catalog.META_COLUMNS) if target.cfg.metadata_columns else (),
                            unknown_fields=target.cfg.unknown_fields, case_insensitive=target.cfg.case_insensitive)

    async def _evolve_avro(self, target: Target, tp: TopicPartition, offset: int, schema_id: int, writer: object,
                           decision: avro.Evolve) -> bool:
        """The schema change writer schema ``schema_id`` asks of ``target``'s table, made once
        across every process; whether the table's schema changed (its buffer was then replaced)."""
        def changes_for(schema: Schema) -> list[evolution.Change]:
            again = self._decide(target, writer, schema)
            return list(again.changes) if isinstance(again, avro.Evolve) else []

        before = target.table.schema().schema_id
        try:
            table, made = await asyncio.to_thread(evolution.apply, target.committer.load, changes_for)
        except evolution.EvolutionError as exc:
            log.warning("table %s: writer schema %d (%s[%d]@%d) asks for a schema change that cannot be made: %s",
                        target.name, schema_id, tp[0], tp[1], offset, exc)
            return False
        if not made and table.schema().schema_id == before:
            return False
        if made:
            self.metrics.schema_changes.inc(len(made))
            log.warning("table %s: schema evolved to id %d for writer schema %d (%s[%d]@%d): %s; %d buffered row(s) go "
                        "under it with NULL in new columns", target.name, table.schema().schema_id, schema_id, tp[0],
                        tp[1], offset, evolution.describe(made), target.rows)
        else:
            log.info("table %s: schema id %d, changed by another writer, taken for writer schema %d", target.name,
                     table.schema().schema_id, schema_id)
        self._targets.evolved(target, table)
        return True

    async def _open_table(self, name: str, tp: TopicPartition, offset: int, sample: list[bytes]) -> None:
        """A table not open yet in this run (named by the records, or configured without columns
        and not created yet): load it, or create it (with the configured columns, or a schema
        inferred from ``sample``). When it cannot be had, the record at ``offset`` that goes there
        is a bad record."""
        try:
            table_cfg = self._cfg.table_named(name)   # a configured table created on its first records
        except KeyError:
            assert self._cfg.dynamic is not None
            table_cfg = self._cfg.dynamic.table_config(name)
        inferred = None if table_cfg.columns else (lambda: inference.schema(
            inference.infer(sample, maps=table_cfg.maps),
            iceberg_catalog.META_COLUMNS if table_cfg.metadata_columns else ()))
        try:
            table = await asyncio.to_thread(iceberg_catalog.ensure_table, self._catalog, table_cfg,
                                            iceberg_catalog.maintenance_properties(self._cfg.maintenance), schema=inferred)
            target = await asyncio.to_thread(self._targets.build, table_cfg, table, inferred=inferred is not None)
            self._targets.add_built(target)   # on the loop: worker threads iterate over copies
        except (ConfigError, inference.InferenceError) as exc:
            raise RecordDecodeError(topic=tp[0], partition=tp[1], offset=offset, field="",
                                    reason=f"it goes to table {name}, which cannot be opened: {exc}") from exc
        log.info("table %s: taking the records that name it (%d columns%s)", name, len(table.schema().fields),
                 ", schema inferred from the first ones: a field it does not have is a bad record" if inferred else "")
        if self.on_new_table is not None:
            self.on_new_table(name)

    async def _drain(self) -> None:
        """On stop. Single mode: land the batch and the buffer through the in-process coordinator
        (a few cycles at most; none while commits are failing). Distributed mode: hand over."""
        await self._wait_task()
        worker = self.worker
        if not self._drain_on_stop:
            if not worker.idle:
                log.info("stopping a worker: %d buffered rows are not replied; the partitions' next owner reads them "
                         "again from the table%s", self._targets.rows,
                         f"; reply {worker.in_flight} lands if the coordinator commits it" if worker.in_flight else "")
            return
        cycles = 0
        requested = False
        timeout_s = self._cfg.coordination.commit_timeout_s + self._cfg.commit_interval_s
        deadline = time.monotonic() + DRAIN_CYCLES * timeout_s + 10
        while not worker.idle and cycles < DRAIN_CYCLES and not worker.outage.failing:
            if self.coordinator is None or self.coordinator.done() or time.monotonic() > deadline:
                break
            if not requested and worker.in_flight is None:
                log.info("draining: committing %d buffered and %d held rows before stopping", self._targets.rows,
                         worker.batch.rows if worker.batch else 0)
                await worker.request("draining before stop")
                requested = True
            events = [*self._control,
                      *(r.event for r in await self._channel.poll(POLL_TIMEOUT_MS) if _for_worker(r.event))]
            self._control.clear()
            for event in events:
                await worker.handle(event.payload, event.sent_ms)
                if isinstance(event.payload, CommitComplete):
                    cycles += 1
                    requested = False
        if not worker.idle:
            log.warning("stopping with uncommitted rows (%d buffered, %d held); they are read again on restart",
                        self._targets.rows, worker.batch.rows if worker.batch else 0)

    async def _on_revoked(self, tps: set[TopicPartition]) -> None:
        task = self._task
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait([task])  # its outcome is surfaced by the run loop
        worker = self.worker
        log.info("partitions revoked (%d): dropping %d uncommitted rows%s; they are read again from the table",
                 len(tps), self._targets.rows + (worker.batch.rows if worker.batch else 0),
                 f" and reply {worker.in_flight}" if worker.in_flight else "")
        # Every partition is re-positioned from the table on the next assignment (aiokafka's
        # assignors are eager: an assignment always follows), so forget them all, not only the
        # revoked ones: a range must never claim records that were dropped here.
        async with worker.appending:   # not halfway through a poll's appends (only they hold it across an await)
            worker.drop()   # a reply in flight may still land; the next assignment resumes from the table either way
            self._positions.forget()

    async def _on_assigned(self, tps: set[TopicPartition]) -> Mapping[TopicPartition, int]:
        async with self.worker.appending:
            self.worker.drop()
            self._positions.forget()
        resume = await self.worker.position(tps)
        self.stats.assignments += 1
        self.metrics.assignments.inc()
        return resume


def _for_worker(event: Event) -> bool:
    """The events a worker acts on; the rest of the channel (replies, CommitToTable, requests) is
    the coordinator's business."""
    return isinstance(event.payload, (StartCommit, CommitComplete))


@dataclasses.dataclass(frozen=True)
class _Direct:
    """A partition fetch going straight to ``tables`` from index ``start`` (``summary``)."""

    tp: TopicPartition
    chunk: Chunk
    start: int
    summary: _native.FetchSummary
    tables: tuple[str, ...]


def _records_at(chunk: Chunk, offsets: list[int]) -> list[Any]:
    return list(chunk.records(offsets=sorted(offsets)))


def _at(records: Sequence[Any], offsets: list[int]) -> list[Any]:
    """The records at ``offsets``."""
    wanted = set(offsets)
    return [r for r in records if r.offset in wanted]
