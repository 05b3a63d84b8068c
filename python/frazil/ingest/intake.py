"""Intake: a poll's partition fetches into the tables' buffers.

For each fetch, what is taken is decided once: the records from the partition's position on
(rule 2 for the pipeline: never one a table already holds, nor one already buffered), and per
table from its own floor on, less an operator's skips (:class:`~frazil.ingest.fanout.Take`). A
fetch whose records go to open plain tables (JSON values), by topic or by a route field read
natively, is decoded straight from the fetched bytes, every such fetch of a poll at once on one
thread per core, off the GIL; the rest is looked at record by record (``ingest/fanout.py``).
After each append its bad records are settled: a schema change where the table evolves
(``ingest/evolve.py``), then the dead-letter topic or a stop (``ingest/bad_records.py``).

Intake never pauses the source: it says when the buffers were full (the loop applies
backpressure), and a fetch it could not take is sought back and fetched again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from frazil import _native
from frazil.buffers.changes import ChangeBuffer
from frazil.buffers.record_buffer import RecordBuffer, RecordProblem
from frazil.buffers.state import Buffers
from frazil.buffers.targets import Target
from frazil.config import AVRO_FORMATS, Config
from frazil.errors import BufferFull, FrazilError, UnknownWriterSchemas
from frazil.iceberg.offsets import TopicPartition
from frazil.ingest.bad_records import BadRecords, too_many
from frazil.ingest.evolve import Evolver
from frazil.ingest.fanout import Appended, Fanout, Take
from frazil.ingest.opening import Opener, Wanted
from frazil.ingest.routing import Group, Router
from frazil.kafka.fetch import Chunk, Record
from frazil.metrics import Metrics, Stats

log = logging.getLogger(__name__)

DECODE_THREADS = max(1, os.cpu_count() or 1)   # a poll's fetches decoded at once


class Seeker(Protocol):
    def seek_back(self, tp: TopicPartition, offset: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class _Share:
    """What one table takes of a fetch routed by value: the records at ``indices`` (the fetch's,
    ascending), with their ``value_bytes``."""

    indices: list[int]
    value_bytes: int


@dataclasses.dataclass(frozen=True)
class _Direct:
    """A partition fetch going straight to ``tables`` from index ``start`` (``summary``): each
    takes every record, or its ``shares`` entry when the fetch is routed by value (``unrouted``:
    the records no table takes)."""

    tp: TopicPartition
    chunk: Chunk
    start: int
    summary: _native.FetchSummary
    tables: tuple[str, ...]
    shares: Mapping[str, _Share] | None = None
    unrouted: int = 0


# per table of a job: its name, records and value bytes taken, bad records, the buffer that took them
_Decoded = tuple[str, int, int, list[RecordProblem], RecordBuffer]


@dataclasses.dataclass
class _Work:
    """One table's append of one job's fetch: every record from index ``start`` on, or those at
    ``at`` (its share of a fetch routed by value); ``records`` and ``value_bytes`` of them. The
    outcome: its bad records (None: the buffer's cap refused it), or the Avro writer schemas the
    buffer did not know (``unknown``, learned on the loop), and the buffer that took them."""

    job: int
    table: str
    buffer: RecordBuffer
    start: int
    at: list[int] | None
    records: int
    value_bytes: int
    errors: list[RecordProblem] | None = None
    unknown: list[int] | None = None


class Intake:
    def __init__(self, cfg: Config, buffers: Buffers, router: Router, source: Seeker, *, fanout: Fanout,
                 opener: Opener, evolver: Evolver, bad: BadRecords, metrics: Metrics, stats: Stats,
                 letters_elsewhere: Callable[[], int] = lambda: 0) -> None:
        """``letters_elsewhere``: bad records held past the buffers (in the worker's batch), which
        count toward the dead-letter limits too (``bad_records.too_many``)."""
        self._cfg, self._buffers, self._targets, self._positions = cfg, buffers, buffers.targets, buffers.positions
        self._router, self._source, self._fanout, self._evolver, self._bad = router, source, fanout, evolver, bad
        self._opener = opener
        self._metrics, self._stats = metrics, stats
        self._letters_elsewhere = letters_elsewhere
        self._budget = cfg.memory_budget_bytes

    def letters_held(self) -> int:
        """Bad records buffered and in the batch; none to count unless they go to a dead-letter topic."""
        return self._bad.held + self._letters_elsewhere() if self._bad.dead_letter else 0

    def letters_full(self) -> bool:
        """Whether the bad records held are enough to ask for a cycle (and to fetch no more until then)."""
        return self._bad.dead_letter and too_many(self.letters_held(), self._bad.size)

    async def take(self, batches: Mapping[TopicPartition, list[Chunk]]) -> bool:
        """Take a poll's partition fetches: in rounds of one fetch per partition (a partition's next
        fetch only after its last one was taken). Returns whether the buffers were full: something
        was left to be fetched again."""
        async with self._buffers.lock:   # no batch is taken, and no partition dropped, halfway through
            await self._open_named(batches)
            return await self._take(batches)

    async def _open_named(self, batches: Mapping[TopicPartition, list[Chunk]]) -> None:
        """Open the tables a poll's topics name that are not open yet (``[dynamic]`` tables named
        by ``{topic}``, configured ones created on their first records), before its fetches are
        taken: then a table's first fetches go straight from the fetched bytes too, not record by
        record. A table that cannot be opened is left to the record-by-record path, which makes
        its records bad records (or stops) with the reason."""
        wanted: dict[str, Wanted] = {}
        for tp, chunks in batches.items():
            route = self._router.for_topic(tp[0])
            missing = [] if route.by_value else [n for n in route.always if n not in self._targets and n not in wanted]
            if not missing or not chunks or not len(chunks[0].fetched) or not self._positions.is_positioned(tp):
                continue   # the usual poll: every table open, nothing more looked at
            first = chunks[0].fetched.summary(0)
            if first.records == first.tombstones:   # nothing to land: a table is not created for tombstones
                continue
            for name in missing:
                wanted[name] = Wanted(name, tp, first.first_offset, functools.partial(_values, chunks[0]))
        if wanted:
            for name, exc in (await self._opener.open_all(list(wanted.values()))).items():
                log.debug("table %s not opened ahead of its records: %s", name, exc.reason)

    async def _take(self, batches: Mapping[TopicPartition, list[Chunk]]) -> bool:
        full = False
        # several buffers: their sum against the budget, once per poll (it can pass it by one poll's records)
        room = self._targets.single or self._targets.bytes < self._budget
        pending = {tp: list(chunks) for tp, chunks in batches.items()}
        while pending:
            direct: list[_Direct] = []
            routed: list[tuple[TopicPartition, Chunk, int, _native.FetchSummary]] = []
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
                tables = self._direct_tables(tp, summary)
                if tables is not None:
                    direct.append(_Direct(tp, chunk, start, summary, tables))
                elif self._may_route(tp, summary):
                    routed.append((tp, chunk, start, summary))
                elif not await self._one_by_one(tp, chunk, start, summary):
                    full = True
                    pending.pop(tp, None)
            for (tp, chunk, start, summary), groups in zip(routed, await self._group(routed), strict=True):
                job = self._routed(tp, chunk, start, summary, groups)
                if job is not None:
                    direct.append(job)
                elif not await self._one_by_one(tp, chunk, start, summary):
                    full = True
                    pending.pop(tp, None)
            for job, outcome in zip(direct, await self._decode(direct), strict=True):
                if outcome is None:   # the buffer's hard cap refused it whole: fetched again once there is room
                    self._source.seek_back(job.tp, job.summary.first_offset)
                    full = True
                    pending.pop(job.tp, None)
                    continue
                rows = job.summary.records - job.summary.tombstones
                unrouted = job.unrouted if job.shares is not None else 0 if job.tables else rows
                if unrouted:
                    self._stats.records_unrouted += unrouted
                    self._metrics.records_unrouted.inc(unrouted)
                    log.debug("%s[%d]: %d record(s) from offset %d taken by no table", job.tp[0], job.tp[1],
                              unrouted, job.summary.first_offset)
                lookup = functools.partial(_records_at, job.chunk)
                for name, records, value_bytes, errors, buffer in outcome:
                    await self._settle(job.tp, Appended(name, errors, records, value_bytes, lookup, buffer))
                self._took(job.tp, job.chunk, job.summary)
        return full

    def _admit(self, tp: TopicPartition, chunk: Chunk, *,
               refuse: bool) -> tuple[int, _native.FetchSummary] | bool | None:
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
                self._stats.records_skipped += start
            if start == len(fetched):
                return True
        summary = fetched.summary(start)
        if refuse:
            self._source.seek_back(tp, summary.first_offset)
            return None
        if self.letters_full():
            # each held bad record names itself in a reply: fetched again once they have gone out
            # (the full trigger has asked for a cycle)
            self._source.seek_back(tp, summary.first_offset)
            return False
        return start, summary

    def _direct_tables(self, tp: TopicPartition, summary: _native.FetchSummary) -> tuple[str, ...] | None:
        """The tables that take every record of ``tp`` when its records can go to them straight
        from the fetch (routed by topic alone, tables open, keyed ones upserts rather than change
        envelopes, no record among them an operator said to skip); None when the records must be
        looked at one by one first."""
        route = self._router.for_topic(tp[0])
        if route.by_value:
            return None
        for name in route.always:
            if name not in self._targets:
                return None
            target = self._targets[name]
            self._targets.fit_format(target, tp[0])
            if not target.buffer.reads_fetched or self._skips_within(target, tp, summary):
                return None
        return route.always

    def _skips_within(self, target: Target, tp: TopicPartition, summary: _native.FetchSummary) -> bool:
        """Whether a record an operator told ``target`` to skip is among a fetch's offsets (skips
        are kept with the table for good: one the partition has passed changes nothing)."""
        skips = target.skips(self._cfg.pipeline).get(tp, ())
        return any(summary.first_offset <= o <= summary.last_offset for o in skips)

    def _may_route(self, tp: TopicPartition, summary: _native.FetchSummary) -> bool:
        """Whether a fetch routed by value may go straight to its tables (``_routed`` decides once
        its records are grouped): JSON values and no tombstones (they go to keyed tables)."""
        return (self._targets.format_of(tp[0]) not in AVRO_FORMATS and not summary.tombstones
                and self._router.for_topic(tp[0]).by_value)

    async def _group(self, fetches: Sequence[tuple[TopicPartition, Chunk, int, _native.FetchSummary]]
                     ) -> list[list[Group]]:
        """The records of each fetch routed by value grouped by their route fields, read natively
        from the fetched bytes on one thread per core (the loop goes on meanwhile)."""
        out: list[list[Group]] = [[] for _ in fetches]

        def run(items: range) -> None:
            for k in items:
                tp, chunk, start, _ = fetches[k]
                out[k] = self._router.groups_fetched(tp[0], chunk.fetched, start)

        threads = min(DECODE_THREADS, len(fetches))
        if threads:
            await asyncio.gather(*(asyncio.to_thread(run, range(t, len(fetches), threads)) for t in range(threads)))
        return out

    def _routed(self, tp: TopicPartition, chunk: Chunk, start: int, summary: _native.FetchSummary,
                groups: list[Group]) -> _Direct | None:
        """A fetch routed by value (its records in ``groups``), when they can go to their tables
        straight from the fetch: every table they name open, plain, holding none of them and
        without an operator's skip among them, and no record that routing itself finds bad. None
        when they must be looked at one by one (the rest of the time, such as a table's first
        records)."""
        indices: dict[str, list[list[int]]] = {}
        value_bytes: dict[str, int] = {}
        unrouted = 0
        for group in groups:
            if group.bad is not None or group.indices is None:
                return None
            if not group.tables:
                unrouted += len(group.indices)
                continue
            for name in group.tables:
                if name not in indices:
                    if name not in self._targets:
                        return None   # opened on its first records, one by one
                    target = self._targets[name]
                    self._targets.fit_format(target, tp[0])
                    if isinstance(target.buffer, ChangeBuffer) or not target.buffer.reads_fetched \
                            or self._skips_within(target, tp, summary):
                        return None
                    floor = target.floors.get(tp)
                    if floor is not None and floor > summary.first_offset:
                        return None   # it holds some of them: its records are picked one by one
                    indices[name], value_bytes[name] = [], 0
                indices[name].append(group.indices)
                value_bytes[name] += group.value_bytes or 0
        shares = {name: _Share(parts[0] if len(parts) == 1 else sorted(itertools.chain.from_iterable(parts)),
                               value_bytes[name]) for name, parts in indices.items()}
        return _Direct(tp, chunk, start, summary, tuple(shares), shares, unrouted)

    async def _one_by_one(self, tp: TopicPartition, chunk: Chunk, start: int, summary: _native.FetchSummary) -> bool:
        """A fetch whose records are looked at one by one; False when the buffer's hard cap
        refused it (fetched again)."""
        records = chunk.records(start)
        values = [r for r in records if r.value is not None]
        try:
            appended = await self._fanout.route(tp, values) if values else []
        except BufferFull:
            # Nothing of this batch was taken (one table: the buffer's hard cap refused it whole).
            self._source.seek_back(tp, summary.first_offset)
            return False
        for outcome in appended:
            await self._settle(tp, outcome)
        if len(values) < len(records):
            for outcome in self._fanout.tombstones(tp, [r for r in records if r.value is None]):
                await self._settle(tp, outcome)
        self._took(tp, chunk, summary)
        return True

    async def _settle(self, tp: TopicPartition, appended: Appended) -> None:
        """After an append: metrics, then its bad records: a schema change first when the table
        evolves, then the dead-letter topic or a stop."""
        name = appended.table
        # the buffer that decoded them, and the table's now (a schema change may have replaced it)
        for buffer in {id(b): b for b in (appended.decoded_by, self._targets[name].buffer)}.values():
            ignored = buffer.take_fields_ignored()
            if ignored:
                self._metrics.fields_ignored.inc(ignored)
            filtered = buffer.take_filtered()
            if filtered:
                self._metrics.filtered(name, filtered)
                self._stats.records_filtered += filtered
        errors = appended.errors
        if (errors and not appended.what and self._targets[name].cfg.unknown_fields == "evolve"
                and self._targets[name].format not in AVRO_FORMATS):
            errors = await self._evolver.rescue(name, tp, appended.lookup([e.offset for e in errors]), errors,
                                                appended.decoded_by)
        self._metrics.taken(name, appended.records - len(errors), appended.value_bytes)
        self._bad.found(name, tp, errors, what=appended.what, lookup=appended.lookup)
        self._positions.table_took(name, tp)

    def _took(self, tp: TopicPartition, chunk: Chunk, summary: _native.FetchSummary) -> None:
        """A fetch's records from ``summary.first_offset`` on are in the buffers."""
        # A null value (a tombstone, e.g. on a compacted topic) deletes a key: in a keyed table with
        # tombstones = "delete" it deletes the row of its Kafka key; elsewhere there is nothing to
        # land: accounted as read and counted, like a record no table takes.
        if summary.tombstones:
            self._stats.records_tombstones += summary.tombstones
            self._metrics.tombstones.inc(summary.tombstones)
            log.debug("%s[%d]: %d tombstone(s) (null values) among offsets %d..%d", tp[0], tp[1],
                      summary.tombstones, summary.first_offset, summary.last_offset)
        # the range reaches past the fetch's last whole batch: transaction markers and aborted or
        # compacted-away offsets after the last record hold no record, and a table that stops
        # short of them would show a lag of one forever on a transactional topic
        self._positions.took(tp, summary.first_offset, chunk.fetched.next_offset - 1)
        self._buffers.took_until(summary.max_timestamp_ms)
        self._stats.records_in += summary.records
        self._metrics.records_consumed.inc(summary.records)

    async def _decode(self, jobs: Sequence[_Direct]) -> list[list[_Decoded] | None]:
        """Every fetch of ``jobs`` into each of its tables' buffers, straight from the fetched
        bytes, each table skipping what it holds (rule 2): per job its tables' (name, counts, bad
        records, the buffer that took them), or None when the buffer's hard cap refused it. The
        decoding runs without the GIL on one thread per core (the loop goes on fetching and
        heartbeating meanwhile)."""
        work: list[_Work] = []
        for i, job in enumerate(jobs):
            fetched = job.chunk.fetched
            for name in job.tables:
                target = self._targets[name]
                if job.shares is not None:
                    share = job.shares[name]
                    work.append(_Work(i, name, target.buffer, 0, share.indices, len(share.indices), share.value_bytes))
                    continue
                begin = Take.of(target, job.tp, self._cfg.pipeline).begin(fetched, job.start, job.summary.first_offset)
                these = job.summary if begin == job.start else fetched.summary(begin)
                buffer = target.buffer
                keyed = isinstance(buffer, ChangeBuffer)   # its tombstones delete rows, or are counted there
                deletes = isinstance(buffer, ChangeBuffer) and buffer.changes.tombstones == "delete"
                taken = these.records if deletes else these.records - these.tombstones
                if taken or (keyed and these.records):
                    work.append(_Work(i, name, buffer, begin, None, taken, these.value_bytes))

        def append(item: _Work, buffer: RecordBuffer) -> list[RecordProblem]:
            tp = jobs[item.job].tp
            return buffer.append_fetched(tp[0], tp[1], jobs[item.job].chunk.fetched, item.start, item.at)

        def run(items: Sequence[_Work]) -> None:
            for item in items:
                try:
                    item.errors = append(item, item.buffer)
                except BufferFull:
                    item.errors = None
                except UnknownWriterSchemas as exc:   # decided below, on the loop
                    item.unknown = exc.ids

        threads = min(DECODE_THREADS, len(work))
        if threads:
            await asyncio.gather(*(asyncio.to_thread(run, work[t::threads]) for t in range(threads)))
        for item in work:
            if item.unknown is None:
                continue
            tp, name = jobs[item.job].tp, item.table
            # the ids the append named are unknown to the buffer it used; a schema change since
            # (another fetch's, above) made a new buffer that knows none yet: it is asked again
            unknown = item.unknown if self._targets[name].buffer is item.buffer else None
            first = jobs[item.job].chunk.fetched.summary(item.start).first_offset
            try:
                item.errors = await self._evolver.learning(name, tp, first, functools.partial(append, item), unknown)
            except BufferFull:
                item.errors = None
            item.buffer = self._targets[name].buffer   # the one that took them (a schema change replaces it)
        out: list[list[_Decoded] | None] = [[] for _ in jobs]
        for item in work:
            i, done = item.job, out[item.job]
            if item.errors is None and len(jobs[i].tables) > 1:
                # several tables never have a cap (targets.py): a refusal here would leave some appended
                raise FrazilError(f"table {item.table}: its buffer refused a fetch of {jobs[i].tp[0]}[{jobs[i].tp[1]}] "
                                  "that other tables took; stopping rather than taking it twice")
            if item.errors is None or done is None:
                out[i] = None
                continue
            done.append((item.table, item.records, item.value_bytes, item.errors, item.buffer))
        return out


def _records_at(chunk: Chunk, offsets: list[int]) -> list[Record]:
    return list(chunk.records(offsets=sorted(offsets)))


def _values(chunk: Chunk) -> list[bytes]:
    """The values of a fetch (its tombstones left out): a sample for a schema inferred from records."""
    return [r.value for r in chunk.records(0) if r.value is not None]

