"""Where each source partition stands in the buffer (pure, no I/O).

Per assigned partition: ``start``, the first offset the next batch covers (the table's stored
offset when positioned, then the end of the last batch taken), and ``end``, the offset after the
last buffered record. A partition is *positioned* once it was sought to the table's offset: records
of other partitions are not taken (rule 2), and never one below what is already buffered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from frazil.iceberg.offsets import Range, TopicPartition


class Positions:
    def __init__(self) -> None:
        self._start: dict[TopicPartition, int | None] = {}   # None: the table has no offset yet
        self._end: dict[TopicPartition, int] = {}

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
        """Records ``first..last`` of a positioned ``tp`` went into the buffer."""
        if self._start[tp] is None:
            self._start[tp] = first
        self._end[tp] = last + 1

    def take(self) -> dict[TopicPartition, Range]:
        """The ranges the buffer holds, as one batch; the next batch starts where these end."""
        ranges = {tp: Range(start, self._end[tp]) for tp, start in self._start.items()
                  if tp in self._end and start is not None}
        for tp, rng in ranges.items():
            self._start[tp] = rng.end
        self._end.clear()
        return ranges

    def next_offsets(self) -> dict[TopicPartition, int]:
        """The next offset taken from each positioned partition (the table's, when none yet)."""
        return {tp: self._end.get(tp, start) for tp, start in self._start.items() if start is not None}

    def forget(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Drop what is buffered; ``tps`` (default: all) take nothing until positioned again."""
        self._end.clear()
        if tps is None:
            self._start.clear()
        else:
            for tp in tps:
                self._start.pop(tp, None)
