"""frazil's native core (Rust, pyo3 + arrow-rs). Heavy calls release the GIL."""

from typing import Literal, final

import pyarrow as pa

__all__ = ["ALIGNMENT", "AppendResult", "AvroBuffer", "BufferFullError", "CorruptBatchError", "DecodeError",
           "FetchSummary", "Fetched", "JsonBuffer", "NativeError", "UnknownField", "UnknownSchemaError",
           "__version__", "KeyIndex", "KeySchemas", "ProtoSchemas", "append_routed", "protobuf_frame", "read_fetch",
           "route_fetched", "route_groups", "split_changes", "transform_values"]

__version__: str
ALIGNMENT: int
"""Byte alignment of every buffer in a drained batch (64)."""

class NativeError(Exception):
    """An error raised by frazil's native core."""

class BufferFullError(NativeError):
    """Appending would pass the buffer's byte cap; nothing was appended. Drain, then try again.

    ``args`` is ``(message, needed_bytes, used_bytes, cap_bytes)``.
    """

class UnknownSchemaError(NativeError):
    """Avro or Protobuf values, or keys whose fields fill columns, name schemas the buffer has
    not been given; nothing was appended. Register or refuse them, then append again.

    ``args`` is ``(message, schema_ids, of_keys)``: ``of_keys`` when the ids are the keys' (for
    :class:`KeySchemas`).
    """

class CorruptBatchError(NativeError):
    """A fetched record batch cannot be read (a CRC-32C mismatch, a malformed batch, an older
    message format); nothing of the fetch was taken.

    ``args`` is ``(message, base_offset)``: the offset of the batch at fault.
    """

@final
class FetchSummary:
    """Counts over the records of a fetch from one index on."""

    @property
    def records(self) -> int: ...
    @property
    def tombstones(self) -> int:
        """Records with a null value."""
    @property
    def value_bytes(self) -> int:
        """Bytes of the non-null values."""
    @property
    def first_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def max_timestamp_ms(self) -> int: ...

@final
class Fetched:
    """One partition's fetched record set, read natively: its records in offset order (control
    batches, aborted transactions and records below the fetch offset left out), none of them a
    Python object until asked for."""

    def __len__(self) -> int: ...
    @property
    def next_offset(self) -> int:
        """The next offset to fetch: past the last whole batch read."""
    @property
    def batches(self) -> int: ...
    @property
    def control_batches(self) -> int: ...
    @property
    def aborted_records(self) -> int: ...
    @property
    def batch_bytes(self) -> int:
        """Bytes of the batches read, as fetched."""
    def index_of(self, offset: int) -> int:
        """The index of the first record at or past ``offset`` (``len`` when none is)."""
    def summary(self, start: int = 0) -> FetchSummary:
        """Counts over the records from index ``start`` on (all zero when there are none)."""
    def tombstones(self, start: int = 0) -> list[int]:
        """The offsets of the records from index ``start`` on whose value is null."""
    def columns(self, start: int = 0, offsets: list[int] | None = None
                ) -> tuple[list[int], list[int], list[bytes | None], list[bytes | None],
                           list[list[tuple[str, bytes | None]]]]:
        """The records from index ``start`` on, or those at ``offsets`` (sorted), as columns:
        offsets, timestamps (ms), keys, values, headers."""

def read_fetch(data: bytes, *, fetch_offset: int, read_committed: bool, aborted: list[tuple[int, int]],
               check_crcs: bool = True) -> Fetched:
    """Reads one partition's record set (message format v2: CRC-32C, gzip, snappy, lz4, zstd) as
    a fetch response returned it. ``aborted``: the response's aborted transactions as (producer
    id, first offset). Raises CorruptBatchError, taking nothing. Runs without the GIL."""

@final
class DecodeError:
    """A record that could not be decoded; the batch it came in was kept without it."""

    @property
    def index(self) -> int: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def field(self) -> str: ...
    @property
    def reason(self) -> str: ...

