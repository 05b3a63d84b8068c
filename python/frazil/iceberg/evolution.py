"""Schema evolution from the records (``unknown_fields = "evolve"``): which changes the records
that did not fit a table ask of it (pure), and making them through Iceberg's schema update, which
keeps every field id (blocking).

What records can change (docs/configuration.md, "Schema evolution"):
- a field the table has no column for becomes an optional column, of the type the records show
  (the inference rules: long, double, string, boolean, struct, list); nested fields of a struct,
  or of the structs in a list, become nested columns. A field that differs from a column only in
  case never does: it stays a bad record, naming both spellings;
- an integer too large for an ``int`` column widens it to ``long``, a number beyond a ``float``'s
  range widens it to ``double``;
- a decimal with more digits before the point than a ``decimal(p, s)`` column takes widens it to
  the precision it needs (at most 38; the scale never changes);
- a required field missing (or null) makes the column optional, unless it is one of the table's
  identifier fields (row identity must stay required: such a record stays a bad record).
Nothing else: a value of another kind (text for a number) is a bad record, never a rewrite.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException, ResolveError, ValidationError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.update.schema import UpdateSchema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StructType,
)

from frazil.errors import EvolutionError
from frazil.iceberg import inference
from frazil.iceberg.commits import no_inner_retry

log = logging.getLogger(__name__)

MAX_DECIMAL_PRECISION = 38
ATTEMPTS = 5

_TOO_LARGE_INT = re.compile(r"^-?\d+ does not fit an int \(32-bit\)")
_TOO_LARGE_FLOAT = re.compile(r"^\S+ is out of range for a float \(32-bit\)")
MISSING_REQUIRED = "is required, and the record has no value for it"   # the native decoder's reason
_DECIMAL_DIGITS = re.compile(r"^(-?\d+)(?:\.\d*)?(?:[eE][-+]?\d+)? has more than \d+ digit\(s\) "
                             r"before the decimal point")


@dataclass(frozen=True)
class Change:
    """One schema change: ``add`` an optional column, ``widen`` a column's type, or make a required
    column ``optional`` (Avro writer schemas that leave it out or let it be null). ``path`` names
    nested columns by their parents; the element of a list is ``element``."""

    kind: str
    path: tuple[str, ...]
    type: IcebergType

    def __str__(self) -> str:
        done = {"add": "added", "widen": "widened", "optional": "made optional"}[self.kind]
        return f"{done} {'.'.join(self.path)} {self.type}"


def plan(schema: Schema, shape: inference.Shape, problems: Iterable[tuple[str, str]] = ()) -> list[Change]:
    """The changes that would let records of ``shape`` (and their ``problems``: (field path,
    reason) as the decoder gave them) fit ``schema``."""
    changes = _struct(schema.as_struct(), shape, ())
    seen = {c.path for c in changes}
    for field, reason in problems:
        change = _widening(schema, field, reason)
        if change is not None and change.path not in seen:
            changes.append(change)
            seen.add(change.path)
    return changes


def _struct(struct: StructType, shape: inference.Shape, path: tuple[str, ...]) -> list[Change]:
    out: list[Change] = []
    for name, child in shape.fields.items():
        existing = next((f for f in struct.fields if f.name == name), None)
        if existing is None:
            if not any(f.name.lower() == name.lower() for f in struct.fields):   # a near miss stays bad
                out.append(Change("add", (*path, name), inference.iceberg_type(child)))
            continue
        kind = existing.field_type
        if isinstance(kind, StructType) and child.kind == "struct":
            out += _struct(kind, child, (*path, name))
        elif isinstance(kind, ListType) and child.kind == "list" and child.element is not None:
            if isinstance(kind.element_type, StructType) and child.element.kind == "struct":
                out += _struct(kind.element_type, child.element, (*path, name, "element"))
    return out


def between(have: StructType, sent: StructType) -> list[Change]:
    """The changes a source's own schema (``sent``, as a table's struct) asks of a table made from
    an earlier one (``have``): a field it lacks becomes an optional column (nested ones too), an
    ``int`` a ``long``, a ``float`` a ``double``, a decimal a wider one of the same scale. Anything
    else (another kind of value) is no change: its records stay bad records."""
    out: list[Change] = []
    _between(have, sent, (), out)
    return out


def _between(have: StructType, sent: StructType, path: tuple[str, ...], out: list[Change]) -> None:
    columns = {f.name: f for f in have.fields}
    for f in sent.fields:
        column = columns.get(f.name)
        where = (*path, f.name)
        if column is None:
            out.append(Change("add", where, f.field_type))
        elif isinstance(column.field_type, StructType) and isinstance(f.field_type, StructType):
            _between(column.field_type, f.field_type, where, out)
        elif column.field_type != f.field_type and _widens(column.field_type, f.field_type):
            out.append(Change("widen", where, f.field_type))


def _widens(have: IcebergType, sent: IcebergType) -> bool:
    if isinstance(have, DecimalType) and isinstance(sent, DecimalType):
        return have.scale == sent.scale and sent.precision > have.precision
    return (isinstance(have, IntegerType) and isinstance(sent, LongType)
            or isinstance(have, FloatType) and isinstance(sent, DoubleType))


def _widening(schema: Schema, field: str, reason: str) -> Change | None:
    """A widening the decoder's reason for ``field`` asks for, if any."""
    path = tuple(part.split("[")[0] for part in field.split("."))
    column = _find(schema, path)
    if column is None:
        return None
    names = _iceberg_path(schema, path)
    if isinstance(column.field_type, IntegerType) and _TOO_LARGE_INT.match(reason):
        return Change("widen", names, LongType())
    if isinstance(column.field_type, FloatType) and _TOO_LARGE_FLOAT.match(reason):
        return Change("widen", names, DoubleType())
    if reason.startswith(MISSING_REQUIRED) and column.required and column.field_id not in schema.identifier_field_ids:
        return Change("optional", names, column.field_type)
    digits = _DECIMAL_DIGITS.match(reason)
    if isinstance(column.field_type, DecimalType) and digits:
        scale = column.field_type.scale
        needed = len(digits.group(1).lstrip("-").lstrip("0") or "0") + scale
        if column.field_type.precision < needed <= MAX_DECIMAL_PRECISION:
            return Change("widen", names, DecimalType(needed, scale))
    return None


