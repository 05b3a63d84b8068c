"""Avro writer schemas against a table (pure): can records of this writer schema become rows, and
how. Decided once per schema id; the native buffer then decodes every record of it.

The answer is one of:
- :class:`Readable`: the *reader schema* the native decoder reads the records with: the writer's
  record names, the table's value columns in order, each with the writer's type (the native
  side casts it exactly to the column's type: int to long, float to double, millisecond to
  microsecond timestamps, a narrower decimal, enum to string), columns the writer lacks as
  null-defaulted unions (they land as NULL);
- :class:`Refused`: every record of it is a bad record, for this field and reason;
- :class:`Evolve`: the table must change first (``unknown_fields = "evolve"``): new optional
  columns for writer fields it lacks, int to long, float to double, decimal precision widening,
  required to optional for a field the writer may leave out or null. After the change the schema
  is decided again.

A value is never bent: an Avro ``long`` without a timestamp logical type is not a timestamp (its
unit would be a guess), nanosecond timestamps do not go into microsecond columns, a type of
another kind (string for a number) is refused, and so are unions of several non-null types.
docs/configuration.md, "Avro values", has the full table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from pyiceberg.exceptions import ValidationError
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from frazil.iceberg.evolution import MAX_DECIMAL_PRECISION, Change
from frazil.ingest.avro_names import PRIMITIVES, expanded, spellings, without_aliases

NO_SUCH_COLUMN = "the table has no such column"


@dataclass(frozen=True)
class Readable:
    reader: str                      # the reader schema, as JSON
    writer: str                      # the writer schema to decode with, as JSON: its field aliases left out
    ignored: tuple[str, ...] = ()    # writer fields the table has no column for (unknown_fields = "ignore")


@dataclass(frozen=True)
class Refused:
    field: str
    reason: str


@dataclass(frozen=True)
class Evolve:
    changes: tuple[Change, ...]


class _Problem(Exception):
    def __init__(self, path: str, reason: str, change: Change | None = None) -> None:
        super().__init__(reason)
        self.path, self.reason, self.change = path, reason, change


@dataclass
class _Walk:
    """One resolution, and what it found."""

    unknown_fields: str
    case_insensitive: bool
    lenient: frozenset[str] = frozenset()   # record paths ("", "before.") whose unknown fields are read past uncounted
    # by full name: each named type's name and namespace attributes as the writer spells them
    # (arrow-avro matches reader names to writer names as written, without namespace inheritance)
    spelled: dict[str, dict[str, str]] = field(default_factory=dict)
    identifiers: frozenset[int] = frozenset()   # field ids of the table's identifier fields: they stay required
    problems: list[_Problem] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    emitted: set[str] = field(default_factory=set)   # named types already defined in the reader
    ids: Iterator[int] = field(default_factory=lambda: count(1))


def parse(text: str) -> Any:
    """A writer schema's JSON; a ValueError naming what is wrong otherwise."""
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the Avro schema is not JSON: {exc}") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the Avro schema of a record value must be a record "
                         f"(got {json.dumps(schema)[:100]})")
    return schema


def resolve(writer: Any, table: Schema, *, exclude: tuple[str, ...] = (), unknown_fields: str = "fail",
            case_insensitive: bool = False, lenient: frozenset[str] = frozenset()) -> Readable | Refused | Evolve:
    """How records of ``writer`` (a parsed record schema) become rows of ``table``, whose columns
    in ``exclude`` (the Kafka metadata columns) are not read from the value. In the records at
    ``lenient`` paths (``""`` the value itself, ``"before."`` a field's record) fields without a
    column are read past, not counted: a change envelope's parts that are not the row.

    The writer is read in fastavro's expanded form (every named type inline, named by its full
    name), so names resolve as the Avro spec says; the reader schema names every type by its full
    name. The records are decoded with the writer schema ``unshared`` (a named type used
    twice, as Debezium's ``before`` and ``after``, defined once per use) and without field aliases:
    the decoder would match a reader field by a writer field's alias, which this module does not.

    Kafka Connect's semantic temporal types are read as their logical types (``annotated``); a
    table whose column holds such a field's plain integer (made before frazil read those names,
    or declared so) keeps reading it as that integer."""
    def resolved(annotate: bool) -> Readable | Refused | Evolve:
        return _resolved(writer, table, annotate=annotate, exclude=exclude, unknown_fields=unknown_fields,
                         case_insensitive=case_insensitive, lenient=lenient)

    got = resolved(True)
    if isinstance(got, Refused):
        plain = resolved(False)
        if not isinstance(plain, Refused):
            return plain
    return got


