"""Python face of the native record buffer: Kafka records in, Arrow tables out."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from frazil import _native
from frazil.errors import BufferFull, FrazilError, UnknownWriterSchemas


def headers_of(records: Sequence[KafkaRecord]) -> list[list[tuple[bytes, bytes | None]]]:
    """Each record's headers as the native buffer takes them (a record without any: none)."""
    return [[(k.encode(), v) for k, v in getattr(r, "headers", ())] for r in records]


class SchemaLearner(Protocol):
    """The Protobuf schemas a buffer reads with (``ingest/protobuf.py``'s ``ProtoValues``)."""

    @property
    def native(self) -> _native.ProtoSchemas: ...
    def learn(self, ids: Sequence[int]) -> None: ...


class KeyLearner(Protocol):
    """The registry's key schemas a buffer reads framed keys with (``ingest/key_schemas.py``)."""

    @property
    def native(self) -> _native.KeySchemas: ...
    def learn(self, ids: Sequence[int]) -> None: ...


class KafkaRecord(Protocol):
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


# A steady trickle appends a few rows per partition per poll: 10,000 rows came as ~1,000 batches,
# and pyiceberg's writer spends ~0.4 ms per batch in Python (schema projection), so writing them
# took 450 ms (gluing them first: 150 ms). Batches this large or larger are kept as they are: a
# whole partition fetch (up to 4 MiB, ~15k rows of 266 B) is one batch, and gluing those into runs
# of 64k rows copied a backfill's every row once more (302 ms of a 1.4M-row flush).
COALESCE_ROWS = 8_192


@dataclass(frozen=True)
class RecordProblem:
    """A record that could not become a row, and was not appended: its offset, the field at fault
    ("" for the record as a whole) and why."""

    offset: int
    field: str
    reason: str


NO_SUCH_COLUMN = "the table has no such column"   # how the native buffer's reason for an unknown field starts


def transformed(spec: str | None, values: Sequence[bytes]) -> list[bytes]:
    """``values`` through a table's transforms (``spec``, ``TableShape.transform_spec``; None:
    as they are), less those they filter out or do not apply to: what its rows are made of."""
    if spec is None:
        return list(values)
    return [v for v in _native.transform_values(spec, list(values)) if v is not None]


