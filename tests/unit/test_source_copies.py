"""The bad records a worker keeps for its process's dead-letter sink: taken once, bounded by bytes."""

from __future__ import annotations

from frazil.kafka.copies import SourceCopies
from frazil.kafka.fetch import Record


def record(offset: int, size: int = 100, partition: int = 0) -> Record:
    return Record("t", partition, offset, 1_700_000_000_000 + offset, b"k", b"v" * size, (("h", b"x"),))


def test_a_kept_record_is_taken_once_exactly_as_fetched() -> None:
    copies = SourceCopies()
    copies.keep([record(3), record(9, partition=1)])
    assert copies.take([("t", 0, 3), ("t", 0, 4)]) == {("t", 0, 3): record(3)}
    assert copies.take([("t", 0, 3)]) == {}
    assert copies.take([("t", 1, 9)]) == {("t", 1, 9): record(9, partition=1)} and copies.held == 0


def test_the_oldest_are_dropped_past_the_byte_bound_and_read_back_instead() -> None:
    copies = SourceCopies(max_bytes=10 * 1_000)
    copies.keep(record(o, size=800) for o in range(20))
    assert 0 < copies.held < 20 and copies.dropped == 20 - copies.held
    taken = copies.take([("t", 0, o) for o in range(20)])
    assert sorted(o for _, _, o in taken) == list(range(20 - len(taken), 20))   # the newest kept


def test_a_record_kept_twice_is_held_once() -> None:
    copies = SourceCopies(max_bytes=1_000)
    copies.keep([record(1, size=400)])
    copies.keep([record(1, size=400)])
    assert copies.held == 1 and copies.dropped == 0
