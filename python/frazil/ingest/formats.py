"""The value format of each topic (``values.format``, and ``[values.topics]`` for the topics with
one of their own) and what reading each format needs beyond its buffer, made once, on first use:
the writer schemas of Avro values, and the registry's schemas that make and evolve tables of JSON
Schema and Protobuf values. A table reads one format: the one of the topics it takes
(``Targets.fit_format`` holds it to that)."""

from __future__ import annotations

import threading

from frazil.config import AVRO_FORMATS, ValuesConfig
from frazil.ingest.json_schema import JsonSchemas
from frazil.ingest.key_schemas import KeySchemas
from frazil.ingest.protobuf import ProtoValues
from frazil.ingest.registry import RowSchemas, WriterSchemas


class ValueFormats:
    def __init__(self, values: ValuesConfig) -> None:
        self._values = values
        self._of: dict[str, str] = {}
        formats = values.formats
        # made at start, each once: worker threads and the loop share them
        self._writers: dict[str, WriterSchemas] = {f: WriterSchemas(values.of(f)) for f in formats if f in AVRO_FORMATS}
        # per Protobuf format one set of compiled schemas, shared by every buffer reading it
        self._protobuf: dict[str, ProtoValues] = {
            f: ProtoValues(WriterSchemas(values.of(f)), plain=values.message if f == "protobuf" else None)
            for f in formats if f in ("protobuf", "protobuf-confluent")}
        self._rows: dict[str, RowSchemas] = {f: JsonSchemas(WriterSchemas(values.of(f)))
                                             for f in formats if f == "json-schema-confluent"}
        self._rows.update(self._protobuf)
        avro_keys = self._writers.get("avro-confluent")
        # keyed tables' tombstones: an Avro key in the Confluent wire format as JSON
        self.avro_key = avro_keys.key_object if avro_keys is not None else None
        self._keys: KeySchemas | None = None
        self._keys_lock = threading.Lock()

    def of(self, topic: str) -> str:
        """The format of ``topic``'s values."""
        fmt = self._of.get(topic)
        if fmt is None:
            fmt = self._of[topic] = self._values.format_of(topic)
        return fmt

    def keys(self) -> KeySchemas | None:
        """The registry's key schemas, which key columns taking a field of a framed key read with
        (made on first use, shared by every buffer); None without a schema registry."""
        framed = [f for f in self._values.formats if f.endswith("-confluent")]
        if not framed:
            return None
        with self._keys_lock:
            if self._keys is None:
                self._keys = KeySchemas(WriterSchemas(self._values.of(framed[0]), any_kind=True))
            return self._keys

    def writers(self, fmt: str) -> WriterSchemas | None:
        """Avro values' writer schemas by id (the schema file's, or the registry's); None for a
        format other than Avro."""
        return self._writers.get(fmt)

    def protobuf(self, fmt: str) -> ProtoValues | None:
        """The compiled Protobuf schemas the buffers of ``fmt`` read with; None for the other formats."""
        return self._protobuf.get(fmt)

    def rows(self, fmt: str) -> RowSchemas | None:
        """The registry's schemas of values decoded as JSON rows (JSON Schema, Protobuf): they make
        and evolve tables. None for the other formats."""
        return self._rows.get(fmt)