def _resolved(writer: Any, table: Schema, *, annotate: bool, exclude: tuple[str, ...], unknown_fields: str,
              case_insensitive: bool, lenient: frozenset[str]) -> Readable | Refused | Evolve:
    try:
        writer, walked = expanded(writer, annotate=annotate)
    except ValueError as exc:
        return Refused("", str(exc))
    walk = _Walk(unknown_fields, case_insensitive, lenient, spellings(writer), frozenset(table.identifier_field_ids))
    columns = [f for f in table.as_struct().fields if f.name not in exclude]
    try:
        reader = _record(walk, walked, columns, "")
    except _Problem as problem:
        return Refused(problem.path, problem.reason)
    except (KeyError, TypeError, ValueError, ValidationError) as exc:   # a shape this module did not expect
        return Refused("", f"the writer schema cannot be read into the table ({type(exc).__name__}: {exc})")
    fatal = next((p for p in walk.problems if p.change is None), None)
    if fatal is not None:
        return Refused(fatal.path, fatal.reason)
    changes = [p.change for p in walk.problems if p.change is not None]
    if changes:
        if unknown_fields == "evolve":
            return Evolve(tuple(changes))
        first = walk.problems[0]
        return Refused(first.path, first.reason)
    return Readable(json.dumps(reader), json.dumps(without_aliases(writer)), tuple(walk.ignored))


def table_schema(writer: Any, *, row: str = "", identifiers: Sequence[str] = (),
                 extra: Sequence[tuple[str, IcebergType, bool]] = ()) -> Schema:
    """A new table's schema from a writer schema (parsed): a column per field of the record (of
    field ``row`` of it, Debezium's ``after``, when given), each of the field's type as the
    "Avro values" table maps it, optional but for ``identifiers`` (required, the table's row
    identity); then ``extra`` (the Kafka metadata columns). Field ids are placeholders (the
    catalog numbers a new table afresh). ValueError naming the field when one cannot be a column."""
    record: Any = expanded(writer)[1]
    walk = _Walk("evolve", False)
    try:
        if row:
            found = next((f for f in record.get("fields", ()) if f.get("name") == row), None)
            if found is None:
                raise _Problem(row, f"the writer schema has no field {row!r} (the change's row)")
            record, _ = _nullable(walk, found["type"], row)
            if _kind(walk, record)[0] not in ("record", "error"):
                raise _Problem(row, f"the writer schema's {row} is {_describe(walk, record)}, not a record of columns")
            record = _deref(walk, record)
        taken = {name for name, _, _ in extra}
        fields = []
        for f in record.get("fields", ()):
            name = str(f["name"])
            if name in taken:
                raise _Problem(name, f"the writer schema's field {name} has the name of a Kafka metadata column")
            fields.append(NestedField(next(walk.ids), name, _iceberg_of(walk, f["type"], name),
                                      required=name in identifiers))
    except _Problem as problem:
        raise ValueError(f"field {problem.path!r}: {problem.reason}") from None
    floating = [f.name for f in fields if f.name in identifiers and isinstance(f.field_type, (FloatType, DoubleType))
                or f.name in identifiers and not f.field_type.is_primitive]
    if floating:
        raise ValueError(f"identifier column(s) {', '.join(floating)} must be of a primitive type, not float or "
                         "double (Iceberg's rule for identifier fields)")
    nullable = [str(f["name"]) for f in record.get("fields", ())
                if f["name"] in identifiers and _nullable(walk, f["type"], str(f["name"]))[1]]
    if nullable:
        raise ValueError(f"the writer schema lets identifier column(s) {', '.join(nullable)} be null; a row's "
                         "identity must always be there (make the field non-null, or pick other identifier_columns)")
    missing = sorted(set(identifiers) - {f.name for f in fields})
    if missing:
        raise ValueError(f"the writer schema has no field {', '.join(missing)} for the identifier column(s) "
                         f"{', '.join(identifiers)}")
    fields += [NestedField(next(walk.ids), name, t, required=required) for name, t, required in extra]
    return Schema(*fields, identifier_field_ids=[f.field_id for f in fields if f.name in identifiers])


def _deref(walk: _Walk, t: Any) -> Any:
    if isinstance(t, str) and t not in PRIMITIVES:   # expanded: a name here is one fastavro left (a recursive type)
        raise _Problem("", f"the writer schema refers to type {t!r} inside itself (a recursive type), which cannot "
                           "become columns")
    if isinstance(t, dict) and isinstance(t.get("type"), (dict, list)) and "logicalType" not in t:
        return _deref(walk, t["type"])
    return t


