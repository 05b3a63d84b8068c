"""Rows buffered under an older schema, brought to a newer one after the table evolved (pure
pyarrow): new columns (top-level or nested in structs, or in the structs of lists) are NULL,
widened columns (int to long, a wider decimal) are cast, which never changes a value. Anything
else is a bug, and raises."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa


def conform(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """``tables`` (each under ``schema`` or an older version of it) as one table under ``schema``."""
    return pa.concat_tables([t if t.schema == schema else _table(t, schema) for t in tables])


def _table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for field in schema:
        if field.name in table.column_names:
            column = table.column(field.name)
            columns.append(pa.chunked_array([_array(chunk, field.type) for chunk in column.chunks], type=field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _array(array: pa.Array, kind: pa.DataType) -> pa.Array:
    if array.type == kind:
        return array
    if pa.types.is_struct(kind) and pa.types.is_struct(array.type):
        have = dict(zip((array.type.field(i).name for i in range(array.type.num_fields)), array.flatten(),
                        strict=True))
        children = [_array(have[f.name], f.type) if f.name in have else pa.nulls(len(array), f.type) for f in kind]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=array.is_null())
    if pa.types.is_list(kind) and pa.types.is_list(array.type):
        if array.offset:   # a slice: rebuilt from zero (pyarrow takes no validity with sliced offsets)
            array = array.take(pa.array(range(len(array)), pa.int64()))
        values = _array(array.values, kind.value_type)
        return pa.ListArray.from_arrays(array.offsets, values, type=kind, mask=array.is_null())
    return array.cast(kind)   # a widening (safe cast: it raises rather than change a value)
