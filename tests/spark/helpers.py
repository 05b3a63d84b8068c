"""Tables for the in-process Spark tests: frazil's column set, rows with Kafka coordinates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from frazil.config import Column, TableConfig
from frazil.iceberg import catalog as iceberg_catalog

COLUMNS = (Column("id", "long", required=True), Column("name", "string"), Column("amount", "double"),
           Column("at", "timestamptz"), Column("local", "timestamp"))


def make_table(catalog: Catalog, name: str, partition_by: tuple[str, ...] = ()) -> Table:
    return iceberg_catalog.ensure_table(catalog, TableConfig(f"db.{name}", COLUMNS, partition_by=partition_by))


def rows(table: Table, start: int, end: int, *, topic: str = "events", partition: int = 0) -> pa.Table:
    """Rows for offsets ``[start, end)`` of one partition; ``at`` spreads over 5 days, some null."""
    n = end - start
    base = datetime(2026, 11, 1, tzinfo=UTC)
    return pa.Table.from_pydict({
        "id": list(range(start, end)),
        "name": [f"n{i % 13}" for i in range(start, end)],
        "amount": [i * 0.5 for i in range(start, end)],
        "at": [None if i % 101 == 0 else base + timedelta(hours=i % 120) for i in range(start, end)],
        "local": [datetime(2026, 11, 1, 23, 30) + timedelta(minutes=i % 90) for i in range(start, end)],
        "_kafka_topic": [topic] * n, "_kafka_partition": [partition] * n, "_kafka_offset": list(range(start, end)),
        "_kafka_timestamp": [base] * n, "_kafka_key": [None] * n,
    }, schema=iceberg_catalog.arrow_schema(table))