def _nullable(walk: _Walk, t: Any, path: str) -> tuple[Any, bool]:
    """(the non-null type, whether null is allowed) of ``t``."""
    t = _deref(walk, t)
    if not isinstance(t, list):
        return t, False
    others = [b for b in t if b != "null"]
    if len(others) != 1 or len(t) > 2:
        raise _Problem(path, f"the writer schema has {path} as a union of {json.dumps(t)}: only a type or a union of "
                             "null and one type can become a column")
    return others[0], len(t) == 2


def _kind(walk: _Walk, t: Any) -> tuple[str, str | None]:
    """(the Avro type name, its logical type) of a non-union type."""
    t = _deref(walk, t)
    if isinstance(t, str):
        return t, None
    return str(t.get("type")), t.get("logicalType")


def _describe(walk: _Walk, t: Any) -> str:
    kind, logical = _kind(walk, t)
    return f"{kind} ({logical})" if logical else kind


def _record(walk: _Walk, writer: Any, columns: list[NestedField], prefix: str) -> dict[str, Any]:
    """The reader record for ``columns`` from the ``writer`` record (its name kept)."""
    writer = _deref(walk, writer)
    full = _full_name(writer)
    walk.emitted.add(full)
    by_name = {str(f["name"]): f for f in writer.get("fields", ())}
    folded: dict[str, list[str]] = {}
    for name in by_name:
        folded.setdefault(name.casefold(), []).append(name)
    out_fields: list[dict[str, Any]] = []
    used: set[str] = set()
    for column in columns:
        path = f"{prefix}{column.name}"
        source = by_name.get(column.name)
        alias = None
        if source is None:
            spellings = folded.get(column.name.casefold(), [])
            if spellings and walk.case_insensitive and len(spellings) == 1:
                source, alias = by_name[spellings[0]], spellings[0]
            elif spellings:
                walk.problems.append(_Problem(f"{prefix}{spellings[0]}", (
                    f"the writer schema has field {spellings[0]!r} and the table has column {column.name!r}: they "
                    "differ only in case; set case_insensitive = true on the table to land it there, or rename "
                    "the field")))
                used.update(spellings)
                continue
        if source is None:
            if column.required:
                walk.problems.append(_Problem(path, f"the writer schema has no field {column.name!r} and column {path} "
                                                    "is required", _relax(walk, column, path)))
            try:
                out_fields.append({"name": column.name, "type": ["null", _avro_of(walk, column.field_type, path)],
                                   "default": None})
            except _Problem as problem:
                walk.problems.append(problem)
            continue
        used.add(str(source["name"]))
        try:
            t = _field(walk, source["type"], column, path)
        except _Problem as problem:
            walk.problems.append(problem)
            continue
        entry: dict[str, Any] = {"name": column.name, "type": t}
        if alias is not None:
            entry["aliases"] = [alias]
        out_fields.append(entry)   # no default: the writer has the field, a default could only mask a mismatch
    for name, source in by_name.items():
        if name in used:
            continue
        path = f"{prefix}{name}"
        if prefix in walk.lenient:
            continue
        if walk.unknown_fields == "ignore":
            walk.ignored.append(path)
        elif walk.unknown_fields == "evolve":
            try:
                walk.problems.append(_Problem(path, f"{NO_SUCH_COLUMN} for writer field {path}",
                                              Change("add", _path(path), _iceberg_of(walk, source["type"], path))))
            except _Problem as problem:
                walk.problems.append(problem)
        else:
            walk.problems.append(_Problem(path, f"{NO_SUCH_COLUMN}: the writer schema has field {path} "
                                                f"({_describe(walk, _nullable(walk, source['type'], path)[0])}); add "
                                                "the column, or set unknown_fields = \"evolve\" or \"ignore\""))
    record: dict[str, Any] = {"type": "record", "name": full, "fields": out_fields}
    return _as_written(walk, record)


def _as_written(walk: _Walk, t: dict[str, Any]) -> dict[str, Any]:
    """A named type for the reader, named as the writer spells it."""
    spelled = walk.spelled.get(_full_name(t), {"name": _full_name(t)})
    return {**{k: v for k, v in t.items() if k not in ("name", "namespace")}, **spelled}


def _full_name(t: dict[str, Any]) -> str:
    return str(t.get("name", ""))   # expanded: names are full


def _path(dotted: str) -> tuple[str, ...]:
    return tuple(dotted.split("."))


