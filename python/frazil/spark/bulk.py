"""Bulk writes: an Arrow table written by Spark as Parquet data files that Iceberg can adopt.

Spark only writes files here; it commits nothing. The files carry the table's field ids (from
the Arrow schema's ``PARQUET:field_id``), and each holds one partition: rows are partitioned by
hidden helper columns computed with Iceberg's own transform functions
(``<catalog>.system.days(col)``, ``bucket(N, col)``, ...), which Spark writes as directory names,
not into the files. The returned ``DataFile`` objects (metrics from the footers) go through the
same exactly-once path as the in-process writer's: transaction log, then one catalog commit with
the offsets.

Blocking (Spark jobs): call from a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.typedef import Record
from pyiceberg.types import FixedType, TimeType, UUIDType

from frazil.errors import BulkWriteError, ConfigError
from frazil.spark import session
from frazil.spark.jobs import describe

log = logging.getLogger(__name__)

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def unsupported_columns(schema: Schema) -> list[str]:
    """Columns whose Iceberg type Spark cannot write as Iceberg expects (no UUID, fixed or
    time type in Spark's Parquet writer)."""
    return [f.name for f in schema.fields if isinstance(f.field_type, (UUIDType, FixedType, TimeType))]


def partition_columns(catalog_name: str, schema: Schema, spec: PartitionSpec) -> list[tuple[str, str]]:
    """One ``(helper column, Spark SQL expression)`` per partition field, in spec order."""
    out = []
    for i, pf in enumerate(spec.fields):
        # a nested source by its path, each part quoted: `meta`.`at`
        column = ".".join(f"`{part}`" for part in (schema.find_column_name(pf.source_id) or "").split("."))
        t = pf.transform
        fn = f"{catalog_name}.system"
        if isinstance(t, IdentityTransform):
            expr = column
        elif isinstance(t, (YearTransform, MonthTransform, DayTransform, HourTransform)):
            name = {YearTransform: "years", MonthTransform: "months", DayTransform: "days",
                    HourTransform: "hours"}[type(t)]
            expr = f"{fn}.{name}({column})"
        elif isinstance(t, BucketTransform):
            expr = f"{fn}.bucket({t.num_buckets}, {column})"
        elif isinstance(t, TruncateTransform):
            expr = f"{fn}.truncate({t.width}, {column})"
        else:
            raise BulkWriteError(f"partition field {pf.name}: Spark bulk writes do not support transform {t}")
        out.append((f"__frazil_p{i}", expr))
    return out


def _partition(table: Table, statistics: Any, path: str) -> Record:
    """The file's partition: from its column bounds for order-preserving transforms, from the
    helper directory Spark wrote it under for bucket (whose value the bounds cannot give)."""
    spec, schema = table.spec(), table.schema()
    dirs = dict(part.split("=", 1) for part in urlparse(path).path.split("/")
                if part.startswith("__frazil_p") and "=" in part)
    values: list[Any] = []
    for i, pf in enumerate(spec.fields):
        if isinstance(pf.transform, BucketTransform):
            raw = unquote(dirs[f"__frazil_p{i}"])
            values.append(None if raw == HIVE_NULL else int(raw))
        else:  # pyiceberg 0.12's own inference, field by field
            values.append(statistics._partition_value(pf, schema))
    return Record(*values)


def data_file(table: Table, path: str) -> DataFile:
    """A ``DataFile`` for a Parquet file Spark wrote, metrics read from its footer."""
    input_file = table.io.new_input(path)
    with input_file.open() as stream:
        metadata = pq.read_metadata(stream)
    schema = table.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=compute_statistics_plan(schema, table.metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=_partition(table, statistics, path), file_size_in_bytes=len(input_file), sort_order_id=None,
        spec_id=table.metadata.default_spec_id, equality_ids=None, key_metadata=None,
        **statistics.to_serialized_dict(),
    )


def _parquet_files(location: str) -> list[str]:
    fs, root = pafs.FileSystem.from_uri(location)
    scheme = location.split("://", 1)[0] + "://" if "://" in location else ""
    found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return sorted(scheme + f.path for f in found
                  if f.type == pafs.FileType.File and f.base_name.endswith(".parquet") and "/_temporary/" not in f.path)


class SparkWriter:
    """Writes flushes through the pipeline's Spark session (started on first use)."""

    def __init__(self, settings: Mapping[str, str], catalog_name: str) -> None:
        self._settings, self._catalog = dict(settings), catalog_name

    def write(self, table: Table, data: pa.Table, write_id: str) -> list[DataFile]:
        """Write ``data`` (in the table's Arrow schema, field ids included) as data files of
        ``table`` under ``data/frazil-bulk-<write_id>/``; commit nothing."""
        scheme = urlparse(table.location()).scheme
        if scheme not in ("", "file", "hdfs"):
            # Spark writes these files through a Hadoop FileSystem; S3FileIO serves Iceberg's own
            # reads and writes only, and this Spark has no s3a filesystem (hadoop-aws)
            raise ConfigError(f"table {table.name()} lives at {table.location()}: Spark bulk writes (backfill, "
                                 "spark.bulk_min_rows) need a file:// or hdfs:// warehouse here; on object storage "
                                 "land with `frazil run` (in-process writes), or set spark.bulk_min_rows = 0")
        bad = unsupported_columns(table.schema())
        if bad:
            raise BulkWriteError(f"table {table.name()}: Spark bulk writes cannot write column(s) {', '.join(bad)} "
                                 "(uuid, fixed, time); set spark.bulk_min_rows = 0 for this table")
        started = time.monotonic()
        try:
            spark = session.get(self._settings)
            from pyspark.sql import functions as F
            from pyspark.sql.pandas.types import from_arrow_schema

            ids = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in data.schema}
            # Iceberg's `timestamp` (no zone) must stay local time in the file (TIMESTAMP_NTZ);
            # by default Spark would read it as an instant and write it adjusted to UTC.
            df = spark.createDataFrame(data, schema=from_arrow_schema(data.schema, prefer_timestamp_ntz=True))
            df = df.select(*[F.col(f"`{name}`").alias(name, metadata={"parquet.field.id": ids[name]})
                             for name in df.columns])
            helpers = partition_columns(self._catalog, table.schema(), table.spec())
            for name, expr in helpers:
                df = df.withColumn(name, F.expr(expr))
            location = f"{table.location().rstrip('/')}/data/frazil-bulk-{write_id}"
            # No shuffle: the Arrow batches become the tasks' input as they are, one task per core.
            # Spark's partitioned writer sorts each task's rows by the helper columns, so a task
            # writes one file per partition value it holds.
            df = df.coalesce(spark.sparkContext.defaultParallelism)
            writer = df.write.partitionBy(*[name for name, _ in helpers]) if helpers else df.write
            writer.mode("errorifexists").parquet(location)
            paths = _parquet_files(location)
            files = [data_file(table, path) for path in paths]
        except BulkWriteError:
            raise
        except Exception as exc:  # Spark, py4j and storage errors: nothing was committed
            raise BulkWriteError(f"Spark could not write {data.num_rows} rows for {table.name()}: "
                                 f"{describe(exc)}; nothing was committed") from exc
        rows = sum(f.record_count for f in files)
        if rows != data.num_rows:
            raise BulkWriteError(f"Spark wrote {rows} rows for {table.name()} but was given {data.num_rows}; "
                                 f"nothing was committed (files under {location} are orphans)")
        log.info("bulk write %s: %d rows as %d file(s) through Spark in %.1fs", write_id, rows, len(files),
                 time.monotonic() - started)
        return files