@final
class UnknownField:
    """A field of a record that the schema does not have (with ``unknown_fields="report"``)."""

    @property
    def index(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def path(self) -> str: ...

@final
class AppendResult:
    """What one ``append`` did: rows kept, records refused, unknown fields seen."""

    @property
    def rows(self) -> int: ...
    @property
    def errors(self) -> list[DecodeError]: ...
    @property
    def unknown_fields(self) -> list[UnknownField]: ...
    @property
    def fields_ignored(self) -> int:
        """Avro: writer fields the table has no column for, left out of the rows kept (one per
        field per row)."""
    @property
    def filtered(self) -> int:
        """Records the buffer's transforms filtered out: no row, no error."""

@final
class JsonBuffer:
    """Decodes Kafka record values (JSON objects) into Arrow record batches of one schema.

    Safe to share between threads: appends of different partitions go to different shards and
    run without the GIL. With ``metadata_columns`` the schema must hold ``_kafka_topic``,
    ``_kafka_partition``, ``_kafka_offset``, ``_kafka_timestamp`` and ``_kafka_key``; they are
    filled from the record metadata, the other columns from the value. ``max_bytes`` is a hard
    cap on :attr:`bytes`; ``dedupe_by_key`` keeps the last record per key by (partition, offset)
    at drain.

    A value is stored exactly as sent, or its record is a decode error; a field is never dropped
    without a word. A field the schema does not have: with ``unknown_fields="reject"`` (the
    default) its record is a decode error naming the field's path (and the column it differs from
    only in case, if any); with ``"report"`` the row is kept without it and the field is listed in
    :attr:`AppendResult.unknown_fields`. A field that differs from a column only in case is a
    decode error either way (it would land as NULL), unless ``fold_case``: then it lands in that
    column (two spellings of one column in a record are a decode error). Any other
    ``unknown_fields`` is a ValueError. A field (or a map's key) twice in one JSON object is a
    decode error naming it: no value is chosen over the other. Dates, times and timestamps are
    ISO-8601 text; a number only for a timestamp whose column declares its unit (field metadata
    ``frazil.unit``).

    ``single_pass`` reads plain values (strings, integers, floats, booleans, ISO-8601 timestamps,
    structs and lists of them) in one pass instead of through arrow-json's tape, with
    ``unknown_fields="reject"``; a value it does not read plainly is decoded alone by arrow-json
    (a row, or a bad record with arrow-json's reason): the same rows; off only to compare the two.

    ``header_columns`` (column, header name) fill columns from the records' headers: the last
    header of that name, NULL when there is none or its value is null; its bytes as text in a
    string column (UTF-8, or a decode error naming the column and the header), as they are in a
    binary column, parsed exactly in an int, long, double or boolean column. ``headers_column``
    names a ``map<string, binary>`` column that takes every header (the last value of a repeated
    name). Those columns are not read from the value. A buffer with header columns needs each
    record's headers: :meth:`append` takes them in ``headers``, :meth:`append_fetched` reads them
    from the fetch.

    ``key_columns`` (column, field) fill columns from the record key: the whole key for field
    ``""`` (as a header fills its column), else the field (a dotted path) of a key that is a JSON
    object, of the column's kind (text for a string column, a number for a number column, true or
    false for a boolean one), exactly; NULL without a key or where the key has no such field. A
    key in the Confluent wire format (magic byte 0, a schema id, then the payload) is read by its
    schema in ``key_schemas`` (an Avro datum, a Protobuf message or JSON); without
    ``key_schemas`` it must be JSON after its frame. An append with a framed key whose schema id
    ``key_schemas`` lacks takes nothing and raises UnknownSchemaError (``of_keys``). Those columns
    are not read from the value.

    ``confluent``: every value is JSON in the Confluent wire format (magic byte 0, a 4-byte schema
    id, the JSON text), as a JSON Schema serializer writes it; the frame is skipped, and a value
    without one is a bad record.

    ``protobuf``: every value is Protobuf in the Confluent wire format (magic byte 0, the schema
    id, the message indexes, the message), each message read with its schema into JSON (proto
    field names, every field, enums by name, 64-bit integers as numbers) and decoded as JSON is. An
    append naming a schema id ``protobuf`` has not registered takes nothing and raises
    UnknownSchemaError with the ids.

    ``transforms``: the table's transforms (a JSON list of steps, ``TableShape.transform_spec``),
    applied natively to each value's JSON (after its frame or its Protobuf message is read) before
    it is decoded; a record they filter out is no row and no error (:attr:`AppendResult.filtered`),
    one they do not apply to is a decode error naming the field. A spec that cannot be read is a
    NativeError.
    """

    def __new__(
        cls,
        *,
        schema: pa.Schema,
        metadata_columns: bool = False,
        max_bytes: int | None = None,
        shards: int = 16,
        unknown_fields: Literal["reject", "report"] = "reject",
        dedupe_by_key: bool = False,
        fold_case: bool = False,
        single_pass: bool = True,
        header_columns: list[tuple[str, bytes]] = ...,
        headers_column: str | None = None,
        key_columns: list[tuple[str, str]] = ...,
        key_schemas: KeySchemas | None = None,
        confluent: bool = False,
        protobuf: ProtoSchemas | None = None,
        transforms: str | None = None,
    ) -> JsonBuffer: ...
    def append(
        self,
        *,
        topic: str,
        partition: int,
        offsets: list[int],
        timestamps_ms: list[int],
        keys: list[bytes | None],
        values: list[bytes],
        headers: list[list[tuple[bytes, bytes | None]]] | None = None,
    ) -> AppendResult:
        """Decode one batch of one topic-partition. Raises BufferFullError (appending nothing)
        when the cap would be passed."""
    def append_fetched(self, *, topic: str, partition: int, fetched: Fetched, start: int = 0,
                       at: list[int] | None = None) -> AppendResult:
        """Decode the records of ``fetched`` from index ``start`` on that have a value, or those at
        ``at`` (ascending indices of records with a value: a routed share of the fetch; not with
        ``start``), straight from the fetched bytes; as :meth:`append` otherwise (an error's
        ``index`` counts the records handed on)."""
    def drain(self) -> pa.RecordBatch | None:
        """Everything buffered as one record batch with 64-byte aligned buffers; afterwards the
        buffer no longer counts it."""
    def drain_batches(self, *, min_rows: int = 0) -> list[pa.RecordBatch]:
        """Everything buffered as the batches it was appended in, without concatenating them
        (one copy fewer than :meth:`drain`); with ``dedupe_by_key``, the one deduplicated batch.
        With ``min_rows``, runs of smaller batches are glued into batches of at least that many
        rows (big batches are never copied)."""
    def clear(self) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def max_bytes(self) -> int | None: ...
    @property
    def single_pass_rows(self) -> int:
        """Rows the single pass decoded so far (the rest went through arrow-json)."""
    @property
    def schema(self) -> pa.Schema: ...

@final
class ProtoSchemas:
    """The compiled Protobuf schemas of a pipeline by schema id (each a ``.proto`` file's text, as
    the registry keeps it, compiled with Google's well-known types), shared by its buffers."""

    def __new__(cls) -> ProtoSchemas: ...
    def register(self, id: int, text: str) -> None:
        """Records of schema ``id`` are read with ``text``; NativeError when it does not compile."""
    def refuse(self, id: int, reason: str) -> None:
        """Every record of schema ``id`` is a bad record, for ``reason``."""
    def register_descriptor_set(self, data: bytes, message: str) -> None:
        """Plain values' schema from a descriptor set (``protoc --include_imports
        --descriptor_set_out``, ``buf build -o``): the file defining ``message`` (or with "" the
        set's last file), registered under id 0. NativeError when it is not a descriptor set or
        has no such message."""
    def known(self, id: int) -> bool: ...
    def read_plain(self, message: str) -> tuple[str, list[int]]:
        """Every value is a bare ``message`` (its full name, or "" for the file's first) of the
        file registered under id 0, read without a frame: its full name and message indexes.
        NativeError when the file has no such message (naming the ones it has)."""
    def columns(self, id: int, indexes: list[int]) -> list[tuple[str, str]]:
        """The columns of the message of schema ``id`` at ``indexes``: (field, column type in the
        declared-column grammar, e.g. ``struct<city: string>``). NativeError naming a field that
        cannot be a column."""

@final
class KeySchemas:
    """The key schemas of a pipeline by registry id, shared by the buffers whose key columns take
    fields of keys in the Confluent wire format."""

    def __new__(cls) -> KeySchemas: ...
    def register(self, id: int, kind: str, text: str) -> None:
        """Keys of schema ``id`` are read as ``kind`` ("AVRO", "PROTOBUF" or "JSON", the
        registry's schemaType) with ``text``; NativeError when it cannot be read."""
    def refuse(self, id: int, reason: str) -> None:
        """Every key of schema ``id`` is unreadable, for ``reason`` (its records are bad records)."""
    def known(self, id: int) -> bool: ...

def protobuf_frame(value: bytes) -> tuple[int, list[int]]:
    """The schema id and message indexes of a Protobuf value in the Confluent wire format;
    ValueError when it is not in that format."""

@final
class AvroBuffer:
    """Decodes Kafka record values (Avro datums, plain or in the Confluent wire format) into Arrow
    record batches of one schema; each writer schema is registered (or refused) first.

    Plain values are the datum, their writer schema registered as id 0; ``confluent`` values are
    magic byte 0, a big-endian 4-byte schema id and the datum (a value that is not is a decode
    error). The reader schema of a registration has the writer's record names and the value
    columns in order; each decoded column is cast exactly to its column's type (only widenings and
    representations of one type; a value that does not fit is an error, never a NULL).

    ``header_columns``, ``headers_column`` and ``key_columns`` fill columns from the records'
    headers and keys as :class:`JsonBuffer`'s do (those columns are not in a reader schema); a
    record whose header or key does not fit is a bad record before its datum is decoded.
    """

    def __new__(
        cls,
        *,
        schema: pa.Schema,
        confluent: bool,
        metadata_columns: bool = False,
        max_bytes: int | None = None,
        shards: int = 16,
        header_columns: list[tuple[str, bytes]] = ...,
        headers_column: str | None = None,
        key_columns: list[tuple[str, str]] = ...,
        key_schemas: KeySchemas | None = None,
    ) -> AvroBuffer: ...
    def register(self, id: int, writer: str, reader: str, ignored: int = 0) -> None:
        """Records of schema ``id`` are read with ``writer`` into ``reader`` (``ignored``: writer
        fields it leaves out, counted per row kept); raises NativeError when arrow-avro cannot
        resolve the pair or a column cannot be cast exactly."""
    def refuse(self, id: int, field: str, reason: str) -> None:
        """Every record of schema ``id`` is a decode error, for ``reason`` at ``field``."""
    def append(
        self,
        *,
        topic: str,
        partition: int,
        offsets: list[int],
        timestamps_ms: list[int],
        keys: list[bytes | None],
        values: list[bytes],
        headers: list[list[tuple[bytes, bytes | None]]] | None = None,
    ) -> AppendResult:
        """Decode one batch of one topic-partition (``headers``: each record's, needed with
        header columns). Raises UnknownSchemaError or BufferFullError (appending nothing)."""
    def append_fetched(self, *, topic: str, partition: int, fetched: Fetched, start: int = 0) -> AppendResult:
        """Decode the records of ``fetched`` from index ``start`` on that have a value, straight
        from the fetched bytes; as :meth:`append` otherwise."""
    def drain_batches(self, *, min_rows: int = 0) -> list[pa.RecordBatch]:
        """As :meth:`JsonBuffer.drain_batches`."""
    def clear(self) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def schema(self) -> pa.Schema: ...

def route_groups(values: list[bytes], paths: list[list[str]]
                 ) -> tuple[list[tuple[list[str | None], list[int]]], list[tuple[int, str]]]:
    """Records grouped by the values at ``paths`` (each a list of field names) of their JSON
    values: ``([(keys, indices), ...], [(index, reason), ...])``, groups in order of first
    appearance, a key being the value as text (a string as it is, a number or boolean as its JSON
    text), or None when missing, null, an object or an array; then the values that are not one
    JSON object (in no group), with why. Runs without the GIL."""

def route_fetched(fetched: Fetched, start: int, paths: list[list[str]]
                  ) -> tuple[list[tuple[list[str | None], list[int], int]], list[tuple[int, str]]]:
    """As :func:`route_groups`, over the records of ``fetched`` from index ``start`` on that have
    a value, read from the fetched bytes: indices are the fetch's, and each group is
    ``(keys, indices, value_bytes)``. Runs without the GIL."""

@final
class KeyIndex:
    """Per committed key of a keyed table (its identifier columns), the data file and row
    position holding it. Keys cross as record batches of the key columns, in the schema given at
    creation (another schema is a NativeError); the work runs without the GIL."""

    def __new__(cls, schema: pa.Schema) -> KeyIndex: ...
    def add(self, keys: pa.RecordBatch, path: str, positions: list[int]) -> None:
        """The rows of ``keys`` are at ``positions`` of data file ``path``."""
    def positions(self, keys: pa.RecordBatch) -> list[tuple[str, list[int]]]:
        """Every committed position of ``keys`` as ``[(path, positions), ...]``, sorted."""
    def forget(self, keys: pa.RecordBatch) -> None:
        """``keys`` are no longer in the table."""
    def forget_at(self, files: list[str], positions: list[tuple[str, list[int]]]) -> int:
        """Rows no longer where the index has them, in one pass: every row of the data files in
        ``files``, and those at the positions listed per file in ``positions`` (``[(path,
        [pos, ...]), ...]``). Keys found elsewhere keep their other positions. Returns how many
        positions were dropped."""
    def export(self, batch_rows: int) -> tuple[list[str], list[pa.RecordBatch]]:
        """Every entry, for a checkpoint: ``(files, batches)``, each batch of at most ``batch_rows``
        rows: the key columns, ``file`` (an index into ``files``) and ``pos``."""
    def load(self, files: list[str], batch: pa.RecordBatch) -> None:
        """A batch of an :meth:`export` (``files`` its file list) back into the index."""
    def __len__(self) -> int: ...
    @property
    def duplicated(self) -> int:
        """Keys found more than once."""
    @property
    def memory_bytes(self) -> int:
        """An estimate of the heap the index holds."""

def split_changes(values: list[bytes], *, op: list[str], after: list[str], before: list[str],
                  upsert_ops: list[str], delete_ops: list[str], unwrap_envelope: bool,
                  units: list[tuple[str, str]] = ..., decimals: list[str] = ..., keys: list[str] = ...,
                  case_insensitive: bool = ...) -> tuple[bytes, list[bytes | None], list[tuple[int, str, str]]]:
    """Change records: per value its kind (``1`` upsert, ``2`` delete, ``0`` bad) in one bytes
    object, its row as a copy of the slice of the value holding it (``after`` for an upsert,
    ``before`` for a delete, ``[]``: the whole value; None when bad), and the bad ones as
    ``(index, field, reason)``. ``op``: the operation field's path (``[]``: every value is an
    upsert of itself). ``unwrap_envelope``: read through a ``{"schema", "payload"}`` value.
    ``units``: (column, unit) of the row's columns read as counts (``"d"``, ``"ms"``, ``"us"``...); a
    number whose envelope schema names another unit of time (Debezium's ``Timestamp`` where the
    column reads ``MicroTimestamp``'s microseconds) is brought to the column's unit in a copy of the
    row, exactly, or the record is bad (digits below the unit, days against a time) naming
    ``after.<column>``. A column of ``decimals`` the envelope's schema names a Connect ``Decimal``
    and that came as base64 text (``decimal.format=BASE64``) is written as its digits at the
    schema's scale. Of a delete's row only the ``keys`` (identifier columns) are looked at.
    ``case_insensitive``: columns are matched to the schema's fields ignoring case. Runs without
    the GIL."""

def transform_values(spec: str, values: list[bytes]) -> list[bytes | None]:
    """Each JSON value through the transforms of ``spec``: its transformed JSON, or None when
    they filter it out or do not apply to it. Runs without the GIL."""

def append_routed(
    *,
    topic: str,
    partition: int,
    offsets: list[int],
    timestamps_ms: list[int],
    keys: list[bytes | None],
    values: list[bytes],
    targets: list[tuple[JsonBuffer, list[int]]],
) -> list[AppendResult]:
    """One batch of one topic-partition appended to several buffers, each taking the records at
    its indices (routing: a record may go to several). The columns are converted once; the
    decoding runs without the GIL. One result per target, in order. A full buffer fails the call
    after the targets before it were appended: give each buffer once, without a byte cap."""
