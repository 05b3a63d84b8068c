"""Rows buffered under an older schema, brought to the evolved one: NULL in new columns (nested
too), widened types cast, every old value kept."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa

from frazil.buffers.conform import conform

OLD = pa.schema([pa.field("id", pa.int32()), pa.field("price", pa.decimal128(6, 2)),
                 pa.field("geo", pa.struct([pa.field("lat", pa.float64())])),
                 pa.field("items", pa.list_(pa.struct([pa.field("sku", pa.string())])))])
NEW = pa.schema([pa.field("id", pa.int64()), pa.field("price", pa.decimal128(8, 2)),
                 pa.field("geo", pa.struct([pa.field("lat", pa.float64()), pa.field("alt", pa.int64())])),
                 pa.field("items", pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("n", pa.int64())]))),
                 pa.field("note", pa.string())])


def test_old_rows_keep_their_values_and_get_nulls_in_new_columns() -> None:
    old = pa.Table.from_pylist([{"id": 1, "price": Decimal("1.25"), "geo": {"lat": 2.5}, "items": [{"sku": "a"}]},
                                {"id": 2, "price": None, "geo": None, "items": None}], schema=OLD)
    new = pa.Table.from_pylist([{"id": 3_000_000_000, "price": Decimal("123456.50"), "geo": {"lat": 1.0, "alt": 7},
                                 "items": [{"sku": "b", "n": 2}], "note": "x"}], schema=NEW)
    both = conform([old.slice(0, 2), new], NEW)
    assert both.schema == NEW
    assert both.to_pylist() == [
        {"id": 1, "price": Decimal("1.25"), "geo": {"lat": 2.5, "alt": None}, "items": [{"sku": "a", "n": None}],
         "note": None},
        {"id": 2, "price": None, "geo": None, "items": None, "note": None},
        {"id": 3_000_000_000, "price": Decimal("123456.50"), "geo": {"lat": 1.0, "alt": 7},
         "items": [{"sku": "b", "n": 2}], "note": "x"},
    ]
    sliced = conform([old.slice(1, 1)], NEW)
    assert sliced.to_pylist() == [{"id": 2, "price": None, "geo": None, "items": None, "note": None}]