def _find(schema: Schema, path: tuple[str, ...]) -> NestedField | None:
    fields = schema.as_struct().fields
    found: NestedField | None = None
    for name in path:
        found = next((f for f in fields if f.name == name), None)
        if found is None:
            return None
        kind = found.field_type
        while isinstance(kind, ListType):
            kind = kind.element_type
        fields = kind.fields if isinstance(kind, StructType) else ()
    return found


def _iceberg_path(schema: Schema, path: tuple[str, ...]) -> tuple[str, ...]:
    """``path`` with ``element`` after each list it goes through (how Iceberg names nested columns)."""
    out: list[str] = []
    fields = schema.as_struct().fields
    for i, name in enumerate(path):
        out.append(name)
        kind = next(f for f in fields if f.name == name).field_type
        while isinstance(kind, ListType) and i < len(path) - 1:
            out.append("element")
            kind = kind.element_type
        fields = kind.fields if isinstance(kind, StructType) else ()
    return tuple(out)


def apply(load: Callable[[], Table], changes_for: Callable[[Schema], list[Change]],
          properties_for: Callable[[Table, list[Change]], dict[str, str]] | None = None) -> tuple[Table, list[Change]]:
    """Blocking. Load the table, plan against its schema, make the changes; on a conflict (another
    process changed the table meanwhile) load and plan again: what it already made is not made
    twice. ``properties_for``: table properties to set in the same commit as the changes (what
    the new columns need said). Returns the table as it is now and the changes this call made
    (none: someone else did)."""
    last: Exception | None = None
    for attempt in range(1, ATTEMPTS + 1):
        table = load()
        changes = changes_for(table.schema())
        if not changes:
            return table, []
        try:
            with no_inner_retry(table).transaction() as tx:   # a conflict is planned again here
                with tx.update_schema() as update:
                    _stage(update, changes)
                wanted = properties_for(table, changes) if properties_for is not None else {}
                if wanted:
                    tx.set_properties(wanted)
        except CommitFailedException as exc:
            last = exc
            log.info("the schema of %s changed meanwhile (attempt %d/%d); planning again", ".".join(table.name()),
                     attempt, ATTEMPTS)
            continue
        except (ValueError, ValidationError, ResolveError) as exc:   # not a change Iceberg allows
            raise EvolutionError(f"cannot change the schema of {'.'.join(table.name())} ({describe(changes)}): "
                                 f"{exc}") from exc
        return load(), changes
    raise EvolutionError(f"the schema change kept conflicting with other writers ({last}); retried {ATTEMPTS} times")



def preview(table: Table, schema: Schema, changes: Sequence[Change]) -> Schema:
    """Pure (nothing is committed): the schema ``changes`` would make of ``schema``, one of
    ``table``'s, as :func:`apply` would make it; EvolutionError when Iceberg would refuse them."""
    update = UpdateSchema(table.transaction(), schema=schema)
    try:
        _stage(update, changes)
        return update._apply()
    except (ValueError, ValidationError, ResolveError) as exc:
        raise EvolutionError(f"cannot change the schema of {'.'.join(table.name())} ({describe(changes)}): "
                             f"{exc}") from exc


def _stage(update: UpdateSchema, changes: Sequence[Change]) -> None:
    for change in changes:
        if change.kind == "add":
            update.add_column(change.path, change.type, required=False)
        elif change.kind == "optional":
            update.make_column_optional(change.path)
        else:
            update.update_column(change.path, field_type=change.type)


def describe(changes: Sequence[Change]) -> str:
    return ", ".join(str(c) for c in changes)
