"""Python face of the native record buffer: Kafka records in, Arrow tables out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa

from frazil import _native
from frazil.errors import FrazilError


class KafkaRecord(Protocol):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


# A steady trickle appends a few rows per partition per poll: 10,000 rows came as ~1,000 batches,
# and pyiceberg's writer spends ~0.4 ms per batch in Python (schema projection), so writing them
# took 450 ms (gluing them first: 150 ms). Batches this large or larger are kept as they are.
COALESCE_ROWS = 65_536


class RecordBuffer:
    """Decodes JSON record values into rows of one Arrow schema, off the GIL."""

    def __init__(self, schema: pa.Schema, *, metadata_columns: bool, max_bytes: int | None = None) -> None:
        try:
            self._native = _native.JsonBuffer(schema=schema, metadata_columns=metadata_columns, max_bytes=max_bytes)
        except _native.NativeError as exc:
            raise FrazilError(f"the record buffer cannot use this table schema: {exc}") from exc
        self.schema = schema

    @property
    def rows(self) -> int:
        return self._native.rows

    @property
    def bytes(self) -> int:
        return self._native.bytes

    def append(self, topic: str, partition: int, records: Sequence[KafkaRecord]) -> list[_native.DecodeError]:
        """Decode ``records`` of one topic-partition; returns the ones that could not be decoded.
        Raises ``_native.BufferFullError`` (taking nothing) when they do not fit the byte cap."""
        return self._native.append(
            topic=topic,
            partition=partition,
            offsets=[r.offset for r in records],
            timestamps_ms=[r.timestamp for r in records],
            keys=[r.key for r in records],
            # a null value (tombstone) is not a JSON object: it comes back as a decode error
            values=[r.value if r.value is not None else b"null" for r in records],
        ).errors

    def drain(self) -> pa.Table | None:
        """Everything buffered, in appended order, as a table of chunks of at least
        ``COALESCE_ROWS`` rows: small batches are glued in runs (natively, each run freed once
        glued), big ones handed over without a copy."""
        batches = self._native.drain_batches(min_rows=COALESCE_ROWS)
        return pa.Table.from_batches(batches, schema=self.schema) if batches else None

    def clear(self) -> None:
        self._native.clear()