class RecordBuffer:
    """Decodes JSON record values into rows of one Arrow schema, off the GIL."""

    # whether an append may first fetch the schemas it names (Protobuf): such a buffer takes its
    # records through its own append, never in another's native call (``append_routed``)
    learns_schemas = False
    filtered = 0   # records the transforms filtered out since the pipeline last took the count

    def __init__(self, schema: pa.Schema, *, metadata_columns: bool, max_bytes: int | None = None,
                 strict_fields: str | None = None, unknown_fields: str = "fail",
                 case_insensitive: bool = False, header_columns: Sequence[tuple[str, bytes]] = (),
                 headers_column: str | None = None, key_columns: Sequence[tuple[str, str]] = (),
                 keys: KeyLearner | None = None, confluent: bool = False, protobuf: SchemaLearner | None = None,
                 transforms: str | None = None) -> None:
        """A field the schema does not have: with ``unknown_fields="fail"`` a bad record (named
        with its path, and a column it differs from only in case), for the reason
        ``strict_fields`` when given (a table whose schema was inferred); with ``"ignore"`` it is
        dropped and counted in :attr:`fields_ignored`, unless it differs from a column only in
        case (a near miss would land as NULL): that is a bad record either way, unless
        ``case_insensitive``: then it lands in that column. A bad record is never appended: the
        rest of its batch is. ``header_columns`` (column, header name) and ``headers_column`` (a
        ``map<string, binary>`` of every header) are filled from the records' headers.
        ``key_columns`` (column, field: ``""`` for the whole key) are filled from the record keys;
        a key in the Confluent wire format is read by its schema in ``keys`` (fetched first when
        new, blocking). ``confluent``: each value is JSON in the Confluent wire format (a JSON Schema serializer's);
        one without the frame is a bad record. ``protobuf``: each value is Protobuf in the Confluent
        wire format, read with these schemas (the ones an append names that they lack are fetched
        first, blocking). ``transforms``: the table's (``TableShape.transform_spec``), applied to
        each value before it is decoded; the records they filter out are counted in
        :attr:`filtered`."""
        self._ignore = unknown_fields == "ignore"
        self._strict = None if self._ignore else strict_fields
        try:
            self._native = _native.JsonBuffer(
                schema=schema, metadata_columns=metadata_columns, max_bytes=max_bytes,
                unknown_fields="report" if self._ignore else "reject", fold_case=case_insensitive,
                header_columns=list(header_columns), headers_column=headers_column, key_columns=list(key_columns),
                key_schemas=keys.native if keys is not None else None, confluent=confluent,
                protobuf=protobuf.native if protobuf is not None else None,
                transforms=transforms)
        except _native.NativeError as exc:
            raise FrazilError(f"the record buffer cannot use this table schema: {exc}") from exc
        self.schema = schema
        self.takes_headers = bool(header_columns) or headers_column is not None
        self._protobuf = protobuf
        self._key_schemas = keys
        self.learns_schemas = protobuf is not None or keys is not None
        self.fields_ignored = 0   # fields dropped (``unknown_fields="ignore"``); the pipeline takes the count
        self._counting = threading.Lock()   # appends to one buffer run on several decode threads

    @property
    def reads_fetched(self) -> bool:
        """Whether a fetch's records go straight in (:meth:`append_fetched`); else record by
        record (:meth:`append`), each looked at first."""
        return True

    @property
    def rows(self) -> int:
        return self._native.rows

    @property
    def bytes(self) -> int:
        return self._native.bytes

    def append(self, topic: str, partition: int, records: Sequence[KafkaRecord]) -> list[RecordProblem]:
        """Decode ``records`` of one topic-partition; returns the ones that could not be decoded
        (none of them is appended). Raises
        ``BufferFull`` (taking nothing) when they do not fit the byte cap."""
        return self._learning(lambda: self._native.append(
            topic=topic,
            partition=partition,
            offsets=[r.offset for r in records],
            timestamps_ms=[r.timestamp for r in records],
            keys=[r.key for r in records],
            values=values_of(records),
            headers=headers_of(records) if self.takes_headers else None,
        ))

    def append_fetched(self, topic: str, partition: int, fetched: _native.Fetched,
                       start: int = 0, at: list[int] | None = None) -> list[RecordProblem]:
        """Decode the records of one partition fetch from index ``start`` on that have a value, or
        those at ``at`` (ascending indices of records with a value), straight from the fetched
        bytes; as :meth:`append` otherwise."""
        return self._learning(lambda: self._native.append_fetched(topic=topic, partition=partition, fetched=fetched,
                                                                 start=start, at=at))

    def _learning(self, append: Callable[[], _native.AppendResult]) -> list[RecordProblem]:
        """``append``, after learning the Protobuf schemas and key schemas it names that the buffer
        lacks (an append that names one takes nothing, so it is made again). Avro writer schemas
        are the caller's to decide (raised)."""
        for _ in range(3):
            try:
                with translated_errors():
                    return self._problems(append())
            except UnknownWriterSchemas as exc:
                learner = self._key_schemas if exc.of_keys else self._protobuf
                if learner is None:
                    raise
                learner.learn(exc.ids)
        raise FrazilError("an append still names schema ids the buffer lacks after they were fetched; stopping")

    def take_fields_ignored(self) -> int:
        """The fields dropped since the last call (counted once, whatever thread appended)."""
        with self._counting:
            taken, self.fields_ignored = self.fields_ignored, 0
        return taken

    def take_filtered(self) -> int:
        """The records the transforms filtered out since the last call."""
        with self._counting:
            taken, self.filtered = self.filtered, 0
        return taken

    def _problems(self, result: _native.AppendResult) -> list[RecordProblem]:
        ignored = len(result.unknown_fields) + result.fields_ignored
        if ignored or result.filtered:
            with self._counting:
                self.fields_ignored += ignored
                self.filtered += result.filtered
        strict = self._strict
        return [RecordProblem(e.offset, e.field, strict if strict is not None and e.reason.startswith(NO_SUCH_COLUMN)
                              else e.reason) for e in result.errors]

    def drain(self) -> pa.Table | None:
        """Everything buffered, in appended order, as a table of chunks of at least
        ``COALESCE_ROWS`` rows: small batches are glued in runs (natively, each run freed once
        glued), big ones handed over without a copy."""
        batches = self._native.drain_batches(min_rows=COALESCE_ROWS)
        return pa.Table.from_batches(batches, schema=self.schema) if batches else None

    def clear(self) -> None:
        self._native.clear()


class WriterSchemas:
    """What an Avro buffer is told of each writer schema before records of it are taken."""

    _avro: _native.AvroBuffer   # the native buffer

    def register(self, schema_id: int, writer: str, reader: str, ignored: int = 0) -> None:
        """Records of ``schema_id`` are read with ``reader`` (``ignored``: how many of the writer's
        fields it leaves out, counted per record). Raises FrazilError when the native decoder
        cannot resolve the pair."""
        try:
            self._avro.register(schema_id, writer, reader, ignored)
        except _native.NativeError as exc:
            raise FrazilError(f"writer schema {schema_id} cannot be read into the table: {exc}") from exc

    def refuse(self, schema_id: int, field: str, reason: str) -> None:
        """Every record of ``schema_id`` is a bad record, for ``reason`` at ``field``."""
        self._avro.refuse(schema_id, field, reason)


