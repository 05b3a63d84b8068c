"""Records looked at one by one on their way into the tables' buffers: routing by value, tables
named by the records, keyed tables, Avro, an operator's skips. Each batch of one partition is
split into groups going to the same tables (``ingest/routing.py``), each table takes its records
less what it holds (:class:`~frazil.ingest.intake.Take`), and the appends are made: with several
plain tables in one native call, so the columns are converted once whatever the fan-out.

Records no table takes are counted as unrouted (read, landed nowhere, never silently lost).
Tombstones (null values) go to the open keyed tables that delete on them."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from frazil import _native
from frazil.buffers.changes import ChangeBuffer
from frazil.buffers.record_buffer import RecordBuffer, RecordProblem, append_routed, values_of
from frazil.buffers.state import Buffers
from frazil.buffers.targets import Target
from frazil.config import AVRO_FORMATS, Config
from frazil.errors import RecordDecodeError
from frazil.events.payloads import DeadLetter
from frazil.iceberg.offsets import TopicPartition
from frazil.ingest.bad_records import BadRecords
from frazil.ingest.evolve import Evolver
from frazil.ingest.opening import Opener
from frazil.ingest.routing import Router
from frazil.kafka.fetch import Record
from frazil.metrics import Metrics, Stats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Take:
    """What one table takes of one source partition: no record below ``floor`` (it holds them:
    rule 2, per table) and none an operator said to skip (``frazil offsets --skip``)."""

    table: str
    floor: int | None
    skips: frozenset[int]

    @classmethod
    def of(cls, target: Target, tp: TopicPartition, pipeline: str) -> Take:
        return cls(target.name, target.floors.get(tp), target.skips(pipeline).get(tp, frozenset()))

    def begin(self, fetched: _native.Fetched, start: int, first_offset: int) -> int:
        """The index in ``fetched`` of the first record this table takes from index ``start`` on
        (``first_offset``: the offset there), for a fetch taken whole: a table with a skip among
        the fetch's offsets takes its records one by one instead (``Intake._direct_tables``)."""
        if self.floor is None or self.floor <= first_offset:
            return start
        return max(start, fetched.index_of(self.floor))


@dataclass(frozen=True)
class Appended:
    """What one append to table ``table``'s buffer left to account for: ``errors`` among
    ``records`` records (``value_bytes`` of values), the records at some offsets (``lookup``, for
    a schema change), the buffer that decoded them (a schema change may have replaced it since),
    and ``what`` they were ("" records, "tombstone" null values)."""

    table: str
    errors: list[RecordProblem]
    records: int
    value_bytes: int
    lookup: Callable[[list[int]], list[Record]]
    decoded_by: RecordBuffer
    what: str = ""


