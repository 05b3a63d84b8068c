"""Arrow rows to Parquet data files of a table, partitioned without copying the rows where it can.

pyiceberg writes a partitioned table by filtering the whole Arrow table once per partition value
(``_determine_partitions``): every row is copied once more, all partitions at once (its writer's
thread pool takes every task before writing any), on top of the rows the buffer drained. That
copy was what took the partitioned workload's peak RSS past ``memory_budget_mb`` (1,149 MiB at a
512 MiB budget, docs/benchmarks.md).

Rows from Kafka arrive in runs: a partition's records in offset order, so rows of one partition
value (a day, an hour, a country a topic carries) mostly sit together. Here each run is a slice
of the table (no copy), and a partition value's data files are written from the slices of all its
runs, in their order. Only when the rows are scattered (more than ``MAX_RUNS`` runs, e.g. a
bucket of a random id) are they sorted by partition value first: one copy, as pyiceberg's.
Unpartitioned tables go through pyiceberg's writer, except that a large flush is cut into one
slice per core, written as that many files at once (pyiceberg's writer pool takes a task per
file): a Parquet file is encoded and compressed on one thread, and a backfill's flush of a million
rows otherwise kept one core busy for a second while the other waited (``PARALLEL_MIN_BYTES``).
"""

from __future__ import annotations

import functools
import itertools
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import bin_pack_arrow_table, pyarrow_to_schema, write_file
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.table import DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE, TableProperties, WriteTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.utils.config import Config
from pyiceberg.utils.properties import property_as_int

# pyiceberg's private write helpers, from the package that holds every private pyiceberg name
from frazil.iceberg.pyiceberg_patches.pyarrow_io import dataframe_to_data_files, field_from_arrow_table

MAX_RUNS = 4096   # more runs of equal partition values than this: sorted first (one copy)
# an unpartitioned flush of at least twice this many bytes (Arrow) is written as one file per core, at once
PARALLEL_MIN_BYTES = 64 << 20
# The Parquet dictionary page limit of frazil's own writes, unless the table sets
# write.parquet.dict-size-bytes itself (its default, 2 MB, is left to other writers such as Spark's
# compaction). Arrow's writer tries a dictionary for every column of every file until the page
# passes the limit: at 2 MB a column of distinct doubles or longs is hashed value by value for up
# to 262k values per row group and then written bigger than plain. Each file pays that again, so it
# weighs most where a cycle writes many small files (routed tables, partitions). At 64 KB such a
# column falls back after 8k values, and a column of a few thousand distinct short texts (codes,
# names, pages) keeps its dictionary. Measured on frazil's decoded rows (Parquet CPU per million
# rows, 256 KB -> 64 KB): wide 2.8 -> 2.3 s (31.7 -> 30.4 MB per 100k rows), clickstream in ten
# files 0.62 -> 0.56 s, clickstream in one file unchanged.
DICTIONARY_PAGE_BYTES = 64 << 10


def data_files(metadata: TableMetadata, data: pa.Table, io: FileIO,
               write_uuid: uuid.UUID | None = None) -> list[DataFile]:
    """Write ``data`` (the table's Arrow schema) as data files of the table ``metadata`` describes,
    each with the partition spec it was written for (``spec_id``, which pyiceberg's writer leaves
    unset): a commit after a spec change lists it under that spec, not the new one."""
    files = _data_files(metadata, data, io, write_uuid or uuid.uuid4())
    for f in files:
        f.spec_id = metadata.default_spec_id
    return files