class AvroRecordBuffer(WriterSchemas, RecordBuffer):
    """Decodes Avro record values (plain datums, or the Confluent wire format) into rows of one
    Arrow schema, off the GIL. Each writer schema is registered with its reader schema (or
    refused) before records of it are taken: an append naming one it does not know raises
    ``UnknownWriterSchemas`` (``ids``) and takes nothing."""

    def __init__(self, schema: pa.Schema, *, confluent: bool, metadata_columns: bool,
                 max_bytes: int | None = None, header_columns: Sequence[tuple[str, bytes]] = (),
                 headers_column: str | None = None, key_columns: Sequence[tuple[str, str]] = (),
                 keys: KeyLearner | None = None) -> None:
        try:
            self._avro = _native.AvroBuffer(schema=schema, confluent=confluent, metadata_columns=metadata_columns,
                                            max_bytes=max_bytes, header_columns=list(header_columns),
                                            headers_column=headers_column, key_columns=list(key_columns),
                                            key_schemas=keys.native if keys is not None else None)
            self._native = self._avro   # type: ignore[assignment]
        except _native.NativeError as exc:
            raise FrazilError(f"the record buffer cannot use this table schema: {exc}") from exc
        self._strict = None
        self._ignore = False
        self._protobuf = None
        self._key_schemas = keys
        self.learns_schemas = keys is not None   # may ask the registry: appended off the event loop
        self.schema = schema
        self.takes_headers = bool(header_columns) or headers_column is not None
        self.fields_ignored = 0
        self._counting = threading.Lock()

    def append(self, topic: str, partition: int, records: Sequence[KafkaRecord]) -> list[RecordProblem]:
        return self._learning(lambda: self._avro.append(
            topic=topic, partition=partition, offsets=[r.offset for r in records],
            timestamps_ms=[r.timestamp for r in records], keys=[r.key for r in records],
            values=values_of(records), headers=headers_of(records) if self.takes_headers else None))

    def append_fetched(self, topic: str, partition: int, fetched: _native.Fetched,
                       start: int = 0, at: list[int] | None = None) -> list[RecordProblem]:
        """As :meth:`append`, for the records of a partition fetch from index ``start`` on that
        have a value, straight from the fetched bytes (a routed share, ``at``, is JSON's only)."""
        if at is not None:
            raise TypeError("Avro values are taken from a fetch whole, from an index on")
        return self._learning(lambda: self._avro.append_fetched(topic=topic, partition=partition, fetched=fetched,
                                                               start=start))

    def drain(self) -> pa.Table | None:
        batches = self._avro.drain_batches(min_rows=COALESCE_ROWS)
        return pa.Table.from_batches(batches, schema=self.schema) if batches else None

    def clear(self) -> None:
        self._avro.clear()


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """The native buffer's refusals as frazil's errors: callers never catch ``_native`` classes."""
    try:
        yield
    except _native.BufferFullError as exc:
        raise BufferFull(str(exc)) from None
    except _native.UnknownSchemaError as exc:
        raise UnknownWriterSchemas(list(exc.args[1]), of_keys=bool(exc.args[2])) from None


def values_of(records: Sequence[KafkaRecord]) -> list[bytes]:
    # a null value (tombstone) is not a JSON object: it comes back as a decode error (the pipeline
    # takes tombstones out before, counting them)
    return [r.value if r.value is not None else b"null" for r in records]


def append_routed(topic: str, partition: int, records: Sequence[KafkaRecord], values: list[bytes],
                  targets: Sequence[tuple[RecordBuffer, list[int]]]) -> list[list[RecordProblem]]:
    """``records`` of one topic-partition (``values``: theirs, as :func:`values_of` gives them)
    into several buffers, each taking the records at its indices, in one native call: the columns
    are converted once, whatever the fan-out. Each buffer at most once, and without a byte cap."""
    results = _native.append_routed(
        topic=topic, partition=partition, offsets=[r.offset for r in records],
        timestamps_ms=[r.timestamp for r in records], keys=[r.key for r in records], values=values,
        targets=[(buffer._native, indices) for buffer, indices in targets])
    return [buffer._problems(result) for (buffer, _), result in zip(targets, results, strict=True)]
