"""Kafka record keys in the Confluent wire format, whose fields fill key columns: each key names
its schema by id, and the schema registry says its kind (Avro, Protobuf or JSON Schema) and text.
The native buffer reads such a key as JSON by that schema; this module fetches the schemas a
buffer has not seen (:meth:`KeySchemas.learn`, blocking) and registers them natively, once per
pipeline. A schema that cannot be read (unknown to the registry, with references, not compiling)
is refused: the records with such a key are bad records naming the key column and why."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from frazil import _native
from frazil.ingest import registry
from frazil.ingest.registry import WriterSchemas


class KeySchemas:
    """The pipeline's key schemas, by registry id, shared by every buffer with key columns that
    take a field of the key."""

    def __init__(self, schemas: WriterSchemas) -> None:
        self._schemas = schemas   # made with any_kind: keys of every kind
        self.native = _native.KeySchemas()
        self._lock = threading.Lock()

    def learn(self, ids: Sequence[int]) -> None:
        """Blocking. Each of ``ids`` registered, or refused with why. Raises SchemaRegistryError
        when the registry cannot be asked."""
        def register(schema_id: int, text: str) -> None:
            self.native.register(schema_id, self._schemas.kind_of(schema_id), text)

        registry.learn(ids, self._schemas, self.native, register, self._lock, "key schema")
