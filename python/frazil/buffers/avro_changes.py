"""The record buffer of a keyed table with Avro values: each record is a change to the row of its
key, decoded natively (one writer schema at a time, as for append tables) and then split with
Arrow, a batch at a time, into the rows of upserts and the keys of deletes.

``mode = "upsert"``: every value is the row. ``mode = "cdc"`` (Debezium's envelope): each value is
read into the *envelope* (:func:`envelope_schema`): the operation, ``before`` (the identifier
columns only: a delete's key) and ``after`` (the row, every column of the table); the envelope's
other fields (``source``, ``ts_ms``, ``transaction``) are read past. Tombstones (null values)
are counted or delete the row of their Kafka key, as for JSON (:class:`ChangeBuffer`).

Per record, these are bad records, named by field: an operation the table does not take, an
upsert without ``after``, a delete without ``before`` or without a value for an identifier
column, an upsert without a value for a required column."""

from __future__ import annotations

import builtins
import itertools
import threading
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType, StructType

from frazil import _native
from frazil.buffers.changes import ChangeBuffer, key_schema
from frazil.buffers.record_buffer import (
    COALESCE_ROWS,
    KafkaRecord,
    RecordBuffer,
    RecordProblem,
    WriterSchemas,
    translated_errors,
)
from frazil.config import ChangesConfig
from frazil.errors import BufferFull, FrazilError
from frazil.iceberg.catalog import META_COLUMNS

_META = tuple(name for name, _, _ in META_COLUMNS)


def envelope_schema(table: Schema, changes: ChangesConfig, identifiers: Sequence[str]) -> Schema:
    """What a keyed table's Avro values are read into: the table's own schema in upsert mode;
    in cdc mode the envelope: the operation (a string), ``before`` (the identifier columns,
    optional) and ``after`` (the table's value columns, field ids kept), with the table's Kafka
    metadata columns."""
    if not changes.op:
        return table
    ids = itertools.count(table.highest_field_id + 1)
    values = [f for f in table.fields if f.name not in _META]
    keys = [NestedField(next(ids), f.name, f.field_type, required=False) for f in values if f.name in identifiers]
    return Schema(NestedField(next(ids), changes.op[0], StringType(), required=True),
                  NestedField(next(ids), changes.before[0], StructType(*keys), required=False),
                  NestedField(next(ids), changes.after[0], StructType(*values), required=False),
                  *(f for f in table.fields if f.name in _META))


def envelope_paths(changes: ChangesConfig) -> frozenset[str]:
    """The envelope's records whose fields without a column are not the table's business: the
    envelope itself and ``before`` (the old row: only its key is kept)."""
    return frozenset({"", f"{changes.before[0]}."}) if changes.op else frozenset()


