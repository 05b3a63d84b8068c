"""A worker's batch: the rows taken from the buffers, one *part* per table, until each lands (pure
values; the worker writes and reports them). A part keeps its data until its files are written,
then its files until they land; rows its table takes meanwhile wait in ``later``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.manifest import DataFile

from frazil.buffers.conform import conform
from frazil.events.payloads import DeadLetter
from frazil.iceberg.offsets import Range, TopicPartition


@dataclass(frozen=True)
class Part:
    """One table's rows of a batch, not yet landed: ``data`` until its data files are written
    (and logged), then ``files``. A part whose files wait to land (a failed commit) keeps the rows
    its table takes meanwhile in ``later``, unwritten, so one table's outage piles up no files and
    holds back no other table; they are written once the files have landed."""

    table: str
    data: pa.Table | None
    ranges: dict[TopicPartition, Range]     # what ``files``, or else ``data``, cover
    rows: int
    files: tuple[DataFile, ...] = ()
    nbytes: int = 0     # of ``data``, counted once (the loop asks on every pass; pyarrow walks every chunk)
    later: Part | None = None
    # per partition, where the batch it was taken from started: no record of it below that is
    # waiting for this part (its ``ranges`` start lower, at the table's offset, when the table
    # took none of the records between)
    since: dict[TopicPartition, int] = dataclasses.field(default_factory=dict)
    # the bad records of ``ranges`` (on_bad_record = "dead_letter"): reported with the files, sent to
    # the dead-letter topic by the coordinator once they land. A part may hold only bad records.
    dead: tuple[DeadLetter, ...] = ()
    # a keyed table's deletes (their keys), beside the upserts in ``data``; written as a key file
    deletes: pa.Table | None = None

    @property
    def paths(self) -> list[str]:
        return [f.file_path for f in self.files]

    @property
    def total_rows(self) -> int:
        return self.rows + (self.later.rows if self.later else 0)

    @property
    def total_dead(self) -> int:
        return len(self.dead) + (self.later.total_dead if self.later else 0)

    @property
    def data_bytes(self) -> int:
        return (self.nbytes if self.data is not None else 0) + (self.later.data_bytes if self.later else 0)

    def waits_from(self, tp: TopicPartition) -> int | None:
        """The first offset of ``tp`` this part (or its ``later``) may hold and has not landed."""
        return min((s for at, s in self.waiting() if at == tp), default=None)

    def waiting(self) -> Iterator[tuple[TopicPartition, int]]:
        """Each partition with an offset this part (or its ``later``) may hold from and has not
        landed (a partition may come twice: once here, once in ``later``)."""
        yield from self.since.items()
        if self.later is not None:
            yield from self.later.waiting()

    def merge(self, newer: Part) -> Part:
        """This part with ``newer``, the rows its table took after it. Not written yet: one part,
        each partition's range from this start to ``newer``'s end. Written: ``newer`` waits in
        ``later``, its ranges starting where these files end."""
        if self.files:
            starts = {tp: Range(self.ranges[tp].end, r.end) if tp in self.ranges else r
                      for tp, r in newer.ranges.items()}
            newer = dataclasses.replace(newer, ranges=starts)
            return dataclasses.replace(self, later=self.later.merge(newer) if self.later else newer)
        assert self.data is not None and newer.data is not None
        ranges = {**newer.ranges, **{tp: Range(r.start, newer.ranges[tp].end) if tp in newer.ranges else r
                                     for tp, r in self.ranges.items()}}
        since = {**newer.since, **{tp: min(s, newer.since.get(tp, s)) for tp, s in self.since.items()}}
        # the table may have evolved between the two: the rows go under the newer schema
        deletes = [d for d in (self.deletes, newer.deletes) if d is not None]
        return Part(self.table, conform([self.data, newer.data], newer.data.schema), ranges, self.rows + newer.rows,
                    nbytes=self.nbytes + newer.nbytes, since=since, dead=self.dead + newer.dead,
                    deletes=pa.concat_tables(deletes) if deletes else None)


@dataclass(frozen=True)
class Batch:
    """Records taken from the source, ``ranges`` per partition (for the watermark), as one part per
    table that took rows and has not landed them yet."""

    ranges: dict[TopicPartition, Range]
    parts: dict[str, Part]

    @property
    def rows(self) -> int:
        return sum(p.total_rows for p in self.parts.values())

    @property
    def files(self) -> int:
        return sum(len(p.files) for p in self.parts.values())

    @property
    def nbytes(self) -> int:
        return sum(p.data_bytes for p in self.parts.values())

    def merge(self, newer: Batch) -> Batch:
        """A held batch with the records taken since: each partition's range from this start to
        ``newer``'s end (the watermark stays at what is not landed yet), each table's part merged."""
        ranges = {**newer.ranges, **{tp: Range(r.start, newer.ranges[tp].end) if tp in newer.ranges else r
                                      for tp, r in self.ranges.items()}}
        parts = dict(self.parts)
        for name, part in newer.parts.items():
            parts[name] = parts[name].merge(part) if name in parts else part
        return Batch(ranges, parts)
