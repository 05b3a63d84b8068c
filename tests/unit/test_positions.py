"""Where each partition stands in the buffer (rule 2's floor, batch ranges), pure."""

from __future__ import annotations

from frazil.iceberg.offsets import Range
from frazil.ingest.positions import Positions

A, B = ("t", 0), ("t", 1)


def test_only_positioned_partitions_are_taken_and_never_below_the_table_or_the_buffer() -> None:
    p = Positions()
    assert not p.is_positioned(A)
    p.positioned([A, B], {A: 100})          # B is new to the table
    assert p.floor(A) == 100 and p.floor(B) is None
    p.took(A, 100, 149)
    assert p.floor(A) == 150 and p.is_buffering(A) and not p.is_buffering(B)
    p.took(B, 7, 9)                          # a new partition starts where its first record is
    assert p.next_offsets() == {A: 150, B: 10}


def test_a_batch_takes_the_buffered_ranges_and_the_next_starts_where_they_end() -> None:
    p = Positions()
    p.positioned([A, B], {A: 100, B: 5})
    p.took(A, 100, 149)
    assert p.take() == {A: Range(100, 150)} and not p.buffered
    assert p.floor(A) == 150
    p.took(A, 150, 159)
    p.took(B, 5, 5)
    assert p.take() == {A: Range(150, 160), B: Range(5, 6)}
    assert p.take() == {}


def test_forgetting_drops_the_buffer_and_unpositions_the_partitions() -> None:
    p = Positions()
    p.positioned([A, B], {A: 100, B: 5})
    p.took(A, 100, 149)
    p.forget([A])
    assert not p.buffered and not p.is_positioned(A) and p.is_positioned(B)
    p.forget()
    assert p.partitions() == set() and p.next_offsets() == {}