class Fanout:
    def __init__(self, cfg: Config, buffers: Buffers, router: Router, *, opener: Opener, evolver: Evolver,
                 bad: BadRecords, metrics: Metrics, stats: Stats) -> None:
        self._cfg, self._buffers, self._targets, self._router = cfg, buffers, buffers.targets, router
        self._opener, self._evolver, self._bad = opener, evolver, bad
        self._metrics, self._stats = metrics, stats
        self._several = not self._targets.single   # a batch goes to several buffers without a byte cap

    def take(self, tp: TopicPartition, target: Target, chosen: list[int] | None,
             records: Sequence[Record]) -> list[int] | None:
        """Of ``records`` (one partition's, in offset order) at ``chosen`` (None: all), the ones
        ``target`` takes (None: all of them): none below its floor, none an operator said to skip
        (logged and counted here). Lists are built only where something is left out."""
        rule = Take.of(target, tp, self._cfg.pipeline)
        indices: Sequence[int] = range(len(records)) if chosen is None else chosen
        if not indices:
            return []
        low, high = records[indices[0]].offset, records[indices[-1]].offset
        if rule.floor is not None and low < rule.floor:
            chosen = indices = [i for i in indices if records[i].offset >= rule.floor]
        if rule.skips and min(rule.skips) <= high and max(rule.skips) >= low:
            kept = [i for i in indices if records[i].offset not in rule.skips]
            if len(kept) < len(indices):
                for i in indices:
                    if records[i].offset in rule.skips:
                        log.warning("%s[%d]@%d: skipped for %s, as an operator said (frazil offsets --skip)", tp[0],
                                    tp[1], records[i].offset, target.name)
                        self._metrics.records_skipped.inc()
                        self._stats.records_skipped_on_request += 1
                chosen = kept
        return chosen

    async def route(self, tp: TopicPartition, records: list[Record]) -> list[Appended]:
        """Append ``records`` of ``tp`` (all with a value) to the buffer of every table that takes
        them. Raises ``BufferFull`` (one table with a byte cap: nothing taken)."""
        values = values_of(records) if self._several or self._router.for_topic(tp[0]).by_value else []
        groups = self._router.groups(tp[0], values)
        everything = range(len(records))

        def members_of(name: str) -> list[int]:
            return sorted({i for g in groups if name in g.tables
                           for i in (everything if g.indices is None else g.indices)})

        def sample(name: str) -> list[bytes]:
            return [(values[i] if values else records[i].value or b"") for i in members_of(name)]

        refused: dict[str, str] = {}   # tables named by the records that cannot be opened (dead-letter mode): why
        routing_bad: list[DeadLetter] = []   # held by the carrier once the appends below went through
        for group in groups:
            members = everything if group.indices is None else group.indices
            if group.bad is not None:
                routing_bad += self._bad.for_routing(tp, records, members, *group.bad, meant_for="")
            for name in group.tables:
                if name not in self._targets and name not in refused:
                    try:
                        await self._opener.open(name, tp, records[members[0]].offset,
                                                functools.partial(sample, name))
                    except RecordDecodeError as exc:
                        if not self._bad.dead_letter:
                            raise
                        refused[name] = exc.reason
        for name, reason in refused.items():
            routing_bad += self._bad.for_routing(tp, records, members_of(name), "", reason, meant_for=name)
        if refused:   # a group left with no table is bad records now, not unrouted ones
            groups = [dataclasses.replace(g, tables=rest, bad=g.bad or (("", refused[g.tables[0]])
                                                                       if g.tables and not rest else None))
                      for g in groups for rest in [tuple(t for t in g.tables if t not in refused)]]
        taken: dict[str, list[int] | None] = {}   # by table: the indices of the records it takes (None: all)
        for group in groups:
            if not group.tables:
                if group.bad is None:
                    self._unrouted(tp, records, everything if group.indices is None else group.indices)
                continue
            for name in group.tables:
                if name not in taken:
                    taken[name] = group.indices   # None: all, no index list on the one-table hot path
                else:
                    merged = taken[name]
                    taken[name] = sorted({*(everything if merged is None else merged),
                                          *(everything if group.indices is None else group.indices)})
        chosen_by: list[tuple[Target, list[int] | None]] = []
        for name, chosen in taken.items():
            target = self._targets[name]
            self._targets.fit_format(target, tp[0])
            kept = self.take(tp, target, chosen, records)
            if kept is None or kept:
                chosen_by.append((target, kept))
        results = await self._append(tp, records, values, chosen_by)
        if routing_bad:   # the appends went through (a full buffer would have this batch fetched again)
            self._bad.hold_for_routing(tp, routing_bad)
        sizes = list(map(len, values)) if values else [len(r.value or b"") for r in records]
        out = []
        for (target, chosen), errors in zip(chosen_by, results, strict=True):
            # counted without a list of the records: one is made only if a schema change needs them
            count, value_bytes = ((len(records), sum(sizes)) if chosen is None
                                  else (len(chosen), sum(map(sizes.__getitem__, chosen))))
            out.append(Appended(target.name, errors, count, value_bytes, functools.partial(_picked, records, chosen),
                                target.buffer))
        return out

    async def _append(self, tp: TopicPartition, records: list[Record], values: list[bytes],
                      chosen_by: list[tuple[Target, list[int] | None]]) -> list[list[RecordProblem]]:
        def picked(chosen: list[int] | None) -> list[Record]:
            return records if chosen is None else [records[i] for i in chosen]

        if self._targets.format_of(tp[0]) in AVRO_FORMATS:   # writer schemas decided before their records go in
            return [await self._evolver.append_avro(t.name, tp, picked(chosen)) for t, chosen in chosen_by]
        if any(t.buffer.learns_schemas for t, _ in chosen_by):   # Protobuf: may ask the registry, off the loop
            return [await asyncio.to_thread(t.buffer.append, tp[0], tp[1], picked(chosen)) for t, chosen in chosen_by]
        if not self._several:   # one table: its buffer's hard cap refuses a batch whole (BufferFullError)
            return [t.buffer.append(tp[0], tp[1], picked(chosen)) for t, chosen in chosen_by]
        # keyed tables split each record into a row or a key first, envelopes into their rows:
        # appended by their own buffers
        def split(buffer: RecordBuffer) -> bool:   # and a buffer taking headers: append_routed passes none
            return (isinstance(buffer, ChangeBuffer) or not buffer.reads_fetched or buffer.takes_headers
                    or buffer.learns_schemas)

        everything = list(range(len(records)))
        plain = [(t.buffer, everything if chosen is None else chosen) for t, chosen in chosen_by
                 if not split(t.buffer)]
        routed = iter(append_routed(tp[0], tp[1], records, values, plain) if plain else [])
        return [t.buffer.append(tp[0], tp[1], picked(chosen)) if split(t.buffer) else next(routed)
                for t, chosen in chosen_by]

    def _unrouted(self, tp: TopicPartition, records: Sequence[Record], members: Sequence[int]) -> None:
        self._stats.records_unrouted += len(members)
        self._metrics.records_unrouted.inc(len(members))
        log.debug("%s[%d]: %d record(s) from offset %d taken by no table", tp[0], tp[1], len(members),
                  records[members[0]].offset)

    def tombstones(self, tp: TopicPartition, records: list[Record]) -> list[Appended]:
        """Tombstones of ``tp`` to every open keyed table that takes the topic and deletes on
        them (routing by value cannot apply: there is no value), less what each table holds."""
        out = []
        for target in self._targets:
            if not self._router.takes(tp[0], target.name):
                continue
            self._targets.fit_format(target, tp[0])
            buffer = target.buffer
            if not isinstance(buffer, ChangeBuffer) or buffer.changes.tombstones != "delete":
                continue
            chosen = self.take(tp, target, None, records)
            kept = records if chosen is None else [records[i] for i in chosen]
            if kept:
                out.append(Appended(target.name, buffer.append_tombstones(tp[0], tp[1], kept), len(kept), 0,
                                    functools.partial(_at, kept), buffer, what="tombstone"))
        return out


def _picked(records: Sequence[Record], chosen: list[int] | None, offsets: list[int]) -> list[Record]:
    """Of ``records`` at ``chosen`` (None: all), those at ``offsets``."""
    return _at(records if chosen is None else [records[i] for i in chosen], offsets)


def _at(records: Sequence[Record], offsets: list[int]) -> list[Record]:
    """The records at ``offsets``."""
    wanted = set(offsets)
    return [r for r in records if r.offset in wanted]
