"""Keyed tables, the pure decisions: the latest change per key by (partition, offset), never by
arrival; which committed and new rows a commit deletes; how the index follows a commit."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO

from frazil.iceberg import mutations
from frazil.iceberg.mutations import KeyIndex, latest, plan


def changes(ids: list[int], partitions: list[int], offsets: list[int], **more: list[object]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), **{k: pa.array(v) for k, v in more.items()},
                     "_kafka_partition": pa.array(partitions, pa.int32()),
                     "_kafka_offset": pa.array(offsets, pa.int64())})


def test_the_latest_change_of_each_key_wins_by_partition_and_offset_not_by_arrival() -> None:
    # rows arrived in this order; key 1's update at offset 5 arrived before its create at offset 2
    rows = changes([1, 2, 1, 3], [0, 0, 0, 1], [5, 3, 2, 7], v=["a5", "b3", "a2", "c7"])
    deletes = changes([2, 3], [0, 1], [4, 6])
    got = latest(rows, deletes, ["id"])
    assert got.rows is not None and got.deletes is not None
    # key 1: update at 5 beats create at 2; key 2: delete at 4 beats row at 3; key 3: row at 7 beats delete at 6
    assert sorted(got.rows.column("v").to_pylist()) == ["a5", "c7"]
    assert got.deletes.column("id").to_pylist() == [2]
    assert (got.replaced, got.split_keys) == (3, 0)


def test_a_key_changed_from_two_partitions_is_counted_and_the_higher_partition_wins() -> None:
    rows = changes([9, 9], [2, 1], [0, 50], v=["p2", "p1"])
    got = latest(rows, None, ["id"])
    assert got.rows is not None and got.rows.column("v").to_pylist() == ["p2"]
    assert got.split_keys == 1 and got.deletes is None


def test_composite_keys_are_compared_column_by_column() -> None:
    rows = pa.table({"a": [1, 1, 2], "b": ["x", "y", "x"], "_kafka_partition": pa.array([0, 0, 0], pa.int32()),
                     "_kafka_offset": pa.array([1, 2, 3], pa.int64())})
    deletes = pa.table({"a": [1], "b": ["x"], "_kafka_partition": pa.array([0], pa.int32()),
                        "_kafka_offset": pa.array([4], pa.int64())})
    got = latest(rows, deletes, ["a", "b"])
    assert got.rows is not None and got.deletes is not None
    assert list(zip(got.rows.column("a").to_pylist(), got.rows.column("b").to_pylist(), strict=True)) \
        == [(1, "y"), (2, "x")]
    assert got.deletes.num_rows == 1 and got.replaced == 1


def test_nothing_to_decide_is_returned_as_it_is() -> None:
    rows = changes([1], [0], [0])
    got = latest(rows, None, ["id"])
    assert got.rows is rows and got.replaced == 0
    assert latest(None, None, ["id"]).rows is None


KEY = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def ids(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def test_a_commit_deletes_the_committed_row_of_every_changed_key_and_every_new_row_that_lost() -> None:
    index = KeyIndex(("id",), KEY, snapshot_id=1)
    index.add(ids(1, 2, 3), "old.parquet", [0, 1, 2])
    # worker A wrote keys 1 and 4; worker B wrote key 4 from a higher partition (it wins), and deleted key 2
    a = changes([1, 4], [0, 0], [10, 11])
    b = changes([4], [1], [3])
    gone = changes([2, 5], [1, 1], [4, 5])
    p = plan(index, [("a.parquet", a), ("b.parquet", b)], [gone])
    assert {k: sorted(v) for k, v in p.deletes.items()} == {"old.parquet": [0, 1], "a.parquet": [1]}
    assert [(path, keys.column("id").to_pylist(), pos) for path, keys, pos in p.added] == [
        ("a.parquet", [1], [0]), ("b.parquet", [4], [0])]
    assert sorted(p.changed.column("id").to_pylist()) == [1, 2, 4, 5]
    assert (p.replaced, p.split_keys, p.positions) == (2, 1, 3)
    # the commit landed: the index follows it
    index.forget(p.changed)
    for path, keys, pos in p.added:
        index.add(keys, path, pos)
    assert index.positions(ids(1, 2, 3, 4, 5)) == [("a.parquet", [0]), ("b.parquet", [0]), ("old.parquet", [2])]
    assert len(index) == 3


def test_a_key_found_twice_in_the_table_loses_every_copy_on_its_next_change() -> None:
    index = KeyIndex(("id",), KEY)
    index.add(ids(7), "f1", [0])
    index.add(ids(7), "f2", [3])
    assert index.native.duplicated == 1
    p = plan(index, [("new", changes([7], [0], [0]))], [])
    assert p.deletes == {"f1": [0], "f2": [3]}
    index.forget(ids(7))
    assert index.positions(ids(7)) == [] and index.native.duplicated == 0


def test_the_index_takes_keys_as_read_from_parquet_whatever_their_arrow_width() -> None:
    strings = pa.schema([pa.field("k", pa.large_string(), nullable=False)])
    index = KeyIndex(("k",), strings)
    index.add(pa.table({"k": pa.array(["a", "b"], pa.string())}), "f", [0, 1])
    assert index.positions(pa.table({"k": pa.array(["b"], pa.large_string())})) == [("f", [1])]


def test_index_memory_stays_near_fifty_bytes_a_long_key() -> None:
    index = KeyIndex(("id",), KEY)
    n = 200_000
    index.add(pa.table({"id": pa.array(range(n), pa.int64())}), "f", range(n))
    per_key = index.native.memory_bytes / n
    assert 20 < per_key < 120, per_key


def test_key_files_are_known_by_name() -> None:
    assert mutations.is_key_file("s3://b/t/data/frazil-keys-1234.parquet")
    assert not mutations.is_key_file("s3://b/t/data/frazil-keys-x/00000-0.parquet")
    assert not mutations.is_key_file("/w/t/data/00000-0-frazil-keys.parquet")


def test_position_delete_files_are_read_once_and_joined_to_data_files_by_path(tmp_path: Path) -> None:
    """An index build reads each position-delete file once, whatever number of data files its
    bounds may cover, and each data file gets only its own positions."""
    paths = [tmp_path / "d1.parquet", tmp_path / "d2.parquet"]
    for path, files, positions in ((paths[0], ["a.parquet", "b.parquet", "a.parquet"], [3, 1, 7]),
                                   (paths[1], ["a.parquet"], [9])):
        pq.write_table(pa.table({"file_path": files, "pos": pa.array(positions, pa.int64())}), path)
    io = PyArrowFileIO()
    opened: list[str] = []
    new_input = io.new_input
    io.new_input = lambda location: (opened.append(location), new_input(location))[1]   # type: ignore[method-assign]
    deleted = mutations.deleted_positions(io, [str(p) for p in paths])
    assert {path: sorted(positions) for path, positions in deleted.items()} == {"a.parquet": [3, 7, 9],
                                                                                 "b.parquet": [1]}
    assert opened == [str(p) for p in paths]
