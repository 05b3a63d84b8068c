"""Partitioned data files written from slices of the drained rows (``iceberg/writes.py``): the same
files' partitions, counts and rows as pyiceberg's own writer, with no copy of rows that arrive in
runs, and one sort when they are scattered (real SQLite catalog)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import _dataframe_to_data_files

from frazil.config import CatalogConfig, Column, TableConfig
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import writes

N = 3000
BASE = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def table(tmp_path: Path) -> Any:
    catalog = iceberg_catalog.load(CatalogConfig("frazil", {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db",
                                                            "warehouse": f"file://{tmp_path}"}))
    cfg = TableConfig("db.t", (Column("id", "long", True), Column("name", "string"), Column("at", "timestamptz")),
                      partition_by=("day(at)", "name"))
    return iceberg_catalog.ensure_table(catalog, cfg)


def rows(table: Any, hours: list[int]) -> pa.Table:
    n = len(hours)
    return pa.Table.from_pydict({
        "id": list(range(n)), "name": [None if i % 500 < 100 else f"n{(i // 500) % 2}" for i in range(n)],
        "at": [BASE + timedelta(hours=h) for h in hours],
        "_kafka_topic": ["t"] * n, "_kafka_partition": [0] * n, "_kafka_offset": list(range(n)),
        "_kafka_timestamp": [BASE] * n, "_kafka_key": [None] * n}, schema=iceberg_catalog.arrow_schema(table))


def by_partition(table: Any, files: list[Any]) -> dict[tuple[Any, ...], Counter[int]]:
    out: dict[tuple[Any, ...], Counter[int]] = {}
    for f in files:
        ids = pq.read_table(f.file_path.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
        out.setdefault(tuple(f.partition), Counter()).update(ids)
    return out


@pytest.mark.parametrize("order", ["runs", "scattered"])
def test_the_same_partitions_and_rows_as_pyicebergs_writer(table: Any, order: str, monkeypatch) -> None:
    hours = [i * 72 // N for i in range(N)] if order == "runs" else [(i * 37) % 72 for i in range(N)]
    if order == "scattered":
        monkeypatch.setattr(writes, "MAX_RUNS", 50)   # force the sort
    data = rows(table, hours)
    ours = writes.data_files(table.metadata, data, table.io)
    theirs = list(_dataframe_to_data_files(table_metadata=table.metadata, df=data, io=table.io))
    assert by_partition(table, ours) == by_partition(table, theirs)
    assert sorted(f.record_count for f in ours) == sorted(f.record_count for f in theirs)
    assert sum(f.record_count for f in ours) == N and len(ours) == 3 * 3   # 3 days x (n0, n1, null)


def test_rows_in_runs_are_written_from_slices_of_the_drained_table_not_copies(table: Any, monkeypatch) -> None:
    data = rows(table, [i * 72 // N for i in range(N)]).combine_chunks()
    start = data.column("id").chunk(0).buffers()[1].address
    end = start + data.column("id").chunk(0).buffers()[1].size
    seen: list[pa.RecordBatch] = []

    def capture(io: Any, table_metadata: Any, tasks: Any) -> list[Any]:
        for task in tasks:
            seen.extend(task.record_batches)
        return []

    monkeypatch.setattr(writes, "write_file", capture)
    writes.data_files(table.metadata, data, table.io)
    assert sum(b.num_rows for b in seen) == N
    for batch in seen:   # each batch's ids are a view into the input's buffer
        address = batch.column(0).buffers()[1].address
        assert start <= address < end


def test_run_starts_treat_two_nulls_as_equal_and_look_at_every_field() -> None:
    a = pa.array([1, 1, None, None, 2, 2, 2])
    b = pa.array(["x", "x", "x", "x", "x", "y", "y"])
    assert writes.run_starts([a]) == [0, 2, 4]
    assert writes.run_starts([a, b]) == [0, 2, 4, 5]
    assert writes.run_starts([pc.cast(pa.array([], pa.int64()), pa.int64())]) == []


def test_a_large_unpartitioned_flush_is_one_file_per_core_with_every_row_once(tmp_path: Path, monkeypatch) -> None:
    catalog = iceberg_catalog.load(CatalogConfig("frazil", {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db",
                                                            "warehouse": f"file://{tmp_path}"}))
    table = iceberg_catalog.ensure_table(catalog, TableConfig("db.u", (Column("id", "long", True),
                                                                       Column("name", "string"),
                                                                       Column("at", "timestamptz"))))
    monkeypatch.setattr(writes, "PARALLEL_MIN_BYTES", 1000)
    monkeypatch.setattr(writes.os, "cpu_count", lambda: 3)
    data = rows(table, [i % 48 for i in range(N)])
    files = writes.data_files(table.metadata, data, table.io)
    assert len(files) == 3 and sum(f.record_count for f in files) == N
    ids = Counter(i for f in files for i in pq.read_table(f.file_path.removeprefix("file://"), columns=["id"])
                  .column("id").to_pylist())
    assert ids == Counter(range(N))
    # a small flush stays one file
    monkeypatch.setattr(writes, "PARALLEL_MIN_BYTES", data.nbytes)
    assert len(writes.data_files(table.metadata, data, table.io)) == 1


def test_frazils_writes_use_a_small_dictionary_page_unless_the_table_says_otherwise(table: Any, monkeypatch) -> None:
    seen: list[int] = []
    real = writes.write_file

    def spy(*, io: Any, table_metadata: Any, tasks: Any) -> Any:
        seen.append(int(table_metadata.properties["write.parquet.dict-size-bytes"]))
        return real(io=io, table_metadata=table_metadata, tasks=tasks)

    monkeypatch.setattr(writes, "write_file", spy)
    writes.data_files(table.metadata, rows(table, list(range(48))), table.io)
    assert seen == [writes.DICTIONARY_PAGE_BYTES]
    assert "write.parquet.dict-size-bytes" not in table.metadata.properties   # the table itself is left alone
    with table.transaction() as tx:
        tx.set_properties({"write.parquet.dict-size-bytes": "1048576"})
    table = table.refresh() if hasattr(table, "refresh") else table
    writes.data_files(table.metadata, rows(table, list(range(48))), table.io)
    assert seen[-1] == 1048576
