"""The record buffer of an append table whose values are Kafka Connect's JSON envelope
(``connect_envelope = true``): each value is ``{"schema": {...}, "payload": {...}}``, as the
``JsonConverter`` writes with ``schemas.enable=true``, and its payload is the row.

The native split (``_native.split_changes``, the one keyed tables use, with no operation field)
takes each payload out of its value, and brings a temporal number sent in another unit than its
column reads (the schema says which: Connect's ``Timestamp`` is milliseconds, Debezium's
``MicroTimestamp`` microseconds) and a decimal sent as base64 bytes to the column's form, exactly,
or makes the record bad. A value that is not in the envelope is a bad record, named so.

The envelope is read record by record (the intake hands records, not fetches): each value is
parsed once to split it, then its row decoded as any JSON row.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence

import pyarrow as pa

from frazil import _native
from frazil.buffers.changes import Carried, split_fixes
from frazil.buffers.record_buffer import KafkaRecord, KeyLearner, RecordBuffer, RecordProblem, values_of

NOT_ENVELOPE = ("the value is not in Kafka Connect's JSON envelope (an object of exactly \"schema\" and \"payload\", "
                "as the JsonConverter writes with schemas.enable=true); set the connector's schemas.enable=true, "
                "or connect_envelope = false for plain JSON")


class EnvelopeBuffer(RecordBuffer):
    """A :class:`RecordBuffer` of rows carried in Kafka Connect's JSON envelope."""

    @property
    def reads_fetched(self) -> bool:
        return False   # values are split record by record first

    def __init__(self, schema: pa.Schema, *, metadata_columns: bool, max_bytes: int | None = None,
                 strict_fields: str | None = None, unknown_fields: str = "fail",
                 case_insensitive: bool = False, header_columns: Sequence[tuple[str, builtins.bytes]] = (),
                 headers_column: str | None = None, key_columns: Sequence[tuple[str, str]] = (),
                 keys: KeyLearner | None = None) -> None:
        super().__init__(schema, metadata_columns=metadata_columns, max_bytes=max_bytes, strict_fields=strict_fields,
                         unknown_fields=unknown_fields, case_insensitive=case_insensitive,
                         header_columns=header_columns, headers_column=headers_column, key_columns=key_columns,
                         keys=keys)
        self._units, self._decimals = split_fixes(schema)
        self._case_insensitive = case_insensitive

    def rows_of(self, records: Sequence[KafkaRecord]) -> list[builtins.bytes | None]:
        """The row each record carries (None when it has none): what a schema change is made of."""
        return self._split(records)[0]

    def append(self, topic: str, partition: int, records: Sequence[KafkaRecord]) -> list[RecordProblem]:
        rows, problems = self._split(records)
        taken = [Carried(r.offset, r.timestamp, r.key, row, getattr(r, "headers", ()))
                 for r, row in zip(records, rows, strict=True) if row is not None]
        if taken:
            problems += super().append(topic, partition, taken)
        return sorted(problems, key=lambda p: p.offset)

    def append_fetched(self, topic: str, partition: int, fetched: _native.Fetched,
                       start: int = 0, at: list[int] | None = None) -> list[RecordProblem]:
        raise TypeError("values in Kafka Connect's envelope are appended record by record")

    def _split(self, records: Sequence[KafkaRecord]) -> tuple[list[builtins.bytes | None], list[RecordProblem]]:
        values = values_of(records)
        _, rows, bad = _native.split_changes(
            values, op=[], after=[], before=[], upsert_ops=[], delete_ops=[], unwrap_envelope=True,
            units=self._units, decimals=self._decimals, keys=[], case_insensitive=self._case_insensitive)
        problems = [RecordProblem(records[i].offset, field, reason) for i, field, reason in bad]
        for i, (value, row) in enumerate(zip(values, rows, strict=True)):
            if row is not None and row == value:   # no envelope: the split hands a plain value on whole
                rows[i] = None
                problems.append(RecordProblem(records[i].offset, "", _not_enveloped(value)))
        return rows, problems


def _not_enveloped(value: builtins.bytes) -> str:
    """Why a value the split did not read through is not a row: no envelope, or an envelope
    whose payload is not an object (a null payload carries no row: a record without a value is a
    tombstone, sent as a null value, never as an envelope)."""
    try:
        found = json.loads(value)
    except ValueError:
        return NOT_ENVELOPE
    if isinstance(found, dict) and set(found) == {"schema", "payload"}:
        kind = "null" if found["payload"] is None else type(found["payload"]).__name__
        return (f"the envelope's payload is {kind}, not an object of the row's fields; a value in Kafka "
                "Connect's JSON envelope carries its row as an object")
    return NOT_ENVELOPE

