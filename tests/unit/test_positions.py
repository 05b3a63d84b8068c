"""Where each partition stands in the buffer (rule 2's floor, batch ranges), pure."""

from __future__ import annotations

from collections.abc import Callable

from frazil.buffers.positions import Positions, Takers, resume_at
from frazil.iceberg.offsets import Range

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


def test_forgetting_drops_the_buffer_and_unpositions_every_partition() -> None:
    p = Positions()
    p.positioned([A, B], {A: 100, B: 5})
    p.took(A, 100, 149)
    p.forget()
    assert not p.buffered and p.partitions() == set() and p.next_offsets() == {}


def every(*names: str) -> Callable[[str], Takers]:
    """Routing where each of ``names`` takes every topic."""
    return lambda topic: Takers(names)


def test_resume_at_the_lowest_need_of_any_table_or_the_watermark_whichever_is_higher() -> None:
    C = ("u", 0)
    # one table, no watermark (a table written before watermarks): its offsets, as always
    assert resume_at([A, B], {"ns.a": {A: 100}}, {}, every("ns.a")) == {A: 100}
    # two tables: the one behind decides...
    assert resume_at([A], {"ns.a": {A: 100}, "ns.b": {A: 40}}, {A: 10}, every("ns.a", "ns.b")) == {A: 40}
    # ...unless the watermark says everything below it is in every table (ns.b took nothing since 40)
    assert resume_at([A], {"ns.a": {A: 100}, "ns.b": {A: 40}}, {A: 90}, every("ns.a", "ns.b")) == {A: 90}
    # a table with no offset for a partition took none of its records: it needs the watermark
    assert resume_at([A], {"ns.a": {A: 100}, "ns.b": {}}, {A: 70}, every("ns.a", "ns.b")) == {A: 70}
    # no table and no watermark knows the partition: it starts at auto_offset_reset
    assert resume_at([C], {"ns.a": {A: 100}}, {A: 70}, every("ns.a")) == {}
    # a watermark but no table offsets (every record so far was routed nowhere)
    assert resume_at([A], {"ns.a": {}, "ns.b": {}}, {A: 55}, every("ns.a", "ns.b")) == {A: 55}
    assert resume_at([A], {}, {A: 55}, every()) == {A: 55}


def test_a_table_that_never_takes_a_topic_needs_none_of_its_records() -> None:
    C = ("u", 0)
    by_topic = {"t": Takers(("ns.t",)), "u": Takers(("ns.u",))}
    # the watermark is a cycle behind: each topic resumes where its own table is
    stored = {"ns.t": {A: 500, B: 480}, "ns.u": {C: 90}}
    assert resume_at([A, B, C], stored, {A: 0, B: 0, C: 0}, by_topic.__getitem__) == {A: 500, B: 480, C: 90}


def test_tables_named_by_the_records_may_need_anything_above_the_watermark() -> None:
    named = {"t": Takers(("ns.static",), by_values=True)}
    assert resume_at([A], {"ns.static": {A: 500}, "ns.named_a": {A: 400}}, {A: 300}, named.__getitem__) == {A: 300}
    # named by the topic alone, the one table it names decides
    one = {"t": Takers(("ns.t",))}
    assert resume_at([A], {"ns.t": {A: 400}}, {A: 300}, one.__getitem__) == {A: 400}


def test_a_table_that_takes_every_record_of_a_topic_caps_where_it_resumes() -> None:
    """Whatever a watermark says, a table routed by topic alone holds exactly up to its offset."""
    both = {"t": Takers(("ns.all", "ns.some"), every=("ns.all",))}
    assert resume_at([A], {"ns.all": {A: 40}, "ns.some": {A: 30}}, {A: 90}, both.__getitem__) == {A: 40}
    assert resume_at([A], {"ns.all": {A: 100}, "ns.some": {A: 30}}, {A: 90}, both.__getitem__) == {A: 90}
