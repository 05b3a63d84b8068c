"""The tables one pipeline writes, as the worker sees them: per table its config, record buffer,
committer, the table as last loaded, and *floors*, the offsets it is known to hold (it takes no
record below them: rule 2, table by table)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table

from frazil.buffers.avro_changes import AvroChangeBuffer, envelope_schema
from frazil.buffers.changes import ChangeBuffer, key_schema, staging_buffer_schema
from frazil.buffers.conform import conform
from frazil.buffers.envelope import EnvelopeBuffer
from frazil.buffers.positions import Takers, resume_at
from frazil.buffers.record_buffer import AvroRecordBuffer, KeyLearner, RecordBuffer, SchemaLearner
from frazil.config import AVRO_FORMATS, Config, TableConfig
from frazil.errors import ConfigError
from frazil.events.payloads import DeadLetter
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import offsets
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import TopicPartition, merge_progress

log = logging.getLogger(__name__)


@dataclass
class Target:
    cfg: TableConfig
    committer: Committer
    buffer: RecordBuffer
    table: Table                                   # as last loaded
    floors: dict[TopicPartition, int] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)   # kept with its offsets, as last read
    # bad records of what the buffer holds (on_bad_record = "dead_letter"): they go with its rows
    dead: list[DeadLetter] = field(default_factory=list)
    # rows buffered under an older schema of the table (it evolved since): they go with the buffer's
    carried: list[pa.Table] = field(default_factory=list)
    carried_deletes: list[pa.Table] = field(default_factory=list)   # a keyed table's deletes, likewise
    format: str = "json"                           # of the values its buffer reads
    formats: tuple[str, ...] = ("json",)           # the ones config check found its topics may have
    format_from: str | None = None                 # the topic whose records held it to it, in this process
    inferred: bool = False                         # its buffer refuses fields the table lacks (an inferred schema)

    _skips: tuple[str, dict[TopicPartition, frozenset[int]]] | None = None

    def skips(self, pipeline: str) -> dict[TopicPartition, frozenset[int]]:
        """The records an operator told this table's pipeline to skip (``frazil offsets --skip``), as
        the table was last loaded (read again whenever its metadata changes)."""
        location = self.table.metadata_location
        if self._skips is None or self._skips[0] != location:
            found = offsets.stored_skips(self.table.properties, pipeline)
            self._skips = (location, {tp: frozenset(offs) for tp, offs in found.items()})
        return self._skips[1]

    @property
    def rows(self) -> int:
        return self.buffer.rows + sum(int(t.num_rows) for t in (*self.carried, *self.carried_deletes))

    @property
    def bytes(self) -> int:
        return self.buffer.bytes + sum(int(t.nbytes) for t in (*self.carried, *self.carried_deletes))

    def drain(self) -> pa.Table | None:
        """Everything buffered, under the newest schema the buffer knows."""
        return _with_carried(self.buffer.drain(), self.carried, self.buffer.schema)

    def drain_deletes(self) -> pa.Table | None:
        """A keyed table's deletes taken since the last drain (None for an append table), under
        the newest schema the buffer knows."""
        if not isinstance(self.buffer, ChangeBuffer):
            return None
        return _with_carried(self.buffer.drain_deletes(), self.carried_deletes,
                             key_schema(self.buffer.schema, self.buffer.identifiers))

    def clear(self) -> None:
        self.buffer.clear()
        self.dead.clear()
        self.carried.clear()
        self.carried_deletes.clear()

    @property
    def name(self) -> str:
        return self.cfg.name

    def load(self) -> Table:
        """The table now (blocking); while the catalog cannot be reached, the last one loaded
        (files are written against its schema and spec, and the coordinator's commit checks them)."""
        try:
            self.table = self.committer.load()
        except Exception as exc:  # noqa: BLE001 - catalog unreachable
            log.warning("cannot load %s (%s: %s); writing against the table as last loaded", self.name,
                        type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
        return self.table


def _with_carried(data: pa.Table | None, carried: list[pa.Table], schema: pa.Schema) -> pa.Table | None:
    """``data`` after what ``carried`` held (emptied), all under ``schema``."""
    if not carried:
        return data
    tables = [*carried, *([data] if data is not None else [])]
    carried.clear()
    return conform(tables, schema)


class Formats(Protocol):
    """The value format of each topic, and what the buffers of some formats share."""

    @property
    def avro_key(self) -> Callable[[bytes], bytes | None] | None:
        """An Avro key in the Confluent wire format as JSON (keyed tables' tombstones)."""

    def protobuf(self, fmt: str) -> SchemaLearner | None:
        """The Protobuf schemas buffers of ``fmt`` read with, shared by every one of them."""

    def keys(self) -> KeyLearner | None:
        """The registry's key schemas (framed keys whose fields fill columns); None without a registry."""

    def of(self, topic: str) -> str: ...


class _Json:
    """Every topic's values JSON."""

    avro_key: Callable[[bytes], bytes | None] | None = None

    def protobuf(self, fmt: str) -> SchemaLearner | None:
        return None

    def keys(self) -> KeyLearner | None:
        return None

    def of(self, topic: str) -> str:
        return "json"


JSON_ONLY = _Json()


class Targets:
    """Every table of the pipeline, by name, in config order."""

    def __init__(self, cfg: Config, catalog: Catalog, tables: Mapping[str, Table],
                 takers: Callable[[str], Takers], formats: Formats = JSON_ONLY) -> None:
        """``tables``: each configured table as ``ensure_table`` left it. With one table its buffer
        has the memory budget as a hard cap; with several, the pipeline checks their sum once per
        poll (a fan-out must land in every table's buffer or in none), so the buffers can pass the
        budget by one poll's records. ``takers``: which tables may take a topic's records
        (routing), for where a partition resumes. ``formats``: each topic's value format
        (``ingest/formats.py``); a table's buffer reads the format of its topics
        (:meth:`fit_format`)."""
        # One declared table and nothing else: its buffer has the budget as a hard cap. Otherwise
        # (several buffers, or tables opened later) the pipeline checks their sum once per poll.
        self.single = len(cfg.tables) == 1 and cfg.dynamic is None and bool(cfg.tables[0].columns)
        self._takers = takers
        self._formats = formats
        self._config = cfg
        self._budget = cfg.memory_budget_bytes
        self._catalog, self._max_attempts = catalog, cfg.max_commit_attempts
        self.pipeline = cfg.pipeline
        self._by_name = {t.name: self.build(t, tables[t.name], inferred=not t.columns, floors=False)
                         for t in cfg.tables if t.name in tables}
        for name, table in tables.items():   # named by the records, created by an earlier run
            if name not in self._by_name and cfg.dynamic is not None:
                self.add(cfg.dynamic.table_config(name), table, inferred=not cfg.dynamic.columns, floors=False)

    def __getitem__(self, name: str) -> Target:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def add(self, cfg: TableConfig, table: Table, *, inferred: bool, floors: bool = True) -> Target:
        """A table named by the records in an earlier run (:meth:`build`, then in)."""
        target = self.build(cfg, table, inferred=inferred, floors=floors)
        self.add_built(target)
        return target

    def add_built(self, target: Target) -> None:
        self._by_name[target.name] = target

    def build(self, cfg: TableConfig, table: Table, *, inferred: bool, floors: bool = True,
              topic: str | None = None) -> Target:
        """Blocking. A table named by the records, with its floors from its offsets (``floors``:
        now; else at the next positioning). A table whose schema was inferred refuses fields it
        does not have (they would be dropped silently). ``topic``: the topic whose records named
        it, whose format it reads (else the first its config may take, until :meth:`fit_format`)."""
        committer = Committer(self._catalog, cfg.name, self.pipeline, max_attempts=self._max_attempts)
        declared = next((t for t in self._config.tables if t.name == cfg.name), None)
        source = declared or self._config.dynamic or cfg   # what config check held the table to
        formats = self._config.formats_of(source)
        fmt = self._formats.of(topic) if topic is not None else formats[0]
        target = Target(cfg, committer, self.buffer_for(cfg, table, inferred=inferred, fmt=fmt), table,
                        committer.held(table).offsets if floors else {}, format=fmt,   # ``table`` as just loaded
                        formats=formats, inferred=inferred)
        if topic is not None:
            self.fit_format(target, topic)
        return target

    def format_of(self, topic: str) -> str:
        """The format of ``topic``'s values."""
        return self._formats.of(topic)

    def fit_format(self, target: Target, topic: str) -> None:
        """Hold ``target`` to the format of ``topic``'s values before it takes them: the first
        topic it takes in this process sets it (its empty buffer made again when the format was
        only a guess); a topic of another format after that is a configuration error."""
        if target.format_from == topic:
            return
        fmt = self._formats.of(topic)
        if fmt not in target.formats:   # its format's rules were not checked for the table
            raise ConfigError(f"table {target.name} takes {topic}, whose values are {fmt} by values.format and "
                              f"[values.topics], which config check did not find it may take (it found "
                              f"{', '.join(target.formats)}): give the table a topics regex that takes only topics "
                              "of one format (with a topic pattern: the regex of its [values.topics] entry, as "
                              "written there)")
        if target.format_from is None:
            if fmt != target.format:
                if target.rows:
                    raise ConfigError(f"table {target.name} holds {target.format} records and now takes {topic}, "
                                      f"whose values are {fmt}: a table's topics share one value format")
                target.buffer = self.buffer_for(target.cfg, target.table, inferred=target.inferred, fmt=fmt)
                target.format = fmt
            target.format_from = topic
        elif fmt != target.format:
            raise ConfigError(f"table {target.name} takes topics of two value formats: {target.format_from} "
                              f"({target.format}) and {topic} ({fmt}); a table's topics share one format: give it a "
                              "topics regex (or [dynamic] a topics regex) that takes one format's topics, going by "
                              "values.format and [values.topics]")

    def buffer_for(self, cfg: TableConfig, table: Table, *, inferred: bool, fmt: str) -> RecordBuffer:
        """A record buffer for ``table`` as it is now, reading values in ``fmt``. With one declared
        table and nothing else it has the memory budget as a hard cap."""
        avro = fmt in AVRO_FORMATS
        if avro and cfg.changes is not None:
            envelope = envelope_schema(table.schema(), cfg.changes, cfg.identifier_columns)
            return AvroChangeBuffer(iceberg_catalog.arrow_schema(table), schema_to_pyarrow(envelope),
                                    cfg.changes, cfg.identifier_columns,
                                    confluent=fmt == "avro-confluent",
                                    max_bytes=self._budget if self.single else None,
                                    case_insensitive=cfg.case_insensitive, avro_key=self._formats.avro_key)
        header_columns = [(h.name, h.header.encode()) for h in cfg.header_columns]
        key_columns = [(k.name, k.field) for k in cfg.key_columns]
        # framed keys whose fields fill columns are read by the registry's schema of each
        keys = self._formats.keys() if any(k.field for k in cfg.key_columns) else None
        if avro:
            return AvroRecordBuffer(iceberg_catalog.arrow_schema(table),
                                    confluent=fmt == "avro-confluent",
                                    metadata_columns=cfg.metadata_columns,
                                    max_bytes=self._budget if self.single else None, header_columns=header_columns,
                                    headers_column=cfg.headers_column, key_columns=key_columns, keys=keys)
        if cfg.changes is not None:
            schema = iceberg_catalog.arrow_schema(table, value_options(cfg, table.properties))
            if cfg.changes.target:   # a staging table: decoded against the declared columns
                schema = staging_buffer_schema(schema, [c.name for c in cfg.columns if c.required])
            return ChangeBuffer(schema, cfg.changes,
                                cfg.identifier_columns, max_bytes=self._budget if self.single else None,
                                strict_fields=_strict(cfg.name) if inferred else None,
                                unknown_fields=cfg.unknown_fields, case_insensitive=cfg.case_insensitive)
        schema = iceberg_catalog.arrow_schema(table, value_options(cfg, table.properties))
        strict = _strict(cfg.name) if inferred else None
        max_bytes = self._budget if self.single else None
        if cfg.connect_envelope:
            return EnvelopeBuffer(schema, metadata_columns=cfg.metadata_columns, max_bytes=max_bytes,
                                  strict_fields=strict, unknown_fields=cfg.unknown_fields,
                                  case_insensitive=cfg.case_insensitive, header_columns=header_columns,
                                  headers_column=cfg.headers_column, key_columns=key_columns, keys=keys)
        return RecordBuffer(schema, metadata_columns=cfg.metadata_columns, max_bytes=max_bytes,
                            strict_fields=strict, unknown_fields=cfg.unknown_fields,
                            case_insensitive=cfg.case_insensitive, header_columns=header_columns,
                            headers_column=cfg.headers_column, key_columns=key_columns, keys=keys,
                            confluent=fmt == "json-schema-confluent",
                            protobuf=self._formats.protobuf(fmt),
                            transforms=cfg.transform_spec)

    def evolved(self, target: Target, table: Table) -> None:
        """``table`` has a newer schema than ``target``'s buffer: what it holds is carried (written
        under the newest schema, NULL in new columns), and a buffer for the new schema takes over."""
        held = target.buffer.drain()
        if held is not None:
            target.carried.append(held)
        deletes = target.buffer.drain_deletes() if isinstance(target.buffer, ChangeBuffer) else None
        if deletes is not None:
            target.carried_deletes.append(deletes)
        target.buffer = self.buffer_for(target.cfg, table, inferred=False, fmt=target.format)
        target.inferred = False
        target.table = table

    def __iter__(self) -> Iterator[Target]:
        return iter(list(self._by_name.values()))   # a copy: tables are added while worker threads read

    def __len__(self) -> int:
        return len(self._by_name)

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in list(self._by_name.values()))

    @property
    def rows(self) -> int:
        return sum(t.rows for t in list(self._by_name.values()))

    @property
    def dead_letters(self) -> int:
        return sum(len(t.dead) for t in list(self._by_name.values()))

    def clear(self) -> None:
        for target in self:
            target.clear()

    def read_positions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Blocking. Read every table's offsets and watermark; set each table's floors; return
        where each of ``tps`` is read from (rule 2, ``positions.resume_at``; partitions nothing
        knows are left out)."""
        tps = set(tps)
        stored: dict[str, dict[TopicPartition, int]] = {}
        marks = []
        for target in self:
            held = target.committer.stored()
            stored[target.name] = held.offsets
            marks.append(held.progress)
            target.floors = {tp: o for tp, o in held.offsets.items() if tp in tps}
            target.topic_ids = held.topic_ids
        return resume_at(tps, stored, merge_progress(*marks), self._takers)


def _strict(table: str) -> str:
    return (f"{table} has no such column: its columns are not declared (its schema was inferred from its first "
            "records, or is the table's own); declare its columns to take more fields")


def value_options(cfg: TableConfig, properties: Mapping[str, str] | None = None) -> dict[str, dict[bytes, bytes]]:
    """Per column, how the native decoder takes its values: the unit of numbers for a timestamp,
    time or date (it refuses numbers without one: never a guess), declared or kept with a table
    made from a source's schema (the table's ``properties``), and rounding where allowed."""
    out: dict[str, dict[bytes, bytes]] = {}
    kept = (properties or {}).get(iceberg_catalog.UNITS_PROPERTY)
    for name, unit in (json.loads(kept) if kept else {}).items():
        out.setdefault(name, {})[iceberg_catalog.UNIT_KEY] = str(unit).encode()
    for c in cfg.columns:
        if c.unit is not None:
            out.setdefault(c.name, {})[iceberg_catalog.UNIT_KEY] = c.unit.encode()
        if c.rounding is not None:
            out.setdefault(c.name, {})[iceberg_catalog.ROUNDING_KEY] = c.rounding.encode()
    return out
