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


def test_resume_at_the_lowest_need_of_any_table_or_the_watermark_whichever_is_higher() -> None:
    from frazil.ingest.positions import resume_at

    C = ("u", 0)
    # one table, no watermark (a table written before watermarks): its offsets, as always
    assert resume_at([A, B], {"ns.a": {A: 100}}, {}) == {A: 100}
    # two tables: the one behind decides...
    assert resume_at([A], {"ns.a": {A: 100}, "ns.b": {A: 40}}, {A: 10}) == {A: 40}
    # ...unless the watermark says everything below it is in every table (ns.b took nothing since 40)
    assert resume_at([A], {"ns.a": {A: 100}, "ns.b": {A: 40}}, {A: 90}) == {A: 90}
    # a table with no offset for a partition took none of its records: it needs the watermark
    assert resume_at([A], {"ns.a": {A: 100}, "ns.b": {}}, {A: 70}) == {A: 70}
    # no table and no watermark knows the partition: it starts at auto_offset_reset
    assert resume_at([C], {"ns.a": {A: 100}}, {A: 70}) == {}
    # a watermark but no table offsets (every record so far was routed nowhere)
    assert resume_at([A], {"ns.a": {}, "ns.b": {}}, {A: 55}) == {A: 55}
    assert resume_at([A], {}, {A: 55}) == {A: 55}
