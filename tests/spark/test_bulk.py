"""Bulk writes: Spark writes the files, frazil's committer commits them with the offsets."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import make_table, rows
from pyiceberg.catalog import Catalog
from pyiceberg.transforms import BucketTransform, DayTransform

from frazil.config import CatalogConfig
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range
from frazil.spark import session
from frazil.spark.bulk import SparkWriter

pytestmark = pytest.mark.spark


def writer(warehouse: CatalogConfig) -> SparkWriter:
    return SparkWriter(session.conf(warehouse.name, warehouse.properties, jars=[]), warehouse.name)


def test_spark_files_carry_field_ids_metrics_and_one_partition_each(spark: Any, catalog: Catalog,
                                                                     warehouse: CatalogConfig) -> None:
    table = make_table(catalog, "bulk_parts", ("day(at)", "bucket[4](id)"))
    data = rows(table, 0, 20_000)
    files = writer(warehouse).write(table, data, "w1")
    assert sum(f.record_count for f in files) == 20_000
    assert all("/data/frazil-bulk-w1/" in f.file_path for f in files)
    day, bucket = (pf.transform for pf in table.spec().fields)
    assert isinstance(day, DayTransform) and isinstance(bucket, BucketTransform)
    to_day, to_bucket = day.transform(table.schema().find_field("at").field_type), bucket.transform(
        table.schema().find_field("id").field_type)
    for f in files:
        content = pq.read_table(f.file_path.removeprefix("file://"))
        # field ids as the table has them, so Iceberg reads the file by id
        assert [int(fd.metadata[b"PARQUET:field_id"]) for fd in content.schema] == [
            fld.field_id for fld in table.schema().fields]
        assert f.record_count == content.num_rows and f.value_counts and f.lower_bounds and f.upper_bounds
        # every row of the file is in the file's partition
        days = {to_day(v) for v in content.column("at").cast("int64").to_pylist()} if content.num_rows else set()
        buckets = {to_bucket(v) for v in content.column("id").to_pylist()}
        assert days == {f.partition[0]} and buckets == {f.partition[1]}, f.file_path

    committer = Committer(catalog, "db.bulk_parts", "p", sleep=lambda s: None)
    result = committer.commit_files(files, {("events", 0): Range(0, 20_000)}, "c-bulk")
    assert result.rows == 20_000 and result.offsets == {("events", 0): 20_000}
    back = catalog.load_table("db.bulk_parts").scan().to_arrow()
    assert back.num_rows == 20_000 and sorted(back.column("id").to_pylist()) == list(range(20_000))
    # partition pruning works on what Spark wrote: one day, one bucket
    one_day = catalog.load_table("db.bulk_parts").scan(
        row_filter="at >= '2026-11-02T00:00:00+00:00' and at < '2026-11-03T00:00:00+00:00'").to_arrow()
    lo, hi = (pa.scalar(datetime(2026, 11, d, tzinfo=UTC), pa.timestamp("us", "UTC")) for d in (2, 3))
    expected = pc.sum(pc.and_(pc.greater_equal(data.column("at"), lo), pc.less(data.column("at"), hi))).as_py()
    assert one_day.num_rows == expected > 0
    # and Spark reads the committed table the same way
    assert spark.sql("SELECT count(*) AS n, count(DISTINCT _kafka_offset) AS d FROM lake.db.bulk_parts").first() \
        == (20_000, 20_000)


def test_in_process_and_spark_files_hold_the_same_rows(spark: Any, catalog: Catalog, warehouse: CatalogConfig) -> None:
    table = make_table(catalog, "bulk_same")
    data = rows(table, 0, 5_000)
    committer = Committer(catalog, "db.bulk_same", "p", sleep=lambda s: None)
    spark_files = writer(warehouse).write(table, data, "w2")
    local_files = committer.write_files(data)
    read = [pq.read_table([f.file_path.removeprefix("file://") for f in fs]).sort_by("id")
            for fs in (spark_files, local_files)]
    assert read[0].to_pylist() == read[1].to_pylist()
    # the same Parquet types too: `timestamp` stays local time (not adjusted to UTC), `timestamptz` UTC
    def types(t: pa.Table) -> list[pa.DataType]:
        large = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}
        return [large.get(f.type, f.type) for f in t.schema]
    assert types(read[0]) == types(read[1])
