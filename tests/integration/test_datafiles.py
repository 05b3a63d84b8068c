"""Data files cross the control topic and commit as if written in process (real SQLite catalog)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from frazil.config import CatalogConfig, Column, TableConfig
from frazil.events import Event, StartCommit, codec
from frazil.events.payloads import DataWritten
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg.committer import Committer
from frazil.iceberg.datafiles import from_ref, to_ref
from frazil.iceberg.offsets import Range


def test_a_data_file_survives_the_trip_and_commits_with_its_partition_and_metrics(tmp_path: Path) -> None:
    catalog = iceberg_catalog.load(CatalogConfig("frazil", {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db",
                                                            "warehouse": f"file://{tmp_path}"}))
    cfg = TableConfig("db.t", (Column("id", "long", True), Column("name", "string"), Column("at", "timestamptz"),
                               Column("price", "decimal(10, 2)")), partition_by=("day(at)", "bucket[4](id)", "name"))
    table = iceberg_catalog.ensure_table(catalog, cfg)
    n = 300
    base = datetime(2026, 11, 1, tzinfo=UTC)
    data = pa.Table.from_pydict({
        "id": list(range(n)), "name": [None if i % 7 == 0 else f"n{i % 3}" for i in range(n)],
        "at": [base + timedelta(hours=i % 50) for i in range(n)], "price": [None] * n,
        "_kafka_topic": ["t"] * n, "_kafka_partition": [0] * n, "_kafka_offset": list(range(n)),
        "_kafka_timestamp": [base] * n, "_kafka_key": [None] * n}, schema=iceberg_catalog.arrow_schema(table))
    committer = Committer(catalog, "db.t", "p", sleep=lambda s: None)
    written = committer.write_files(data)
    assert len(written) > 10  # many partitions, null partition values among them

    refs = tuple(to_ref(f, table.spec(), table.schema()) for f in written)
    event = codec.decode(codec.encode(Event("p", "w1", 1, payload=DataWritten("c1", "db.t", refs, ()))))
    assert isinstance(event.payload, DataWritten)
    back = [from_ref(r, table.spec(), table.schema()) for r in event.payload.files]
    for original, copy in zip(written, back, strict=True):
        for attr in ("file_path", "partition", "record_count", "file_size_in_bytes", "value_counts",
                     "null_value_counts", "lower_bounds", "upper_bounds", "column_sizes"):
            assert getattr(copy, attr) == getattr(original, attr), attr
        assert copy.spec_id == table.spec().spec_id

    committer.commit_files(back, {("t", 0): Range(0, n)}, "c1")
    table = catalog.load_table("db.t")
    assert table.scan().to_arrow().num_rows == n
    # partition pruning works with the partition values that crossed: one day
    assert table.scan(row_filter="at >= '2026-11-02T00:00:00+00:00'").to_arrow().num_rows == sum(
        1 for i in range(n) if i % 50 >= 24)
    assert not isinstance(event.payload, StartCommit)


def test_files_reported_for_another_table_of_the_same_name_are_refused(tmp_path: Path) -> None:
    """A reply written before the table was dropped and recreated (or by another deployment under
    the same pipeline name) names the table UUID it wrote for; the coordinator commits nothing."""
    import pytest

    from frazil.coordination.commit_state import TableCommit
    from frazil.coordination.table_commit import table_committer
    from frazil.errors import FrazilError
    from frazil.events.payloads import OffsetRange

    catalog = iceberg_catalog.load(CatalogConfig("frazil", {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db",
                                                            "warehouse": f"file://{tmp_path}"}))
    cfg = TableConfig("db.t", (Column("id", "long", True),))
    old = iceberg_catalog.ensure_table(catalog, cfg)
    data = pa.Table.from_pydict({"id": [1, 2, 3], "_kafka_topic": ["t"] * 3, "_kafka_partition": [0] * 3,
                                 "_kafka_offset": [0, 1, 2],
                                 "_kafka_timestamp": [datetime(2026, 11, 1, tzinfo=UTC)] * 3,
                                 "_kafka_key": [None] * 3}, schema=iceberg_catalog.arrow_schema(old))
    refs = tuple(to_ref(f, old.spec(), old.schema())
                 for f in Committer(catalog, "db.t", "p", sleep=lambda s: None).write_files(data))
    commit = table_committer(catalog, "p", max_attempts=1)
    reply = TableCommit("db.t", refs, (OffsetRange("t", 0, 0, 3, 1),), frozenset({str(old.metadata.table_uuid)}))

    catalog.drop_table("db.t")
    new = iceberg_catalog.ensure_table(catalog, cfg)
    with pytest.raises(FrazilError,
                       match=f"written for table UUID\\(s\\) {old.metadata.table_uuid}.*nothing was committed"):
        commit(reply, "c1", None)
    assert catalog.load_table("db.t").snapshots() == []

    # the same files reported for the table as it is now land
    assert commit(TableCommit("db.t", refs, reply.ranges, frozenset({str(new.metadata.table_uuid)})),
                  "c2", None).rows == 3
