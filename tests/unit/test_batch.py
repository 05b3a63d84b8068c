"""A held batch taking the rows buffered since (pure): ranges stay contiguous per table, written
files wait as they are, and the rows taken meanwhile start where those files end."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.manifest import DataFile

from frazil.coordination.worker import Batch, Part
from frazil.iceberg.offsets import Range

A, B = ("t", 0), ("t", 1)


def _part(table: str, ranges: dict[tuple[str, int], Range], rows: int, files: int = 0,
          since: dict[tuple[str, int], int] | None = None) -> Part:
    data = None if files else pa.table({"id": list(range(rows))})
    written = tuple(DataFile.from_args(file_path=f"/w/{table}-{i}.parquet") for i in range(files))
    return Part(table, data, ranges, rows, written, 0 if files else int(data.nbytes),
                since=since if since is not None else {tp: r.start for tp, r in ranges.items()})


def test_unwritten_rows_merge_into_one_part_from_the_first_start_to_the_last_end() -> None:
    held = _part("a", {A: Range(10, 20)}, 4)
    merged = held.merge(_part("a", {A: Range(10, 30), B: Range(5, 8)}, 3))   # a new part starts at the table's floor
    assert merged.ranges == {A: Range(10, 30), B: Range(5, 8)}
    assert merged.rows == merged.total_rows == 7 and merged.data is not None and merged.data.num_rows == 7
    assert merged.later is None and merged.files == ()


def test_rows_taken_while_files_wait_to_land_start_where_the_files_end_and_are_not_written() -> None:
    held = _part("a", {A: Range(10, 20)}, 4, files=1)
    once = held.merge(_part("a", {A: Range(10, 30)}, 3))
    twice = once.merge(_part("a", {A: Range(10, 40), B: Range(0, 2)}, 2))
    assert twice.ranges == {A: Range(10, 20)} and twice.paths == ["/w/a-0.parquet"]   # reported as it was
    assert twice.later is not None and twice.later.files == ()
    assert twice.later.ranges == {A: Range(20, 40), B: Range(0, 2)}
    assert twice.rows == 4 and twice.total_rows == 9 and twice.later.data is not None
    assert twice.data_bytes == twice.later.nbytes > 0   # counted for backpressure


def test_a_batch_keeps_its_watermark_start_and_takes_new_tables() -> None:
    held = Batch({A: Range(10, 20), B: Range(0, 5)}, {"a": _part("a", {A: Range(10, 20)}, 4, files=1)})
    newer = Batch({A: Range(20, 25)}, {"a": _part("a", {A: Range(10, 25)}, 2), "b": _part("b", {A: Range(20, 25)}, 5)})
    merged = held.merge(newer)
    assert merged.ranges == {A: Range(10, 25), B: Range(0, 5)}
    assert merged.parts["a"].later is not None and merged.parts["a"].later.ranges == {A: Range(20, 25)}
    assert merged.parts["b"].ranges == {A: Range(20, 25)} and merged.rows == 11


def test_a_part_waits_from_where_its_batch_started_not_from_its_tables_old_offset() -> None:
    """The watermark: a table that took nothing of A for a while has an old offset (its range
    starts there), but no record below the batch's start waits for it."""
    held = _part("a", {A: Range(3, 20)}, 4, files=1, since={A: 15})
    assert held.waits_from(A) == 15 and held.waits_from(B) is None
    merged = held.merge(_part("a", {A: Range(3, 30), B: Range(0, 2)}, 3, since={A: 20, B: 0}))
    assert merged.waits_from(A) == 15 and merged.waits_from(B) == 0
    assert merged.later is not None and merged.later.waits_from(A) == 20   # once the files land
    unwritten = _part("b", {A: Range(3, 20)}, 4, since={A: 15}).merge(_part("b", {A: Range(3, 30)}, 3, since={A: 20}))
    assert unwritten.since == {A: 15}
