"""Tables opened while the pipeline runs: a table named by the records (``[dynamic]``), or a
configured one without declared columns that does not exist yet, is loaded or created on the
first records that go there (with the configured columns, or a schema inferred from them)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType

from frazil.buffers.record_buffer import transformed
from frazil.buffers.state import Buffers
from frazil.buffers.targets import Target
from frazil.config import Config, TableConfig
from frazil.errors import ConfigError, InferenceError, RecordDecodeError
from frazil.flow import retry
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import catalog_errors, inference
from frazil.iceberg.offsets import TopicPartition
from frazil.ingest import avro, connect_schema
from frazil.ingest.formats import ValueFormats
from frazil.ingest.registry import PLAIN_ID, RowSchemas, Unusable, WriterSchemas

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wanted:
    """A table to open for the records of ``tp`` from ``offset`` on that go there (``sample``:
    their values, asked for only when its schema is inferred from them)."""

    name: str
    tp: TopicPartition
    offset: int
    sample: Callable[[], list[bytes]]


class Opener:
    def __init__(self, cfg: Config, catalog: Catalog, buffers: Buffers, *,
                 formats: ValueFormats, on_new_table: Callable[[str], None] | None = None) -> None:
        """``on_new_table``: told each table opened (maintenance takes it on); ``formats``: by the
        format of the topic whose records name a table, Avro values' writer schemas or the
        registry's schemas of JSON Schema or Protobuf values: a new table's schema when it
        declares no columns."""
        self._cfg, self._catalog, self._targets = cfg, catalog, buffers.targets
        self._on_new_table = on_new_table
        self._formats = formats

    def _config(self, name: str) -> TableConfig:
        try:
            return self._cfg.table_named(name)   # a configured table created on its first records
        except KeyError:
            assert self._cfg.dynamic is not None
            return self._cfg.dynamic.table_config(name)

    async def open(self, name: str, tp: TopicPartition, offset: int, sample: Callable[[], list[bytes]]) -> None:
        """Open table ``name`` for the records of ``tp`` from ``offset`` on that go there
        (``sample``: their values, asked for only when the schema is inferred). When it cannot be
        had, the record at ``offset`` is a bad record (RecordDecodeError)."""
        refused = await self.open_all([Wanted(name, tp, offset, sample)])
        if refused:
            raise refused[name]

    async def open_all(self, wanted: Sequence[Wanted]) -> dict[str, RecordDecodeError]:
        """Open several tables in one go, off the loop: one catalog round after another in one
        worker thread, not a hop between the loop and a thread for each. Returns the tables that
        cannot be had, each with the error for its first record (as :meth:`open` raises it)."""
        def build_all() -> list[tuple[Wanted, Target | RecordDecodeError, str]]:
            return [self._build(w) for w in wanted]

        refused: dict[str, RecordDecodeError] = {}
        names = ", ".join(sorted({w.name for w in wanted}))
        built = await retry.catalog_wait(lambda: asyncio.to_thread(build_all), what=f"cannot open table(s) {names}",
                                         timeout_s=self._cfg.outage_timeout_s, outage=catalog_errors.outage)
        for w, target, made in built:
            if isinstance(target, RecordDecodeError):
                refused[w.name] = target
                continue
            self._targets.add_built(target)   # on the loop: worker threads iterate over copies
            log.info("table %s: taking the records that name it (%d columns%s)", w.name,
                     len(target.table.schema().fields), f", {made}" if made else "")
            if self._on_new_table is not None:
                self._on_new_table(w.name)
        return refused

    def _build(self, w: Wanted) -> tuple[Wanted, Target | RecordDecodeError, str]:
        """Blocking. Table ``w.name`` loaded or created, and its target built, with where its
        columns come from when they are not declared; or why it cannot be."""
        table_cfg = self._config(w.name)
        extra = iceberg_catalog.extra_columns(table_cfg)
        units: dict[str, str] = {}   # of the columns a source's schema says arrive as numbers
        inferred: Callable[[], Schema] | None = None
        made = ""
        fmt = self._formats.of(w.tp[0])
        writers, schemas = self._formats.writers(fmt), self._formats.rows(fmt)
        if table_cfg.columns:
            pass
        elif writers is not None:
            inferred = partial(self._from_writer, table_cfg, w, writers, fmt)
            made = "made from its first record's writer schema"
        elif schemas is not None:
            inferred, made = partial(self._from_schemas, table_cfg, w, schemas), schemas.made
        elif table_cfg.changes is not None or table_cfg.connect_envelope:
            inferred = partial(_from_envelope, table_cfg, w, units)
            made = "made from its first record's schema (Kafka Connect's JSON envelope)"
        else:
            inferred = partial(_inferred, table_cfg, w, extra)
            made = "schema inferred from the first ones: a field it does not have is a bad record"

        def units_kept() -> dict[str, str]:
            return {iceberg_catalog.UNITS_PROPERTY: json.dumps(units, sort_keys=True)} if units else {}

        try:
            table = iceberg_catalog.ensure_table(
                self._catalog, table_cfg, iceberg_catalog.maintenance_properties(self._cfg.maintenance),
                schema=inferred, created_with=units_kept)
            # a table made from a source's schema refuses nothing for being inferred: evolve takes its later versions
            guessed = inferred is not None and schemas is None
            return w, self._targets.build(table_cfg, table, inferred=guessed, topic=w.tp[0]), made
        except (ConfigError, InferenceError) as exc:
            error = RecordDecodeError(topic=w.tp[0], partition=w.tp[1], offset=w.offset, field="",
                                      reason=f"it goes to table {w.name}, which cannot be opened: {exc}")
            error.__cause__ = exc
            return w, error, ""

    @staticmethod
    def _from_schemas(cfg: TableConfig, w: Wanted, schemas: RowSchemas) -> Schema:
        """Blocking. A new table's schema from the registry's schema (JSON Schema, Protobuf) of the
        first of its first records' values whose schema can be had and become columns: its fields
        as columns. InferenceError when there is none, naming why."""
        why, tried = "", set()
        for value in w.sample():
            if value[:5] in tried:   # a schema id already found wanting
                continue
            tried.add(value[:5])
            try:
                schema_id, schema = schemas.schema(value, extra=iceberg_catalog.extra_columns(cfg))
            except ValueError as exc:
                why += f"; {exc}"
                continue
            log.info("table %s: made from %s %d", cfg.name, schemas.kind, schema_id)
            return schema
        raise InferenceError(f"no {schemas.kind} of its first records can become its columns{why[:1000]}")

    @staticmethod
    def _from_writer(cfg: TableConfig, w: Wanted, writers: WriterSchemas, fmt: str) -> Schema:
        """Blocking. A new table's schema from the writer schema of the first of its first
        records' values (Avro) whose schema can be had: its record's fields (Debezium's ``after``
        in cdc mode) as columns. InferenceError when there is none, naming why."""
        if fmt == "avro":
            schema_id, writer = PLAIN_ID, writers.get(PLAIN_ID)
            assert not isinstance(writer, Unusable)   # the schema file's, read at start
        else:
            schema_id, writer = _first_schema(writers, w.sample())
        row = cfg.changes.after[0] if cfg.changes is not None and cfg.changes.op else ""
        try:
            return avro.table_schema(avro.parse(writer), row=row, identifiers=cfg.identifier_columns,
                                     extra=iceberg_catalog.extra_columns(cfg))
        except ValueError as exc:
            raise InferenceError(f"writer schema {schema_id} of its first record cannot become its columns: "
                                 f"{exc}") from None


def _first_schema(schemas: WriterSchemas, values: Sequence[bytes]) -> tuple[int, str]:
    """Blocking. The id and text of the first schema the registry has among ``values``' (each in
    the Confluent wire format); InferenceError naming why there is none. Raises
    SchemaRegistryError when the registry cannot be asked (stop, loudly)."""
    ids = list(dict.fromkeys(int.from_bytes(v[1:5], "big") for v in values if len(v) >= 5 and v[0] == 0))
    if not ids:
        raise InferenceError("none of its first records' values is in the Confluent wire format (magic byte 0, "
                             "then a 4-byte schema id): there is no writer schema to create it from")
    why = ""
    for schema_id in ids:   # the first one the registry has (a record of an unknown id is a bad record)
        found = schemas.get(schema_id)
        if not isinstance(found, Unusable):
            return schema_id, found
        why += f"; writer schema {schema_id}: {found.reason}"
    raise InferenceError(f"no writer schema of its first records can be had{why}")


def _inferred(cfg: TableConfig, w: Wanted, extra: Sequence[tuple[str, IcebergType, bool]]) -> Schema:
    """Blocking. A new table's schema inferred from its first records' JSON values."""
    return inference.schema(inference.infer(transformed(cfg.transform_spec, w.sample()), maps=cfg.maps), extra)


def _from_envelope(cfg: TableConfig, w: Wanted, units: dict[str, str]) -> Schema:
    """Blocking. A new keyed table's (or ``connect_envelope`` append table's) schema from Kafka
    Connect's JSON schema envelope of the first of its first records' values that has one: its
    row's fields (Debezium's ``after`` in cdc mode; the payload in append mode) as columns; the
    units of those sent as numbers go into ``units``. InferenceError when none has one (a keyed
    table's identifier columns must be required, which inferred columns never are)."""
    schema = next((s for s in map(connect_schema.envelope_schema, w.sample()) if s is not None), None)
    if schema is None and cfg.connect_envelope:
        raise InferenceError("with connect_envelope = true a table without declared columns is made from the schema "
                             "its records carry in Kafka Connect's JSON envelope, and its first records carry none "
                             "(is the connector's schemas.enable=true?): declare its columns")
    if schema is None:
        raise InferenceError("a keyed table without declared columns is made from the schema its records carry "
                             "(Avro through a schema registry, or Kafka Connect's JSON envelope: the JSON converter "
                             "with schemas.enable=true), and its first records carry none: declare its columns")
    row = cfg.changes.after[0] if cfg.changes is not None and cfg.changes.op and cfg.changes.after else ""
    try:
        made, found = connect_schema.table_schema(schema, row=row, identifiers=cfg.identifier_columns,
                                                  extra=iceberg_catalog.extra_columns(cfg))
    except ValueError as exc:
        raise InferenceError(f"the schema of its first record cannot become its columns: {exc}") from None
    units.update(found)
    return made
