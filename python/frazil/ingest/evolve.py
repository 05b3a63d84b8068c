"""Schema changes asked by the records (``unknown_fields = "evolve"``), one path for JSON and Avro.

JSON: the records that did not fit a table show what they need (a new field, a number an ``int``
cannot hold); :class:`Evolver` makes that change once across every process (a change another
process made first is taken, not made again) and appends them again, up to ``EVOLVE_ROUNDS`` times
(a record shows one problem at a time). Avro: each writer schema is decided before its records go
in (``ingest/avro.py``): registered, refused (its records are bad records) or, with ``evolve``,
the table changed first. Either way a change swaps the table's buffer for one of the new schema;
the rows buffered so far are carried and written under the new schema (``buffers/targets.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from frazil.buffers.avro_changes import AvroChangeBuffer, envelope_paths, envelope_schema
from frazil.buffers.changes import ChangeBuffer
from frazil.buffers.envelope import EnvelopeBuffer
from frazil.buffers.record_buffer import AvroRecordBuffer, RecordBuffer, RecordProblem, transformed
from frazil.buffers.state import Buffers
from frazil.buffers.targets import Target, value_options
from frazil.config import ChangesConfig, Config
from frazil.errors import EvolutionError, FrazilError, UnknownWriterSchemas
from frazil.flow import retry
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import catalog_errors, evolution, inference
from frazil.iceberg.offsets import TopicPartition
from frazil.ingest import avro, connect_schema
from frazil.ingest.formats import ValueFormats
from frazil.ingest.registry import RowSchemas, Unusable
from frazil.kafka.fetch import Record
from frazil.metrics import Metrics

log = logging.getLogger(__name__)

EVOLVE_ROUNDS = 8   # schema changes one batch may make, one problem per record at a time
MAX_SCHEMA_CHANGES = 100   # Avro: schema changes one batch may make (each writer schema id may ask for one)


class Evolver:
    def __init__(self, cfg: Config, buffers: Buffers, metrics: Metrics, formats: ValueFormats) -> None:
        """``formats``: by a table's format, Avro values' writer schemas, or the registry's schemas
        of JSON Schema or Protobuf values, which say what a schema change is."""
        self._cfg, self._targets, self._metrics = cfg, buffers.targets, metrics
        self._formats = formats

    async def rescue(self, name: str, tp: TopicPartition, records: Sequence[Record], errors: list[RecordProblem],
                     decoded_by: RecordBuffer) -> list[RecordProblem]:
        """JSON, ``unknown_fields = "evolve"``: the ``records`` of ``tp`` that did not fit table
        ``name`` (``errors``, from buffer ``decoded_by``) change its schema where the evolution
        rules allow, and are appended again. Returns the ones that still do not fit: bad records."""
        target = self._targets[name]
        if target.buffer is not decoded_by:
            # A poll's fetches are decoded at once: another partition's records changed the schema
            # after these were decoded under the old one. Tried again under the new one first; only
            # what still does not fit asks for a change of its own.
            failed = {e.offset for e in errors}
            errors = target.buffer.append(tp[0], tp[1], [r for r in records if r.offset in failed])
        for _ in range(EVOLVE_ROUNDS):
            if not errors:
                return errors
            failed = {e.offset for e in errors}
            still = await self._evolve_once(target, tp, [r for r in records if r.offset in failed], errors)
            if still is None:   # the schema did not change: they are bad records
                return errors
            errors = still
        return errors

    async def _evolve_once(self, target: Target, tp: TopicPartition, failed: list[Record],
                           errors: list[RecordProblem]) -> list[RecordProblem] | None:
        """One round (``iceberg/evolution.py``): the change ``failed`` ask for, then ``failed``
        appended again; what still does not fit, or None when the schema did not change."""
        # records with a field the table lacks first: their shape is what the change is made of; a
        # record that disagrees with them (bad for its own reason) is left out of the shape
        columns = {f.name for f in target.table.schema().fields}
        unknown = {e.offset for e in errors if e.field.split(".", 1)[0] not in columns}
        ordered = sorted(failed, key=lambda r: r.offset not in unknown)
        schemas = self._formats.rows(target.format)
        if schemas is not None:
            return await self._evolve_from_schema(target, tp, failed, errors, schemas)
        carried = isinstance(target.buffer, (ChangeBuffer, EnvelopeBuffer))
        if carried and (envelope := _first_envelope(ordered)) is not None:
            return await self._evolve_from_envelope(target, tp, failed, errors, envelope)
        # a keyed table's records are changes, an envelope carries its row: the shape is of the rows
        values = (target.buffer.rows_of(ordered) if isinstance(target.buffer, (ChangeBuffer, EnvelopeBuffer))
                  else transformed(target.cfg.transform_spec, [r.value for r in ordered if r.value is not None]))
        shape = inference.infer_lenient([v for v in values if v is not None], maps=target.cfg.maps)
        problems = [(e.field, e.reason) for e in errors]
        if not evolution.plan(target.table.schema(), shape, problems):
            # nothing the table as last loaded lacks; but the worker loads the table for every
            # write, so it may hold a change another process made that this buffer predates
            return self._caught_up(target, tp, failed)
        before = target.buffer.schema
        where = f"{tp[0]}[{tp[1]}]@{errors[0].offset}"
        changed = await self._change(target, lambda schema: evolution.plan(schema, shape, problems), where)
        return self._again(target, tp, failed, before, changed)

    def _caught_up(self, target: Target, tp: TopicPartition, failed: list[Record]) -> list[RecordProblem] | None:
        """``failed`` appended again under a buffer made for the table as last loaded, when the
        buffer is older than that table (another process changed it, and a write loaded it since);
        None when the buffer already has its schema (they are bad records)."""
        if _buffer_schema(target, target.table) == target.buffer.schema:
            return None
        log.info("table %s: schema id %d, changed by another writer, taken for %s[%d]@%d", target.name,
                 target.table.schema().schema_id, tp[0], tp[1], failed[0].offset)
        self._targets.evolved(target, target.table)
        return target.buffer.append(tp[0], tp[1], failed)

    @staticmethod
    def _again(target: Target, tp: TopicPartition, failed: list[Record], before: pa.Schema,
               changed: Table | None) -> list[RecordProblem] | None:
        """``failed`` appended again to ``target`` once its table ``changed`` (its buffer's schema
        was ``before``); None when nothing changed that they could use (they are bad records)."""
        if changed is None or _buffer_schema(target, changed) == before:
            return None
        return target.buffer.append(tp[0], tp[1], failed)

    async def _evolve_from_envelope(self, target: Target, tp: TopicPartition, failed: list[Record],
                                    errors: list[RecordProblem],
                                    envelope: dict[str, Any]) -> list[RecordProblem] | None:
        """:meth:`_evolve_once` for changes in Kafka Connect's JSON envelope: the schema the first
        of them carries says what its row's new fields are (a decimal, a date sent as days), not
        their values (a decimal's digits would look like a double's); the units of the new
        columns' numbers are kept with the table in the same commit."""
        spec = target.cfg.changes   # None: an append table's envelope, whose payload is the row
        row = spec.after[0] if spec is not None and spec.op and spec.after else ""
        try:
            planned, units = connect_schema.evolution_of(target.table.schema(), envelope, row=row)
        except ValueError as exc:
            log.warning("table %s: the schema of %s[%d]@%d cannot become columns: %s", target.name, tp[0], tp[1],
                        errors[0].offset, exc)
            return None
        if not planned:
            return None

        def changes_for(schema: Schema) -> list[evolution.Change]:
            return connect_schema.evolution_of(schema, envelope, row=row)[0]

        def properties_for(table: Table, changes: list[evolution.Change]) -> dict[str, str]:
            kept = json.loads(table.properties.get(iceberg_catalog.UNITS_PROPERTY, "{}"))
            added = {c.path[0] for c in changes if c.kind == "add"}
            wanted = {**kept, **{name: unit for name, unit in units.items() if name in added}}
            return {iceberg_catalog.UNITS_PROPERTY: json.dumps(wanted, sort_keys=True)} if wanted != kept else {}

        before = target.buffer.schema
        changed = await self._change(target, changes_for, f"{tp[0]}[{tp[1]}]@{errors[0].offset}", properties_for)
        return self._again(target, tp, failed, before, changed)

    async def _evolve_from_schema(self, target: Target, tp: TopicPartition, failed: list[Record],
                                  errors: list[RecordProblem], schemas: RowSchemas) -> list[RecordProblem] | None:
        """:meth:`_evolve_once` for values whose rows a registry's schema describes (JSON Schema,
        Protobuf): the schema the first of them names says what its new fields are (an integer
        stays a ``long`` however small the values seen). A field its schema does not have is no
        change: its record stays a bad record."""
        first = _first_field_problem(failed, errors)
        if first is None:
            return None
        value = first.value or b""
        where = f"{tp[0]}[{tp[1]}]@{first.offset}"
        try:
            planned = await asyncio.to_thread(schemas.evolution_of, target.table.schema(), value)
        except ValueError as exc:
            log.warning("table %s: the %s of %s cannot become columns: %s", target.name, schemas.kind, where, exc)
            return None
        if not planned:
            return None
        before = target.buffer.schema
        changed = await self._change(target, lambda schema: schemas.evolution_of(schema, value),
                                     f"{where} ({schemas.kind} {int.from_bytes(value[1:5], 'big')})")
        return self._again(target, tp, failed, before, changed)

    async def append_avro(self, name: str, tp: TopicPartition, records: list[Record]) -> list[RecordProblem]:
        """Avro ``records`` of ``tp`` into table ``name``'s buffer, as :meth:`learning`."""
        return await self.learning(name, tp, records[0].offset, lambda buffer: buffer.append(tp[0], tp[1], records))

    async def learning(self, name: str, tp: TopicPartition, offset: int,
                       append: Callable[[RecordBuffer], list[RecordProblem]],
                       unknown: list[int] | None = None) -> list[RecordProblem]:
        """``append`` (Avro records of ``tp`` from ``offset`` on) into table ``name``'s buffer;
        writer schemas it has not seen (``unknown``, when an append to the table's current buffer
        already said which) are fetched and decided first (:meth:`_learn`), and the append is made
        again, until it names none. Each schema change is progress (a batch may hold many writer
        schemas), bounded by ``MAX_SCHEMA_CHANGES``."""
        changes = 0
        decided: set[int] = set()   # ids decided for the table's current buffer
        while True:
            if unknown is None:
                buffer = self._targets[name].buffer
                try:   # a buffer that may fetch its keys' schemas from the registry does so off the loop
                    return (await asyncio.to_thread(append, buffer)) if buffer.learns_schemas else append(buffer)
                except UnknownWriterSchemas as exc:
                    unknown = exc.ids
            if decided.intersection(unknown):
                raise FrazilError(f"table {name}: writer schema(s) {sorted(decided.intersection(unknown))} were "
                                  "decided for its buffer, which still does not know them; stopping")
            # each round decides the ids named, or changes the table (a new buffer: bounded below)
            changed = await self._learn(name, tp, offset, unknown)
            decided = set() if changed else decided.union(unknown)
            unknown = None
            if not changed:
                continue
            changes += 1
            if changes >= MAX_SCHEMA_CHANGES:
                raise FrazilError(f"table {name}: the writer schemas of {tp[0]}[{tp[1]}] from offset "
                                  f"{offset} changed the table's schema {changes} times in one batch; "
                                  "stopping rather than going on changing it (see the log for the changes)")

    async def _learn(self, name: str, tp: TopicPartition, offset: int, ids: list[int]) -> bool:
        """Decide each writer schema in ``ids`` for table ``name``: register it, refuse it (its
        records are bad records), or, with ``unknown_fields = "evolve"``, change the table first
        (then the buffer is new, and every id is decided again on the next append: returns True)."""
        target = self._targets[name]
        writers = self._formats.writers(target.format)
        buffer = target.buffer
        assert writers is not None and isinstance(buffer, (AvroRecordBuffer, AvroChangeBuffer))
        named = target.format == "avro-confluent"
        for schema_id in ids:
            where = f"writer schema {schema_id}" if named else "the writer schema"
            writer = await asyncio.to_thread(writers.get, schema_id)   # SchemaRegistryError: stop, loudly
            if isinstance(writer, Unusable):
                buffer.refuse(schema_id, "", writer.reason)
                continue
            try:
                parsed = avro.parse(writer)
            except ValueError as exc:
                buffer.refuse(schema_id, "", f"writer schema {schema_id}: {exc}")
                continue
            decision = self._decide(target, parsed)
            if isinstance(decision, avro.Evolve):
                # the table changes only for a writer schema it can then read: one refused after the
                # change (its records bad records) would leave columns no row ever fills
                decision = self._once_changed(target, parsed, decision)
            if isinstance(decision, avro.Evolve):
                def changes_for(schema: Schema, parsed: object = parsed) -> list[evolution.Change]:
                    again = self._decide(target, parsed, schema)
                    return list(again.changes) if isinstance(again, avro.Evolve) else []

                before = target.table.schema().schema_id
                changed = await self._change(target, changes_for,
                                             f"{where} ({tp[0]}[{tp[1]}]@{offset})")
                if changed is not None and changed.schema().schema_id != before:
                    return True
                decision = self._decide(target, parsed)
                if isinstance(decision, avro.Evolve):
                    change = decision.changes[0]
                    decision = avro.Refused(".".join(change.path), f"{where} needs a schema change that cannot be "
                                                                   f"made ({change}); see the log")
            if isinstance(decision, avro.Refused):
                log.warning("table %s: %s (first at %s[%d]@%d) is refused, its records are bad records: field %r: %s",
                            name, where, tp[0], tp[1], offset, decision.field, decision.reason)
                buffer.refuse(schema_id, decision.field, f"{decision.reason} ({where})")
                continue
            try:
                buffer.register(schema_id, decision.writer, decision.reader, len(decision.ignored))
            except FrazilError as exc:
                buffer.refuse(schema_id, "", str(exc))
                continue
            log.info("table %s: reading %s from %s[%d]@%d%s", name, where, tp[0], tp[1], offset,
                     f" (ignoring its field(s) {', '.join(decision.ignored)})" if decision.ignored else "")
        return False

    def _once_changed(self, target: Target, writer: object, decision: avro.Evolve
                      ) -> avro.Readable | avro.Refused | avro.Evolve:
        """``decision`` (Evolve) if ``writer`` is readable once the table made the changes it asks
        for (worked out in memory, change after change); else the refusal it would then get."""
        schema = target.table.schema()
        then: avro.Readable | avro.Refused | avro.Evolve = decision
        for _ in range(EVOLVE_ROUNDS):
            if not isinstance(then, avro.Evolve):
                break
            try:
                schema = evolution.preview(target.table, schema, then.changes)
            except EvolutionError as exc:
                return avro.Refused(".".join(then.changes[0].path), str(exc))
            then = self._decide(target, writer, schema)
        return then if isinstance(then, avro.Refused) else decision

    def _decide(self, target: Target, writer: object, schema: Schema | None = None
                ) -> avro.Readable | avro.Refused | avro.Evolve:
        schema = target.table.schema() if schema is None else schema
        changes = target.cfg.changes
        if changes is not None:   # a keyed table: its records are changes (an envelope in cdc mode)
            schema = envelope_schema(schema, changes, target.cfg.identifier_columns)
        decision = avro.resolve(writer, schema,
                                exclude=tuple(c[0] for c in iceberg_catalog.extra_columns(target.cfg)),
                                unknown_fields=target.cfg.unknown_fields, case_insensitive=target.cfg.case_insensitive,
                                lenient=envelope_paths(changes) if changes is not None else frozenset())
        if isinstance(decision, avro.Evolve) and changes is not None and changes.op:
            return _of_row(decision, changes)
        return decision

    async def _change(self, target: Target, changes_for: Callable[[Schema], list[evolution.Change]], why: str,
                      properties_for: Callable[[Table, list[evolution.Change]], dict[str, str]] | None = None
                      ) -> Table | None:
        """Make the changes ``changes_for`` asks of ``target``'s table, once across every process
        (``why``: what asked, for the log). The table as it now is, its buffer swapped for one of
        the new schema; None when the change cannot be made (the records stay bad records)."""
        before = target.table.schema().schema_id
        try:
            table, made = await retry.catalog_wait(
                lambda: asyncio.to_thread(evolution.apply, target.committer.load, changes_for, properties_for),
                what=f"table {target.name}: cannot make the schema change {why} asks for",
                timeout_s=self._cfg.outage_timeout_s, outage=catalog_errors.outage)
        except EvolutionError as exc:
            log.warning("table %s: %s asks for a schema change that cannot be made: %s", target.name, why, exc)
            return None
        if not made and table.schema().schema_id == before:
            return table
        if made:
            self._metrics.schema_changes.inc(len(made))
            added = any(c.kind == "add" for c in made)
            log.warning("table %s: schema evolved to id %d for %s: %s; %d buffered row(s) go under it%s", target.name,
                        table.schema().schema_id, why, evolution.describe(made), target.rows,
                        " (NULL in the added columns)" if added else " (their values unchanged)")
        else:
            log.info("table %s: schema id %d, changed by another writer, taken for %s", target.name,
                     table.schema().schema_id, why)
        self._targets.evolved(target, table)
        return table


