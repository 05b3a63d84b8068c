"""The scratch table of a bulk write on object storage is the table's metadata without its
history: what Spark writes into it must carry the table's own field ids and partition spec."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform
from pyiceberg.types import (
    FixedType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
    TimeType,
)

from frazil.spark import bulk


def test_a_scratch_table_keeps_the_evolved_field_ids_and_spec_and_none_of_the_history(tmp_path: Path) -> None:
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=True),
                                                NestedField(2, "gone", StringType(), required=False),
                                                NestedField(3, "at", TimestamptzType(), required=False)),
                                 properties={"write.data.path": f"file://{tmp_path}/elsewhere",
                                             "frazil.offsets.p": "{}", "frazil.progress.p": "{}",
                                             "write.parquet.compression-codec": "zstd"})
    with table.update_schema() as update:   # field ids with a gap, as evolution leaves them
        update.delete_column("gone")
        update.add_column("v", StringType())
    with table.update_spec() as spec:        # a second spec, the default one
        spec.add_field("at", DayTransform(), "at_day")
        spec.add_field("id", BucketTransform(4), "id_bucket")
    table.append(pa.table({"id": pa.array([1], pa.int64()), "at": pa.array([None], pa.timestamp("us", "UTC")),
                           "v": ["x"]}, schema=table.schema().as_arrow()))
    table = catalog.load_table("db.t")
    assert table.current_snapshot() is not None and table.metadata.default_spec_id == 1

    scratch = bulk.scratch_metadata(table, "s3://b/t/data/frazil-bulk-w", 1_000)
    assert scratch.location == "s3://b/t/data/frazil-bulk-w" and scratch.table_uuid != table.metadata.table_uuid
    assert scratch.schema() == table.schema() and [f.field_id for f in scratch.schema().fields] == [1, 3, 4]
    assert scratch.spec() == table.spec() and scratch.default_spec_id == 1
    assert scratch.last_column_id == table.metadata.last_column_id
    assert scratch.snapshots == [] and scratch.current_snapshot_id is None and scratch.refs == {}
    assert scratch.properties["gc.enabled"] == "false" and scratch.properties[bulk.SCRATCH_STARTED] == "1000"
    assert "write.data.path" not in scratch.properties   # its files go under its own location
    # never one of a pipeline's tables: no offsets, progress or merge marks
    assert not [k for k in scratch.properties if k.startswith("frazil.") and k != bulk.SCRATCH_STARTED]
    assert scratch.properties["write.parquet.compression-codec"] == "zstd"
    assert table.metadata.properties["write.data.path"]   # the table's own metadata is untouched


def test_a_bulk_write_to_object_storage_spark_has_no_fileio_for_is_refused_before_spark_starts() -> None:
    """Spark gets Iceberg's AWS bundle only: a gs:// table is a configuration error naming the way
    out, never a Spark failure retried every cycle."""
    import pytest

    from frazil.errors import ConfigError
    from frazil.spark.bulk import SparkWriter

    class OnGcs:
        def location(self) -> str:
            return "gs://lake/wh/db/events"

        def name(self) -> tuple[str, str]:
            return ("db", "events")

    writer = SparkWriter({"spark.master": "local[1]"}, "lake")
    with pytest.raises(ConfigError, match=r"gs://lake/wh/db/events.*no FileIO for gs://.*spark.bulk_min_rows = 0"):
        writer.write(OnGcs(), pa.table({"id": [1]}), "w1")  # type: ignore[arg-type]


def test_a_fixed_uuid_or_time_field_nested_in_a_column_is_named_by_its_path() -> None:
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "meta", StructType(NestedField(3, "h", FixedType(4)), NestedField(4, "n", LongType()))),
        NestedField(5, "at", ListType(6, TimeType())),
        NestedField(7, "by", MapType(8, StringType(), 9, StructType(NestedField(10, "t", TimeType())))))
    assert bulk.unsupported_columns(schema) == ["meta.h", "at.element", "by.value.t"]
