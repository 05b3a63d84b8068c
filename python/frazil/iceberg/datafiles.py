"""pyiceberg ``DataFile`` objects to and from the control topic's ``DataFileRef``.

A worker writes data files; the coordinator, in another process, commits them. The reference
carries what the commit needs (path, size, row count, partition, column metrics), so the
coordinator does not read every footer again. Partition values use Iceberg's single-value binary
encoding for the partition field's result type (``pyiceberg.conversions``), like the column bounds.
"""

from __future__ import annotations

from typing import cast

from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import PrimitiveType

from frazil.events.payloads import ColumnStat, DataFileRef


def to_ref(data_file: DataFile, spec: PartitionSpec, schema: Schema) -> DataFileRef:
    """``data_file`` was written for ``spec`` (pyiceberg's writer leaves the file's spec id unset)."""
    record = data_file.partition
    # an unpartitioned spec has no partition type to work out (pyiceberg does it from the schema each time)
    values = tuple(None if record[i] is None else to_bytes(cast(PrimitiveType, field.field_type), record[i])
                   for i, field in enumerate(spec.partition_type(schema).fields)) if spec.fields else ()
    ids = sorted(set(data_file.value_counts or {}) | set(data_file.null_value_counts or {})
                 | set(data_file.column_sizes or {}) | set(data_file.lower_bounds or {})
                 | set(data_file.upper_bounds or {}))
    columns = tuple(ColumnStat(field_id=i, value_count=(data_file.value_counts or {}).get(i),
                               null_count=(data_file.null_value_counts or {}).get(i),
                               nan_count=(data_file.nan_value_counts or {}).get(i),
                               size_bytes=(data_file.column_sizes or {}).get(i),
                               lower=(data_file.lower_bounds or {}).get(i), upper=(data_file.upper_bounds or {}).get(i))
                    for i in ids)
    return DataFileRef(path=data_file.file_path, file_format=data_file.file_format.value,
                       record_count=data_file.record_count, size_bytes=data_file.file_size_in_bytes,
                       spec_id=spec.spec_id, partition=values, columns=columns,
                       split_offsets=tuple(data_file.split_offsets or ()), sort_order_id=data_file.sort_order_id)


def from_ref(ref: DataFileRef, spec: PartitionSpec, schema: Schema) -> DataFile:
    """The ``DataFile`` for ``ref``; ``spec`` must be the one the file was written with."""
    if ref.spec_id != spec.spec_id:
        raise ValueError(f"data file {ref.path} was written for partition spec {ref.spec_id}, not {spec.spec_id}")
    partition_type = spec.partition_type(schema)
    if len(ref.partition) != len(partition_type.fields):
        raise ValueError(f"data file {ref.path} has {len(ref.partition)} partition values; spec {spec.spec_id} "
                         f"has {len(partition_type.fields)} fields")
    partition = Record(*(None if raw is None else from_bytes(cast(PrimitiveType, field.field_type), raw)
                         for field, raw in zip(partition_type.fields, ref.partition, strict=True)))

    def stats(attr: str) -> dict[int, object]:
        return {c.field_id: getattr(c, attr) for c in ref.columns if getattr(c, attr) is not None}

    data_file = DataFile.from_args(
        content=DataFileContent.DATA, file_path=ref.path, file_format=FileFormat(ref.file_format),
        partition=partition, record_count=ref.record_count, file_size_in_bytes=ref.size_bytes,
        column_sizes=stats("size_bytes"), value_counts=stats("value_count"), null_value_counts=stats("null_count"),
        nan_value_counts=stats("nan_count"), lower_bounds=stats("lower"), upper_bounds=stats("upper"),
        split_offsets=list(ref.split_offsets) or None, sort_order_id=ref.sort_order_id,
        equality_ids=None, key_metadata=None,
    )
    data_file.spec_id = ref.spec_id   # not a field of the manifest struct: pyiceberg sets it the same way
    return data_file