class AvroChangeBuffer(WriterSchemas, ChangeBuffer):
    """A :class:`ChangeBuffer` for Avro values: ``register`` and ``refuse`` each writer schema
    (with its reader schema for :func:`envelope_schema`) before records of it are appended, as
    for an ``AvroRecordBuffer``."""

    def __init__(self, schema: pa.Schema, envelope: pa.Schema, changes: ChangesConfig, identifiers: Sequence[str],
                 *, confluent: bool, max_bytes: int | None = None, case_insensitive: bool = False,
                 avro_key: Callable[[bytes], bytes | None] | None = None) -> None:
        """``schema``: the table's rows (Kafka metadata columns included); ``envelope``: what
        the values are decoded into (:func:`envelope_schema`, as Arrow); ``avro_key``: a Kafka
        key in the Confluent wire format as a JSON object (None: the key is not in it; ValueError:
        why it cannot be read), for tombstones."""
        self._avro_key = avro_key
        try:
            self._avro = _native.AvroBuffer(schema=envelope, confluent=confluent, metadata_columns=True)
            self._native = self._avro   # type: ignore[assignment]
        except _native.NativeError as exc:
            raise FrazilError(f"the record buffer cannot use this table schema: {exc}") from exc
        self.schema, self.changes, self.identifiers = schema, changes, tuple(identifiers)
        self._strict, self._ignore = None, False
        self._keys = RecordBuffer(key_schema(schema, identifiers), metadata_columns=True, unknown_fields="ignore",
                                  case_insensitive=case_insensitive)
        self._max_bytes = max_bytes
        self._upserts: list[pa.Table] = []
        self._deletes: list[pa.Table] = []
        self._held = self._held_rows = 0
        self._lock = threading.Lock()   # appends to one buffer run on several decode threads
        self.fields_ignored = 0
        self.tombstones_skipped = 0
        self._counting = threading.Lock()

    def _key_row(self, key: builtins.bytes) -> builtins.bytes:
        found = self._avro_key(key) if self._avro_key is not None else None
        return super()._key_row(key if found is None else found)

    @property
    def rows(self) -> int:
        return self._held_rows + self._keys.rows

    @property
    def bytes(self) -> int:
        return self._held + self._keys.bytes

    def append(self, topic: str, partition: int, records: Sequence[KafkaRecord]) -> list[RecordProblem]:
        """Records with a value: each an upsert or a delete (or a bad record, not appended).
        Raises ``UnknownWriterSchemas`` or ``BufferFull`` taking nothing."""
        with self._lock:   # the native buffer is this append's scratch space: decoded, then split
            with translated_errors():
                result = self._avro.append(topic=topic, partition=partition, offsets=[r.offset for r in records],
                                           timestamps_ms=[r.timestamp for r in records],
                                           keys=[r.key for r in records], values=[r.value or b"" for r in records])
            return self._taken(result)

    def append_fetched(self, topic: str, partition: int, fetched: _native.Fetched,
                       start: int = 0, at: list[int] | None = None) -> list[RecordProblem]:
        """A partition fetch's records from index ``start`` on: those with a value decoded straight
        from the fetched bytes, its tombstones as :meth:`append_tombstones` takes them."""
        if at is not None:
            raise TypeError("Avro values are taken from a fetch whole, from an index on")
        summary = fetched.summary(start)
        problems: list[RecordProblem] = []
        if summary.records > summary.tombstones:
            with self._lock:
                with translated_errors():
                    result = self._avro.append_fetched(topic=topic, partition=partition, fetched=fetched, start=start)
                problems = self._taken(result)
        if summary.tombstones:
            problems += self._fetched_tombstones(topic, partition, fetched, start)
        return sorted(problems, key=lambda p: p.offset)

    def _taken(self, result: _native.AppendResult) -> list[RecordProblem]:
        """What the scratch buffer decoded, split and kept (the lock held); its bad records."""
        batches = self._avro.drain_batches(min_rows=COALESCE_ROWS)
        if not batches:
            return self._problems(result)
        decoded = pa.Table.from_batches(batches)
        upserts, deletes, bad = self._split(decoded)
        size = sum(t.nbytes for t in (upserts, deletes) if t is not None)
        held = self.bytes
        if self._max_bytes is not None and held and held + size > self._max_bytes:
            raise BufferFull(f"{held + size} bytes of changes would pass the buffer's cap of {self._max_bytes}")
        problems = self._problems(result)   # counted once taken: a refused append is made again
        for kept, into in ((upserts, self._upserts), (deletes, self._deletes)):
            if kept is not None and kept.num_rows:
                into.append(kept)
                self._held_rows += kept.num_rows
        self._held += size
        return sorted(problems + bad, key=lambda p: p.offset)

    def _split(self, decoded: pa.Table) -> tuple[pa.Table | None, pa.Table | None, list[RecordProblem]]:
        """Decoded values as (rows of upserts, keys of deletes, bad records)."""
        if not self.changes.op:   # upsert mode: every value is the row
            return decoded.cast(self.schema), None, []
        spec = self.changes
        op = decoded.column(spec.op[0])
        upsert = pc.fill_null(pc.is_in(op, pa.array(spec.upsert_ops, pa.string())), False)
        delete = pc.fill_null(pc.is_in(op, pa.array(spec.delete_ops, pa.string())), False)
        offsets = decoded.column("_kafka_offset")
        bad: list[RecordProblem] = []
        other = pc.invert(pc.or_(upsert, delete))
        expected = f"expected one of {', '.join(spec.upsert_ops)} (upsert) or {', '.join(spec.delete_ops)} (delete)"
        for offset, value in zip(offsets.filter(other).to_pylist(), op.filter(other).to_pylist(), strict=True):
            bad.append(RecordProblem(offset, spec.op[0],
                                     f"operation {value!r} is not one this table takes; {expected}"))
        upserts = self._part(decoded.filter(upsert), spec.after[0], self.schema, bad)
        deletes = self._part(decoded.filter(delete), spec.before[0], self._keys.schema, bad)
        return upserts, deletes, bad

    def _part(self, changes: pa.Table, field: str, schema: pa.Schema, bad: list[RecordProblem]) -> pa.Table | None:
        """The rows (or keys) of ``changes`` at ``field``, as ``schema``: a change without its
        row, or without a value for a column ``schema`` requires, is a bad record."""
        if not changes.num_rows:
            return None
        row = changes.column(field).combine_chunks()
        columns = dict(zip((f.name for f in row.type), row.flatten(), strict=True))
        columns.update((name, changes.column(name).combine_chunks()) for name in _META)
        present = row.is_valid()
        ok = present
        for f in schema:
            if not f.nullable:
                ok = pc.and_(ok, columns[f.name].is_valid())
        if ok.false_count:
            offsets, ops = changes.column("_kafka_offset"), changes.column(self.changes.op[0])
            for i in pc.indices_nonzero(pc.invert(ok)).to_pylist():
                if not present[i].as_py():
                    reason = f"operation {ops[i].as_py()!r} needs its row in {field!r}, which is missing or null"
                    bad.append(RecordProblem(offsets[i].as_py(), field, reason))
                    continue
                missing = next(f.name for f in schema if not f.nullable and not columns[f.name][i].is_valid)
                bad.append(RecordProblem(offsets[i].as_py(), f"{field}.{missing}",
                                         f"column {missing} is required, and the change has no value for it"))
        picked = pa.table([columns[f.name] for f in schema], names=schema.names)
        picked = picked.filter(ok) if ok.false_count else picked
        return picked.cast(schema)

    def drain(self) -> pa.Table | None:
        return _glued(self._take(self._upserts))

    def drain_deletes(self) -> pa.Table | None:
        tombstones = self._keys.drain()
        return _glued([*self._take(self._deletes), *([tombstones] if tombstones is not None else [])])

    def _take(self, held: list[pa.Table]) -> list[pa.Table]:
        """Everything in ``held`` (the upserts or the deletes), taken out of the buffer."""
        with self._lock:
            taken, held[:] = list(held), []
            self._held_rows -= sum(t.num_rows for t in taken)
            self._held -= sum(t.nbytes for t in taken)
        return taken

    def clear(self) -> None:
        with self._lock:
            self._avro.clear()
            self._upserts, self._deletes, self._held, self._held_rows = [], [], 0, 0
        self._keys.clear()


def _glued(parts: list[pa.Table]) -> pa.Table | None:
    """``parts`` as one table; small appends glued into chunks of at least ``COALESCE_ROWS`` rows
    (each chunk is a batch the writer handles on its own), big ones handed over without a copy."""
    if not parts:
        return None
    out: list[pa.Table] = []
    run: list[pa.Table] = []
    for part in parts:
        if part.num_rows >= COALESCE_ROWS:
            out.append(part)
            continue
        run.append(part)
        if sum(t.num_rows for t in run) >= COALESCE_ROWS:
            out.append(pa.concat_tables(run).combine_chunks())
            run = []
    if run:
        out.append(pa.concat_tables(run).combine_chunks())
    return pa.concat_tables(out)
