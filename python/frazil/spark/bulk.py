"""Bulk writes: an Arrow table written by Spark as Parquet data files that Iceberg can adopt.

Spark never commits to the table here: it writes files, and the returned ``DataFile`` objects go
through the same exactly-once path as the in-process writer's (transaction log, then one catalog
commit with the offsets). Two ways, by where the table lives:

- A file:// or hdfs:// table: Spark's own Parquet writer, through a Hadoop FileSystem. The files
  carry the table's field ids (from the Arrow schema's ``PARQUET:field_id``), and each holds one
  partition: rows are partitioned by hidden helper columns computed with Iceberg's own transform
  functions (``<catalog>.system.days(col)``, ``bucket(N, col)``, ...), which Spark writes as
  directory names, not into the files. Metrics come from the footers.
- A table on object storage (s3://, gs://, ...), where this Spark has no Hadoop FileSystem but
  Iceberg has its FileIO (``S3FileIO``): a *scratch table* is registered beside the table, a copy
  of its metadata without snapshots (the same schema and field ids, partition specs, sort order
  and properties, none of frazil's own keys), located in the table's own folder
  ``data/frazil-bulk-<write id>/``. Spark appends to the scratch table through Iceberg, and the
  scratch table's one snapshot lists the files, metrics and partitions. The scratch table is then
  dropped without touching its files (they are about to be the table's). It has ``gc.enabled =
  false``, so Spark refuses a ``DROP TABLE ... PURGE`` of one left by a killed write (pyiceberg's
  ``purge_table`` does not check it: never purge one). Such leftovers are dropped by a later bulk
  write of the same table once an hour old. S3 only (Iceberg's AWS bundle is what Spark gets).

Blocking (Spark jobs): call from a worker thread.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
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
from pyiceberg.types import FixedType, IcebergType, ListType, MapType, StructType, TimeType, UUIDType

from frazil.errors import BulkWriteError, ConfigError
from frazil.iceberg.catalog import BULK_SCRATCH
from frazil.spark import session
from frazil.spark.jobs import describe

log = logging.getLogger(__name__)

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def unsupported_columns(schema: Schema) -> list[str]:
    """Columns, or fields nested in them by path, whose Iceberg type Spark cannot write as Iceberg
    expects (no UUID, fixed or time type in Spark's Parquet writer)."""
    out: list[str] = []

    def walk(t: IcebergType, path: str) -> None:
        if isinstance(t, (UUIDType, FixedType, TimeType)):
            out.append(path)
        elif isinstance(t, StructType):
            for f in t.fields:
                walk(f.field_type, f"{path}.{f.name}" if path else f.name)
        elif isinstance(t, ListType):
            walk(t.element_type, f"{path}.element")
        elif isinstance(t, MapType):
            walk(t.key_type, f"{path}.key")
            walk(t.value_type, f"{path}.value")

    walk(schema.as_struct(), "")
    return out


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


SCRATCH = BULK_SCRATCH              # a scratch table is named <table>__frazil_bulk_<12 hex>
SCRATCH_STARTED = "frazil.bulk-started-ms"
SCRATCH_LEFTOVER_AGE_S = 3600.0     # far longer than one bulk write: a scratch table this old was left by a kill
# a scratch table's files go under its own location, never where these point for the table
_LOCATION_PROPERTIES = ("write.data.path", "write.object-storage.path", "write.folder-storage.path",
                        "write.metadata.path")


def on_object_storage(table: Table) -> bool:
    return urlparse(table.location()).scheme not in ("", "file", "hdfs")


def scratch_metadata(table: Table, location: str, now_ms: int) -> TableMetadata:
    """The table's metadata for a scratch table at ``location``: its schemas (field ids included),
    partition specs, sort orders and properties, a new uuid, no snapshots. Pure."""
    metadata = table.metadata
    # not frazil's own keys either: a scratch table must never look like one of a pipeline's tables
    # (offsets, progress, merge marks)
    properties = {k: v for k, v in metadata.properties.items()
                  if k not in _LOCATION_PROPERTIES and not k.startswith("frazil.")}
    properties.update({"gc.enabled": "false", SCRATCH_STARTED: str(now_ms)})
    return metadata.model_copy(update={
        "location": location, "table_uuid": uuid.uuid4(), "last_updated_ms": now_ms, "properties": properties,
        "current_snapshot_id": None, "snapshots": [], "snapshot_log": [], "metadata_log": [], "refs": {},
        "statistics": [], "partition_statistics": []})


def _quoted(catalog_name: str, identifier: tuple[str, ...]) -> str:
    return ".".join([catalog_name, *(f"`{part}`" for part in identifier)])


def _drop_leftovers(catalog: Catalog, table: Table, now_ms: int) -> None:
    """Drop the scratch tables of ``table`` older than ``SCRATCH_LEFTOVER_AGE_S`` (a killed
    write's). Best effort: another writer may be dropping the same ones, and a table without the
    start time frazil sets is left alone."""
    *namespace, name = table.name()
    prefix = f"{name}{SCRATCH}".lower()
    try:
        identifiers = catalog.list_tables(tuple(namespace))
    except Exception as exc:  # noqa: BLE001 - housekeeping: the write itself goes on
        log.warning("could not list %s for leftover bulk-write scratch tables: %s", ".".join(namespace), describe(exc))
        return
    for identifier in identifiers:
        if not identifier[-1].lower().startswith(prefix):
            continue
        try:
            started = catalog.load_table(identifier).properties.get(SCRATCH_STARTED)
            if started is None or now_ms - int(started) <= SCRATCH_LEFTOVER_AGE_S * 1000:
                continue
            log.warning("dropping %s, a bulk write's scratch table left by a killed process (its files are kept: "
                        "orphan removal deletes those the table does not hold)", ".".join(identifier))
            catalog.drop_table(identifier)
        except Exception as exc:  # noqa: BLE001 - dropped meanwhile by another writer, or the catalog hiccuped
            log.warning("could not drop the leftover scratch table %s: %s", ".".join(identifier), describe(exc))


class SparkWriter:
    """Writes flushes through the pipeline's Spark session (started on first use)."""

    def __init__(self, settings: Mapping[str, str], catalog_name: str) -> None:
        self._settings, self._catalog = dict(settings), catalog_name

    def write(self, table: Table, data: pa.Table, write_id: str) -> list[DataFile]:
        """Write ``data`` (in the table's Arrow schema, field ids included) as data files of
        ``table`` under ``data/frazil-bulk-<write_id>/``; commit nothing."""
        scheme = urlparse(table.location()).scheme
        if on_object_storage(table) and scheme not in ("s3", "s3a", "s3n"):
            raise ConfigError(f"table {'.'.join(table.name())} lives at {table.location()}: Spark bulk writes on "
                              "object storage go through Iceberg's S3FileIO, and this Spark has no FileIO for "
                              f"{scheme}://; set spark.bulk_min_rows = 0 (and land with `frazil run`)")
        bad = unsupported_columns(table.schema())
        if bad:
            raise BulkWriteError(f"table {table.name()}: Spark bulk writes cannot write column(s) {', '.join(bad)} "
                                 "(uuid, fixed, time); set spark.bulk_min_rows = 0 for this table")
        started = time.monotonic()
        location = f"{table.location().rstrip('/')}/data/frazil-bulk-{write_id}"
        try:
            spark = session.get(self._settings)
            from pyspark.sql.pandas.types import from_arrow_schema

            # Iceberg's `timestamp` (no zone) must stay local time in the file (TIMESTAMP_NTZ);
            # by default Spark would read it as an instant and write it adjusted to UTC.
            df = spark.createDataFrame(data, schema=from_arrow_schema(data.schema, prefer_timestamp_ntz=True))
            if on_object_storage(table):
                files = self._through_scratch_table(table, df, location)
            else:
                files = self._as_parquet_files(spark, table, data, df, location)
        except (BulkWriteError, ConfigError):
            raise
        except Exception as exc:  # Spark, py4j, catalog and storage errors: nothing was committed to the table
            raise BulkWriteError(f"Spark could not write {data.num_rows} rows for {table.name()}: "
                                 f"{describe(exc)}; nothing was committed to the table") from exc
        rows = sum(f.record_count for f in files)
        if rows != data.num_rows:
            raise BulkWriteError(f"Spark wrote {rows} rows for {table.name()} but was given {data.num_rows}; "
                                 f"nothing was committed (files under {location} are orphans)")
        log.info("bulk write %s: %d rows as %d file(s) through Spark in %.1fs", write_id, rows, len(files),
                 time.monotonic() - started)
        return files

    def _as_parquet_files(self, spark: Any, table: Table, data: pa.Table, df: Any, location: str) -> list[DataFile]:
        from pyspark.sql import functions as F

        ids = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in data.schema}
        df = df.select(*[F.col(f"`{name}`").alias(name, metadata={"parquet.field.id": ids[name]})
                         for name in df.columns])
        helpers = partition_columns(self._catalog, table.schema(), table.spec())
        for name, expr in helpers:
            df = df.withColumn(name, F.expr(expr))
        # No shuffle: the Arrow batches become the tasks' input as they are, one task per core.
        # Spark's partitioned writer sorts each task's rows by the helper columns, so a task
        # writes one file per partition value it holds.
        df = df.coalesce(spark.sparkContext.defaultParallelism)
        writer = df.write.partitionBy(*[name for name, _ in helpers]) if helpers else df.write
        writer.mode("errorifexists").parquet(location)
        return [data_file(table, path) for path in _parquet_files(location)]

    def _through_scratch_table(self, table: Table, df: Any, location: str) -> list[DataFile]:
        """Spark appends ``df`` to a scratch copy of ``table`` through Iceberg's FileIO; the files
        of its one snapshot are returned, the scratch table dropped (its files kept)."""
        catalog = table.catalog
        now_ms = int(time.time() * 1000)
        _drop_leftovers(catalog, table, now_ms)
        *namespace, name = table.name()
        scratch = (*namespace, f"{name}{SCRATCH}{uuid.uuid4().hex[:12]}")
        metadata_path = f"{location}/metadata/00000-{uuid.uuid4()}.metadata.json"
        ToOutputFile.table_metadata(scratch_metadata(table, location, now_ms), table.io.new_output(metadata_path))
        try:
            catalog.register_table(scratch, metadata_path)
        except NotImplementedError:
            raise ConfigError(f"table {'.'.join(table.name())} lives at {table.location()}: Spark bulk writes on "
                              "object storage register a scratch table, which this catalog cannot do; set "
                              "spark.bulk_min_rows = 0 (and land with `frazil run`)") from None
        try:
            df.writeTo(_quoted(self._catalog, scratch)).append()
            written = catalog.load_table(scratch)
            snapshot = written.current_snapshot()
            if snapshot is None:
                raise BulkWriteError(f"Spark committed nothing to the scratch table {'.'.join(scratch)}")
            return [entry.data_file for manifest in snapshot.manifests(written.io)
                    for entry in manifest.fetch_manifest_entry(written.io, discard_deleted=True)]
        finally:
            try:   # never purged: the files are the table's once committed
                catalog.drop_table(scratch)
            except Exception as exc:  # noqa: BLE001 - the write stands; the next bulk write drops it in an hour
                log.warning("could not drop the scratch table %s (%s); a later bulk write of %s drops it once an hour "
                            "old", ".".join(scratch), describe(exc), name)
