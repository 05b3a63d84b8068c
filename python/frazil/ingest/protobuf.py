"""Protobuf values in the Confluent wire format (``values.format = "protobuf-confluent"``): each
value names its schema (a ``.proto`` file the producer's serializer registered) by id, and the
message of that file it holds by its message indexes. The native buffer compiles each schema once
and reads every message into JSON, which the JSON decoder holds to the table's columns; this
module fetches the schemas a buffer has not seen (:meth:`ProtoValues.learn`, blocking), and says
the columns a message takes (:meth:`ProtoValues.schema`), to make a table or evolve it. Plain
values (``values.format = "protobuf"``) are bare messages of one type of one ``.proto`` file or
descriptor set (``values.schema_file``, ``values.message``), compiled at start.

Types (docs/configuration.md, "Protobuf values"): ``double``, ``float``; ``int32``, ``sint32``,
``sfixed32`` as ``int``; ``int64``, ``sint64``, ``sfixed64``, ``uint32``, ``fixed32`` as ``long``;
``uint64`` and ``fixed64`` as ``decimal(20, 0)`` (every value exact); ``bool``; ``string`` and
enums (by name) as ``string``; ``bytes`` as ``binary``; messages as ``struct``; ``repeated`` as
``list``; maps with string keys as ``map<string, V>``; ``google.protobuf.Timestamp`` as
``timestamptz`` and the wrapper types as what they wrap.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType, NestedField

from frazil import _native
from frazil.config.checks import compile_plain
from frazil.config.types import ColumnType
from frazil.errors import ConfigError
from frazil.iceberg import declared, evolution
from frazil.iceberg.evolution import Change
from frazil.ingest import registry
from frazil.ingest.registry import PLAIN_ID, WriterSchemas


class ProtoValues:
    """The pipeline's Protobuf schemas: fetched from the registry by id, compiled natively once,
    shared by every buffer (a ``RowSchemas``). With ``plain`` (``values.format = "protobuf"``):
    the one ``.proto`` file of ``values.schema_file``, every value a bare message of type
    ``plain`` (its full name; "": the file's first)."""

    kind = "Protobuf schema"
    made = "made from its first record's Protobuf message"

    def __init__(self, schemas: WriterSchemas, *, plain: str | None = None) -> None:
        self._schemas = schemas
        self._lock = threading.Lock()
        self._plain: tuple[int, list[int]] | None = None
        if plain is None:
            self.native = _native.ProtoSchemas()
            return
        try:   # the .proto file or descriptor set, read at start
            self.native, name, indexes = compile_plain(Path(schemas.where), plain)
        except (OSError, UnicodeDecodeError, _native.NativeError) as exc:
            raise ConfigError(f"values.schema_file {schemas.where}: {exc}") from None
        self._plain = (PLAIN_ID, indexes)
        self.made = f"made from the message {name} of {schemas.where}"

    def learn(self, ids: Sequence[int]) -> None:
        """Blocking. Each of ``ids`` registered, or refused with why (its records are bad
        records). Raises SchemaRegistryError when the registry cannot be asked."""
        registry.learn(ids, self._schemas, self.native, self.native.register, self._lock, "schema (Protobuf)")

    def schema(self, value: bytes, *, extra: Sequence[tuple[str, IcebergType, bool]] = ()) -> tuple[int, Schema]:
        """Blocking. The schema id of ``value`` and a new table's schema for its message: a column
        per field, optional, then ``extra``. ValueError naming why it cannot be had."""
        schema_id, indexes = self._plain if self._plain is not None else _native.protobuf_frame(value)
        self.learn([schema_id])
        try:
            columns = self.native.columns(schema_id, indexes)
        except _native.NativeError as exc:
            raise ValueError(str(exc)) from None
        taken = {name for name, _, _ in extra}
        clash = [name for name, _ in columns if name in taken]
        if clash:
            raise ValueError(f"field {clash[0]!r} is the name of a Kafka metadata, header or key column")
        ids = declared.placeholder_ids(len(columns) + len(extra) + 1)
        fields = [NestedField(i, name, declared.iceberg_type(ColumnType(text), ids), required=False)
                  for i, (name, text) in enumerate(columns, 1)]
        fields += [NestedField(i, name, t, required=required)
                   for i, (name, t, required) in enumerate(extra, len(columns) + 1)]
        return schema_id, Schema(*fields)

    def evolution_of(self, table: Schema, value: bytes) -> list[Change]:
        """Blocking. The changes the message of ``value`` asks of ``table`` (made from an earlier
        version of its schema): its new fields as optional columns (nested ones too), an ``int``
        a ``long``. ValueError naming why its schema cannot be had."""
        _, made = self.schema(value)
        return evolution.between(table.as_struct(), made.as_struct())
