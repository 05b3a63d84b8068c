"""Where each source partition stands in the buffer (pure, no I/O).

Per assigned partition: ``start``, the first offset the next batch covers (the table's stored
offset when positioned, then the end of the last batch taken), and ``end``, the offset after the
last buffered record. A partition is *positioned* once it was sought to the table's offset: records
of other partitions are not taken (rule 2), and never one below what is already buffered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from frazil.iceberg.offsets import Range, TopicPartition


class Positions:
    def __init__(self) -> None:
        self._start: dict[TopicPartition, int | None] = {}   # None: the table has no offset yet
        self._end: dict[TopicPartition, int] = {}
        self._tables: dict[str, set[TopicPartition]] = {}     # which tables hold buffered rows of which partitions
        self.taken_by: dict[str, set[TopicPartition]] = {}    # the same, for the last batch taken

    def positioned(self, tps: Iterable[TopicPartition], stored: Mapping[TopicPartition, int]) -> None:
        for tp in tps:
            self._start[tp] = stored.get(tp)

    def is_positioned(self, tp: TopicPartition) -> bool:
        return tp in self._start

    def partitions(self) -> set[TopicPartition]:
        return set(self._start)

    def floor(self, tp: TopicPartition) -> int | None:
        """The lowest offset ``tp`` may take now (None: anything, the table has none)."""
        return self._end.get(tp, self._start[tp])

    def is_buffering(self, tp: TopicPartition) -> bool:
        return tp in self._end

    @property
    def buffered(self) -> bool:
        return bool(self._end)

    def took(self, tp: TopicPartition, first: int, last: int) -> None:
        """Offsets ``first..last`` of a positioned ``tp`` were taken: their records went into the
        buffer (``last`` may be a transaction marker or an offset compaction emptied: a fetch
        covers those too, and no record lives there)."""
        if self._start[tp] is None:
            self._start[tp] = first
        self._end[tp] = last + 1

    def table_took(self, table: str, tp: TopicPartition) -> None:
        """``table`` buffered rows of ``tp`` (of the records :meth:`took` is about to count)."""
        self._tables.setdefault(table, set()).add(tp)

    def take(self) -> dict[TopicPartition, Range]:
        """The ranges the buffer holds, as one batch; the next batch starts where these end.
        :meth:`taken_by` then says which tables hold rows of which of them."""
        ranges = {tp: Range(start, self._end[tp]) for tp, start in self._start.items()
                  if tp in self._end and start is not None}
        for tp, rng in ranges.items():
            self._start[tp] = rng.end
        self._end.clear()
        self.taken_by, self._tables = self._tables, {}
        return ranges

    def start(self, tp: TopicPartition) -> int | None:
        """The first offset of ``tp`` not in a batch yet (None: not positioned, or nothing known)."""
        return self._start.get(tp)

    def next_offsets(self) -> dict[TopicPartition, int]:
        """The next offset taken from each positioned partition (the table's, when none yet)."""
        return {tp: self._end.get(tp, start) for tp, start in self._start.items() if start is not None}

    def forget(self) -> None:
        """Drop what is buffered; every partition takes nothing until positioned again (never only
        some: a partition left positioned after its buffered records were dropped would resume at
        its start while the consumer's position is past them)."""
        self._end.clear()
        self._tables.clear()
        self._start.clear()


@dataclass(frozen=True)
class Takers:
    """The tables that may take a topic's records (routing decides, ``ingest/routing.py``):
    ``tables`` by name, and, when ``by_values``, tables the ``[dynamic]`` template names from a
    record's fields (not all known: any of them may need what the watermark says)."""

    tables: tuple[str, ...]
    by_values: bool = False
    every: tuple[str, ...] = ()   # of ``tables``, those that take every record of the topic (routed by topic alone)


def resume_at(tps: Iterable[TopicPartition], stored: Mapping[str, Mapping[TopicPartition, int]],
              progress: Mapping[TopicPartition, int], takers: Callable[[str], Takers]) -> dict[TopicPartition, int]:
    """Rule 2 with several tables: where each partition is read from again.

    ``stored`` holds each table's offsets (the next offset it needs per partition), ``progress``
    the pipeline's own low watermark kept with them (every record below it is in every table that
    takes it, or was taken by none), ``takers`` which tables may take a topic's records. A table
    that takes the topic and has no offset for a partition has taken none of its records yet, so
    it needs what the watermark says; so may a table the records name (``[dynamic]`` by a field).
    A table that never takes the topic needs nothing of it. The answer is the lowest position any
    of them still needs, or the watermark, whichever is higher; a partition nothing knows is left
    out (it starts at ``auto_offset_reset``). A table that takes every record of the topic caps it
    at its own offset. Each table then skips records below its own offset."""
    out: dict[TopicPartition, int] = {}
    for tp in tps:
        watermark = progress.get(tp)
        who = takers(tp[0])
        needs = [stored.get(name, {}).get(tp, watermark) for name in who.tables]
        if who.by_values:
            needs.append(watermark)
        known = [n for n in needs if n is not None]
        if watermark is None:
            if known:
                out[tp] = min(known)
        elif not known:
            out[tp] = watermark
        else:
            out[tp] = max(watermark, min(known))
        # a table that takes every record of the topic holds exactly up to its own offset: never
        # resume above it, whatever a watermark says
        every = [stored[name][tp] for name in who.every if tp in stored.get(name, {})]
        if every and tp in out:
            out[tp] = min(out[tp], *every)
    return out