def _field(walk: _Walk, writer_type: Any, column: NestedField, path: str) -> Any:
    """The reader type for a writer field landing in ``column``."""
    inner, nullable = _nullable(walk, writer_type, path)
    if nullable and column.required:
        walk.problems.append(_Problem(path, f"the writer schema lets {path} be null and column {path} is required",
                                      _relax(walk, column, path)))
    reader_inner = _value(walk, inner, column.field_type, path)
    if not nullable:
        return reader_inner
    return ["null", reader_inner] if _deref(walk, writer_type)[0] == "null" else [reader_inner, "null"]


def _relax(walk: _Walk, column: NestedField, path: str) -> Change | None:
    """Making ``column`` optional; None (no change can help) for an identifier field."""
    return None if column.field_id in walk.identifiers else Change("optional", _path(path), column.field_type)


def _value(walk: _Walk, t: Any, target: IcebergType, path: str) -> Any:
    """The reader type for writer type ``t`` (not a union) into ``target``."""
    t = _deref(walk, t)
    kind, logical = _kind(walk, t)

    def refuse() -> _Problem:
        return _Problem(path, f"the writer schema has {path} as {_describe(walk, t)}, which column {path} ({target}) "
                              "cannot hold exactly; change the column or the writer schema")

    def widen(to: IcebergType) -> _Problem:
        return _Problem(path, f"the writer schema has {path} as {_describe(walk, t)}; column {path} is {target}: it "
                              f"would need to widen to {to} (unknown_fields = \"evolve\" does that)",
                        Change("widen", _path(path), to))

    if isinstance(target, StructType):
        if kind not in ("record", "error"):
            raise refuse()
        return _record(walk, t, list(target.fields), f"{path}.")
    if isinstance(target, ListType):
        if kind != "array":
            raise refuse()
        element = NestedField(target.element_id, "element", target.element_type, required=target.element_required)
        return {"type": "array", "items": _field(walk, t["items"], element, f"{path}.element")}
    if isinstance(target, MapType):
        if kind != "map" or not isinstance(target.key_type, StringType):
            raise refuse()
        value = NestedField(target.value_id, "value", target.value_type, required=target.value_required)
        return {"type": "map", "values": _field(walk, t["values"], value, f"{path}.value")}
    if kind in ("record", "error", "array", "map"):
        raise refuse()
    if logical == "uuid" or logical == "duration" or (logical or "").endswith("nanos"):
        raise _Problem(path, f"the writer schema has {path} as {_describe(walk, t)}, which frazil does not read yet "
                             "(uuid, duration and nanosecond types); send it as a string or a microsecond timestamp")
    if logical == "decimal":
        if not isinstance(target, DecimalType):
            raise refuse()
        precision, scale = int(t.get("precision", 0)), int(t.get("scale", 0))
        if scale != target.scale:
            raise refuse()
        if precision > target.precision:
            if precision > MAX_DECIMAL_PRECISION:
                raise refuse()
            raise widen(DecimalType(precision, scale))
        return _copy(walk, t)
    exact: dict[tuple[str, str | None], tuple[type, ...]] = {
        ("boolean", None): (BooleanType,),
        ("int", None): (IntegerType, LongType),
        ("long", None): (LongType,),
        ("float", None): (FloatType, DoubleType),
        ("double", None): (DoubleType,),
        ("string", None): (StringType,),
        ("enum", None): (StringType,),
        ("bytes", None): (BinaryType,),
        ("int", "date"): (DateType,),
        ("int", "time-millis"): (TimeType,),
        ("long", "time-micros"): (TimeType,),
        ("long", "timestamp-millis"): (TimestamptzType,),
        ("long", "timestamp-micros"): (TimestamptzType,),
        ("long", "local-timestamp-millis"): (TimestampType,),
        ("long", "local-timestamp-micros"): (TimestampType,),
    }
    known = (kind, logical if (kind, logical) in exact else None)
    if kind == "fixed" and isinstance(target, FixedType) and int(t.get("size", -1)) == len(target):
        return _copy(walk, t)
    if known in exact and isinstance(target, exact[known]):
        return _copy(walk, t)
    if known == ("long", None) and isinstance(target, IntegerType):
        raise widen(LongType())
    if known == ("double", None) and isinstance(target, FloatType):
        raise widen(DoubleType())
    if known == ("long", None) and isinstance(target, (TimestampType, TimestamptzType)):
        raise _Problem(path, f"the writer schema has {path} as a long without a timestamp logical type: its unit would "
                             "be a guess; give the field logicalType timestamp-millis or timestamp-micros")
    raise refuse()