def _data_files(metadata: TableMetadata, data: pa.Table, io: FileIO, write_uuid: uuid.UUID) -> list[DataFile]:
    if TableProperties.PARQUET_DICT_SIZE_BYTES not in metadata.properties:
        metadata = metadata.model_copy(update={"properties": {
            **metadata.properties, TableProperties.PARQUET_DICT_SIZE_BYTES: str(DICTIONARY_PAGE_BYTES)}})
    spec = metadata.spec()
    if data.num_rows == 0:
        return []
    if spec.is_unpartitioned():
        files = min(os.cpu_count() or 1, data.num_rows, int(data.nbytes) // PARALLEL_MIN_BYTES)
        if files <= 1:
            return list(dataframe_to_data_files(table_metadata=metadata, df=data, io=io, write_uuid=write_uuid))
        return _write_slices(metadata, data, io, write_uuid, [None], [_even_slices(data, files)])
    schema = metadata.schema()
    keys = [field.transform.pyarrow_transform(schema.find_field(field.source_id).field_type)(
        field_from_arrow_table(data, _column_name(metadata, field.source_id))) for field in spec.fields]
    starts = run_starts(keys)
    if len(starts) > MAX_RUNS:   # scattered: one sort, then every partition value is one run
        order = pc.sort_indices(pa.table({str(i): k for i, k in enumerate(keys)}),
                                sort_keys=[(str(i), "ascending", "at_end") for i in range(len(keys))])
        data, keys = data.take(order), [pc.take(k, order) for k in keys]
        starts = run_starts(keys)
    ends = [*starts[1:], data.num_rows]
    values = list(zip(*(pc.take(k, pa.array(starts, pa.int64())).to_pylist() for k in keys), strict=True))
    runs: dict[tuple[Any, ...], list[pa.Table]] = {}
    for value, start, end in zip(values, starts, ends, strict=True):
        runs.setdefault(value, []).append(data.slice(start, end - start))
    keys = [PartitionKey(field_values=[PartitionFieldValue(field=f, value=v)
                                       for f, v in zip(spec.fields, value, strict=True)],
                         partition_spec=spec, schema=schema) for value in runs]
    return _write_slices(metadata, data, io, write_uuid, keys, [[pa.concat_tables(slices)] for slices in runs.values()])


def _even_slices(data: pa.Table, parts: int) -> list[pa.Table]:
    """``data`` cut into ``parts`` slices of about equal rows (no copy)."""
    step = -(-data.num_rows // parts)
    return [data.slice(i, step) for i in range(0, data.num_rows, step)]


def _write_slices(metadata: TableMetadata, data: pa.Table, io: FileIO, write_uuid: uuid.UUID,
                  keys: list[PartitionKey | None], groups: list[list[pa.Table]]) -> list[DataFile]:
    """Data files for each group of slices of ``data`` (its partition key from ``keys``): at least
    one file per slice, more where a slice passes the table's target file size; pyiceberg's
    writer pool writes them at once."""
    target_size = property_as_int(metadata.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                                  TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT)
    assert target_size is not None
    task_schema = pyarrow_to_schema(data.schema, name_mapping=metadata.schema().name_mapping,
                                    format_version=metadata.format_version,
                                    downcast_ns_timestamp_to_us=(
                                        Config().get_bool(DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE) or False))
    counter = itertools.count(0)

    def tasks() -> Iterator[WriteTask]:
        for key, slices in zip(keys, groups, strict=True):
            for piece in slices:   # a concat of slices: no copy
                for batches in bin_pack_arrow_table(piece, target_size):
                    yield WriteTask(write_uuid=write_uuid, task_id=next(counter), record_batches=batches,
                                    partition_key=key, schema=task_schema)

    return list(write_file(io=io, table_metadata=metadata, tasks=tasks()))


def run_starts(keys: list[pa.Array | pa.ChunkedArray]) -> list[int]:
    """The rows where the partition value (one array per partition field) differs from the row
    before: 0, then every change. Two nulls are equal here."""
    n = len(keys[0])
    if n == 0:
        return []
    changed = []
    for key in keys:
        before, after = key[:-1], key[1:]
        differ = pc.fill_null(pc.not_equal(after, before), True)
        both_null = pc.and_(pc.is_null(after), pc.is_null(before))
        changed.append(pc.and_(differ, pc.invert(both_null)))
    anywhere = functools.reduce(pc.or_, changed)
    return [0, *(i + 1 for i in pc.indices_nonzero(anywhere).to_pylist())]


def _column_name(metadata: TableMetadata, field_id: int) -> str:
    name = metadata.schema().find_column_name(field_id)
    if name is None:
        raise ValueError(f"the partition spec names field id {field_id}, which the schema does not have")
    return name