def _buffer_schema(target: Target, table: Table) -> pa.Schema:
    """The schema a JSON buffer made for ``table`` has (what ``target``'s buffer is compared with)."""
    return iceberg_catalog.arrow_schema(table, value_options(target.cfg, table.properties))


def _first_field_problem(failed: Sequence[Record], errors: Sequence[RecordProblem]) -> Record | None:
    """The first of ``failed`` whose problem is a field's (a schema change may help it), not the
    value's as a whole (not in the wire format, a message that does not decode)."""
    offset = next((e.offset for e in errors if e.field), None)
    return next((r for r in failed if r.offset == offset), None)


def _of_row(decision: avro.Evolve, changes: ChangesConfig) -> avro.Evolve | avro.Refused:
    """The changes a Debezium envelope asks of its envelope schema, as changes of the table: those
    of ``after`` (the row) for its columns; ``before`` holds the same columns' keys, so its own
    are the row's too. Any other would change what is not the table's (its operation field)."""
    after, before = changes.after[0], changes.before[0]
    out: list[evolution.Change] = []
    for change in decision.changes:
        if change.path[0] == before and len(change.path) > 1:
            continue
        if change.path[0] != after or len(change.path) < 2:
            return avro.Refused(".".join(change.path), f"the change records' {'.'.join(change.path)} does not fit "
                                                       f"(it would need: {change}); only {after} is the table's row")
        out.append(evolution.Change(change.kind, change.path[1:], change.type))
    return avro.Evolve(tuple(out))


def _first_envelope(records: Sequence[Record]) -> dict[str, Any] | None:
    """The schema of the first of ``records`` in Kafka Connect's JSON envelope; None when none is."""
    for record in records:
        if record.value is not None and (schema := connect_schema.envelope_schema(record.value)) is not None:
            return schema
    return None