def _copy(walk: _Walk, t: Any) -> Any:
    """A writer type as the reader names it: a named type already defined in the reader by name."""
    if isinstance(t, dict) and t.get("type") in ("enum", "fixed"):
        full = _full_name(t)
        if full in walk.emitted:   # defined already: referred to by its full name
            return full
        walk.emitted.add(full)
        return _as_written(walk, t)
    return t


def _avro_of(walk: _Walk, t: IcebergType, path: str) -> Any:
    """An Avro type for a column the writer does not have (only ever null)."""
    simple: list[tuple[type, Any]] = [
        (BooleanType, "boolean"), (IntegerType, "int"), (LongType, "long"), (FloatType, "float"),
        (DoubleType, "double"), (StringType, "string"), (BinaryType, "bytes"),
        (DateType, {"type": "int", "logicalType": "date"}), (TimeType, {"type": "long", "logicalType": "time-micros"}),
        (TimestamptzType, {"type": "long", "logicalType": "timestamp-micros"}),
        (TimestampType, {"type": "long", "logicalType": "local-timestamp-micros"}),
    ]
    for kind, avro in simple:
        if isinstance(t, kind):
            return avro
    name = "frazil_missing_" + "_".join(path.replace(".", "_").split()) + f"_{next(walk.ids)}"
    if isinstance(t, DecimalType):
        return {"type": "fixed", "name": name, "size": 16, "logicalType": "decimal", "precision": t.precision,
                "scale": t.scale}
    if isinstance(t, FixedType):
        return {"type": "fixed", "name": name, "size": len(t)}
    if isinstance(t, StructType):
        return {"type": "record", "name": name, "fields": [
            {"name": f.name, "type": ["null", _avro_of(walk, f.field_type, f"{path}.{f.name}")], "default": None}
            for f in t.fields]}
    if isinstance(t, ListType):
        return {"type": "array", "items": ["null", _avro_of(walk, t.element_type, f"{path}.element")]}
    if isinstance(t, MapType):
        return {"type": "map", "values": ["null", _avro_of(walk, t.value_type, f"{path}.value")]}
    raise _Problem(path, f"column {path} ({t}) has no Avro counterpart frazil can fill with NULL")


def _iceberg_of(walk: _Walk, t: Any, path: str) -> IcebergType:
    """The Iceberg type of a new column for writer type ``t`` (field ids are placeholders)."""
    inner, _ = _nullable(walk, t, path)
    kind, logical = _kind(walk, inner)
    inner = _deref(walk, inner)
    by_logical: dict[tuple[str, str | None], IcebergType] = {
        ("boolean", None): BooleanType(), ("int", None): IntegerType(), ("long", None): LongType(),
        ("float", None): FloatType(), ("double", None): DoubleType(), ("string", None): StringType(),
        ("enum", None): StringType(), ("bytes", None): BinaryType(), ("int", "date"): DateType(),
        ("int", "time-millis"): TimeType(), ("long", "time-micros"): TimeType(),
        ("long", "timestamp-millis"): TimestamptzType(), ("long", "timestamp-micros"): TimestamptzType(),
        ("long", "local-timestamp-millis"): TimestampType(), ("long", "local-timestamp-micros"): TimestampType(),
    }
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(inner.get("precision", 0)), int(inner.get("scale", 0))
        if not 0 < precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise _Problem(path, f"the writer schema's new field {path} is decimal({precision}, {scale}); an Iceberg "
                                 f"decimal has a precision of 1 to {MAX_DECIMAL_PRECISION} and a scale of 0 to its "
                                 "precision: send it as a string, or with a precision Iceberg can hold")
        return DecimalType(precision, scale)
    if kind == "fixed" and logical is None:
        return FixedType(int(inner["size"]))
    if (kind, logical) in by_logical:
        return by_logical[(kind, logical)]
    if (kind, None) in by_logical and logical not in ("uuid", "duration") and not (logical or "").endswith("nanos"):
        return by_logical[(kind, None)]   # an unknown logical type is its base type (the Avro spec)
    if kind in ("record", "error"):
        return StructType(*(NestedField(next(walk.ids), str(f["name"]),
                                        _iceberg_of(walk, f["type"], f"{path}.{f['name']}"), required=False)
                            for f in inner.get("fields", ())))
    if kind == "array":
        return ListType(next(walk.ids), _iceberg_of(walk, inner["items"], f"{path}.element"), element_required=False)
    if kind == "map":
        key_id = next(walk.ids)
        return MapType(key_id, StringType(), next(walk.ids), _iceberg_of(walk, inner["values"], f"{path}.value"),
                       value_required=False)
    raise _Problem(path, f"the writer schema's new field {path} is {_describe(walk, inner)}, which frazil cannot add "
                         "as a column")
