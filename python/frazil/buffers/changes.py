"""The record buffer of a keyed table (``mode = "upsert"`` or ``"cdc"``): each record is a change
to the row of its key. Upserts are decoded into rows of the table (one native buffer), deletes
into keys (another: the identifier columns and the Kafka metadata, every other field ignored).
Which change a record is, and where its row is, is read natively (``_native.split_changes``).
Nothing here decides which change wins: that is :mod:`frazil.iceberg.mutations`, at write time."""

from __future__ import annotations

import builtins
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from frazil import _native
from frazil.buffers.conform import conform
from frazil.buffers.record_buffer import KafkaRecord, RecordBuffer, RecordProblem, values_of
from frazil.config import OP_COLUMN, ChangesConfig
from frazil.iceberg.catalog import META_COLUMNS, UNIT_KEY

UPSERT, DELETE = 1, 2


@dataclass
class Carried:
    """A record with its value replaced by the row (or key) it carries: a change's, or the payload
    of Kafka Connect's envelope (``buffers/envelope.py``); its headers kept for header columns."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def split_fixes(schema: pa.Schema) -> tuple[list[tuple[str, str]], list[str]]:
    """What ``_native.split_changes`` brings to the form of ``schema``'s columns: (column, unit) of
    those read as counts of a unit (an envelope naming another unit is brought to it, or refused),
    and the decimal columns (base64 bytes read as digits)."""
    units = [(f.name, f.metadata[UNIT_KEY].decode()) for f in schema if f.metadata and UNIT_KEY in f.metadata]
    return units, [f.name for f in schema if pa.types.is_decimal(f.type)]


def key_schema(schema: pa.Schema, identifiers: Sequence[str]) -> pa.Schema:
    """The identifier columns and the Kafka metadata columns of ``schema``, as a delete key is kept."""
    names = [*identifiers, *(name for name, _, _ in META_COLUMNS)]
    return pa.schema([schema.field(name) for name in names])


class ChangeBuffer(RecordBuffer):
    """A :class:`RecordBuffer` whose records are changes: :meth:`drain` gives the rows of upserts,
    :meth:`drain_deletes` the keys of deletes, both with their partition and offset."""

    def __init__(self, schema: pa.Schema, changes: ChangesConfig, identifiers: Sequence[str], *,
                 max_bytes: int | None = None, strict_fields: str | None = None, unknown_fields: str = "fail",
                 case_insensitive: bool = False) -> None:
        super().__init__(schema, metadata_columns=True, max_bytes=max_bytes, strict_fields=strict_fields,
                         unknown_fields=unknown_fields, case_insensitive=case_insensitive)
        self.changes = changes
        self.identifiers = tuple(identifiers)
        # a delete's value may be the whole old row: only its key is kept, the other fields are not
        # the table's business (a key field differing from a column only in case is still refused)
        self._keys = RecordBuffer(key_schema(schema, identifiers), metadata_columns=True, unknown_fields="ignore",
                                  case_insensitive=case_insensitive)
        self.tombstones_skipped = 0   # counted here, read and reset by the pipeline
        # the columns read as counts of a unit: an envelope naming another unit for one is refused
        self._units, self._decimals = split_fixes(schema)
        self._case_insensitive = case_insensitive

    def append_fetched(self, topic: str, partition: int, fetched: _native.Fetched,
                       start: int = 0, at: list[int] | None = None) -> list[RecordProblem]:
        """Upserts (every value is the row): a partition fetch's records from index ``start`` on,
        those with a value decoded straight from the fetched bytes, its tombstones as
        :meth:`append_tombstones` takes them. Raises ``BufferFull`` (taking nothing) as
        :meth:`append`. Change envelopes (``op``) are split record by record: :meth:`append`."""
        if self.changes.op or at is not None:
            raise TypeError("change envelopes, and shares of a fetch, are appended record by record")
        summary = fetched.summary(start)
        problems = (super().append_fetched(topic, partition, fetched, start)
                    if summary.records > summary.tombstones else [])
        if summary.tombstones:
            problems += self._fetched_tombstones(topic, partition, fetched, start)
        return sorted(problems, key=lambda p: p.offset)

    def _fetched_tombstones(self, topic: str, partition: int, fetched: _native.Fetched,
                            start: int) -> list[RecordProblem]:
        """The tombstones of a partition fetch from index ``start`` on, as :meth:`append_tombstones`."""
        offsets, timestamps, keys, _, _ = fetched.columns(start, fetched.tombstones(start))
        return self.append_tombstones(topic, partition, [
            Carried(o, t, k, None) for o, t, k in zip(offsets, timestamps, keys, strict=True)])

    @property
    def reads_fetched(self) -> bool:
        return not self.changes.op   # change envelopes are split record by record

    @property
    def rows(self) -> int:
        return self._native.rows + self._keys.rows

    @property
    def bytes(self) -> int:
        return self._native.bytes + self._keys.bytes

    def append(self, topic: str, partition: int, records: Sequence[KafkaRecord]) -> list[RecordProblem]:
        """Records with a value: each an upsert or a delete (or a bad record, not appended). Raises
        ``BufferFull`` (taking nothing) when the upserts do not fit the byte cap."""
        spec = self.changes
        if not spec.op:   # upsert mode: every value is the row
            return super().append(topic, partition, records)
        kinds, rows, bad = self._split_native(records)
        upserts: list[Carried] = []
        deletes: list[Carried] = []
        for record, kind, row in zip(records, kinds, rows, strict=True):
            if row is not None:
                (upserts if kind == UPSERT else deletes).append(
                    Carried(record.offset, record.timestamp, record.key, row))
        problems = super().append(topic, partition, upserts) if upserts else []   # the capped buffer first
        self._keys.fields_ignored = 0
        if deletes:
            problems += self._keys.append(topic, partition, deletes)
            self._keys.fields_ignored = 0   # the old row's other fields: not ignored data, just not kept
        problems += [RecordProblem(records[i].offset, field, reason) for i, field, reason in bad]
        return sorted(problems, key=lambda p: p.offset)

    def _split_native(self, records: Sequence[KafkaRecord]
                      ) -> tuple[builtins.bytes, list[builtins.bytes | None], list[tuple[int, str, str]]]:
        spec = self.changes
        return _native.split_changes(
            values_of(records), op=list(spec.op), after=list(spec.after), before=list(spec.before),
            upsert_ops=list(spec.upsert_ops), delete_ops=list(spec.delete_ops), unwrap_envelope=spec.unwrap_envelope,
            units=self._units, decimals=self._decimals, keys=list(self.identifiers),
            case_insensitive=self._case_insensitive)

    def rows_of(self, records: Sequence[KafkaRecord]) -> list[builtins.bytes | None]:
        """The row each record carries (an upsert's; None for a delete or a bad change): what a
        schema change is made of."""
        spec = self.changes
        if not spec.op:
            return [r.value for r in records]
        kinds, rows, _ = self._split_native(records)
        return [row if kind == UPSERT else None for kind, row in zip(kinds, rows, strict=True)]

    def append_tombstones(self, topic: str, partition: int, records: Sequence[KafkaRecord]) -> list[RecordProblem]:
        """Records with a null value. ``tombstones = "delete"``: each deletes the row of its Kafka
        key (a JSON object holding the identifier columns, or with one identifier column its value);
        a tombstone without a key is a bad record. ``"skip"``: counted, nothing taken."""
        if self.changes.tombstones != "delete":
            with self._counting:   # fetches of several partitions are appended at once
                self.tombstones_skipped += len(records)
            return []
        deletes: list[Carried] = []
        problems: list[RecordProblem] = []
        for record in records:
            if record.key is None:
                problems.append(RecordProblem(record.offset, "", "a tombstone (null value) without a Kafka key "
                                              "names no row to delete; give tombstones the key of their row"))
                continue
            try:
                row = self._key_row(record.key)
            except ValueError as exc:
                problems.append(RecordProblem(record.offset, "", f"the tombstone's Kafka key: {exc}"))
                continue
            deletes.append(Carried(record.offset, record.timestamp, record.key, row))
        problems += self._keys.append(topic, partition, deletes) if deletes else []
        self._keys.fields_ignored = 0
        return sorted(problems, key=lambda p: p.offset)

    def _key_row(self, key: builtins.bytes) -> builtins.bytes:   # builtins: ``bytes`` is a property here
        """A tombstone's Kafka key as a JSON object of the identifier columns (:func:`key_row`);
        ValueError: why it cannot be one."""
        return key_row(key, self.identifiers, self.changes.unwrap_envelope)

    def drain_deletes(self) -> pa.Table | None:
        """The keys of every delete taken since the last drain, with their Kafka metadata."""
        return self._keys.drain()

    def clear(self) -> None:
        super().clear()
        self._keys.clear()


# A key that is a JSON integer as it is written (no sign but minus, no leading zero): the usual key
# of a table with one identifier column, an id. Such a key is its own JSON value: no parse needed.
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]*)")


@functools.lru_cache(maxsize=64)
def _member(name: str) -> bytes:
    """``name`` as the JSON string that starts an object member."""
    return json.dumps(name).encode()


def key_row(key: bytes, identifiers: Sequence[str], unwrap_envelope: bool) -> bytes:
    """A tombstone's Kafka key as a JSON object of the identifier columns: an object as it is
    (read through a ``{"schema", "payload"}`` envelope), else, with one identifier column, the
    key as its value: JSON text as JSON, other bytes as text (the decoder then checks the
    column's type and refuses what does not fit)."""
    if len(identifiers) == 1 and _INTEGER.fullmatch(key):
        return b"{%s:%s}" % (_member(identifiers[0]), key)
    try:
        found = json.loads(key)
    except (ValueError, UnicodeDecodeError):
        found = key.decode("utf-8", "replace")
    if isinstance(found, dict):
        if unwrap_envelope and set(found) == {"schema", "payload"} and isinstance(found["payload"], dict):
            return json.dumps(found["payload"]).encode()
        return key
    if len(identifiers) != 1:
        return b"null"   # a bad record: the decoder says the value is not an object
    return json.dumps({identifiers[0]: found}).encode()


def staged(rows: pa.Table | None, deletes: pa.Table | None, schema: pa.Schema) -> pa.Table:
    """A batch's latest changes as rows of a staging table (``schema``): each upsert's row and
    each delete's key (its other columns NULL), with the change in ``_frazil_op``: ``u`` or ``d``."""
    parts = [t.append_column(OP_COLUMN, pa.array([op] * t.num_rows, pa.string()))
             for t, op in ((rows, "u"), (deletes, "d")) if t is not None and t.num_rows]
    return conform(parts, schema) if parts else schema.empty_table()


def staging_buffer_schema(table_schema: pa.Schema, required: Sequence[str]) -> pa.Schema:
    """What a staging table's buffer decodes into: the staging table's columns but the operation
    (frazil fills it), the declared ``required`` ones required again (the staging table has them
    optional, for deletes)."""
    schema = table_schema.remove(table_schema.get_field_index(OP_COLUMN))
    for name in required:
        i = schema.get_field_index(name)
        schema = schema.set(i, schema.field(i).with_nullable(False))
    return schema
