"""The tables a pipeline writes: ``[table]``, ``[[tables]]`` and the ``[dynamic]`` template, with
their columns and, for keyed tables, how records change rows."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass

from frazil.config.types import (
    ColumnType,
    Flag,
    Key,
    NotEmpty,
    PartitionField,
    Property,
    Refused,
    Regex,
    Seconds,
    SortOrder,
    Text,
    dotted,
    refused,
    zero_or_count,
)

STRICT = ConfigDict(extra="forbid")
STAGING_SUFFIX = "__changes"
OP_COLUMN = "_frazil_op"             # a staging table's change: "u" (upsert) or "d" (delete)
DEBEZIUM: dict[str, Any] = {"op": ("op",), "after": ("after",), "before": ("before",), "upsert_ops": ("c", "r", "u"),
                            "delete_ops": ("d",)}
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _column_name(name: str) -> str:
    if not name or name.startswith(("_kafka_", "_frazil_")):
        raise ValueError(f"{name!r} is empty or uses a reserved prefix (_kafka_, _frazil_)")
    return name


@dataclass(frozen=True, config=STRICT)
class Column:
    name: Text = Field(description="the column's name")
    type: ColumnType = Field(description="boolean int long float double string binary date time timestamp "
                                         "timestamptz uuid decimal(P, S) fixed[N] struct<name: type, ...> list<type> "
                                         "map<string, type>")
    required: Flag = Field(default=False, description="a record must have a value for it")
    doc: Text | None = Field(default=None, description="the column's doc in the table schema")
    unit: Annotated[Literal["s", "ms", "us", "ns", "d"] | None, Refused(
        ": a unit says what a number sent for the column counts: s, ms, us or ns for timestamp and timestamptz "
        "columns (since the epoch) and time columns (since midnight), d for date columns (days since 1970-01-01)")
    ] = Field(default=None, description="timestamps, times, dates: what a number sent counts")
    rounding: Annotated[Literal["half_even"] | None, Refused(
        ": rounding is \"half_even\", for int, long and decimal columns (without it a fraction for an integer, or "
        "digits past a decimal's scale, make a bad record)")] = Field(
        default=None, description="int, long, decimal: \"half_even\" rounds digits past the scale; left out: refused")

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return _column_name(name)

    @field_validator("unit", "rounding")
    @classmethod
    def _fits_type(cls, value: str | None, info: ValidationInfo) -> str | None:
        kind = getattr(info.data.get("type"), "kind", None)
        if info.field_name == "rounding":
            fits: tuple[str, ...] = ("int", "long", "decimal")
        else:
            fits = ("date",) if value == "d" else ("timestamp", "timestamptz", "time")
        if value is not None and kind is not None and kind not in fits:
            raise ValueError(refused(cls, info.field_name or "").said(value))
        return value


HEADER_TYPES: dict[str, ColumnType] = {t: ColumnType(t) for t in ("string", "binary", "int", "long", "double",
                                                                   "boolean")}


@dataclass(frozen=True, config=STRICT)
class HeaderColumn:
    """A column filled from a Kafka record header: the last header named ``header`` (as Kafka's
    ``lastHeader``), its bytes as text, as they are, or as the number or boolean its text spells."""

    name: Text = Field(description="the column's name")
    header: Text = Field(description="the header's name")
    type: Annotated[Literal["string", "binary", "int", "long", "double", "boolean"], Refused(
        ": a header lands in a string (UTF-8 text), binary (its bytes), int, long, double or boolean (its text "
        "parsed exactly) column")] = Field(default="string", description="string binary int long double boolean")

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return _column_name(name)

    @property
    def column_type(self) -> ColumnType:
        return HEADER_TYPES[self.type]


_STEPS = ("rename", "drop", "flatten", "cast", "filter")
_STEP_KEYS = {"rename": {"to"}, "drop": set(), "flatten": {"separator"}, "cast": {"to"}, "filter": {"matches", "keep"}}
CAST_TYPES = ("string", "long", "double", "boolean")


def _field_path(path: str) -> str:
    if path and not all(path.split(".")):
        raise ValueError(f"{path!r} is not a dotted path of field names, e.g. \"meta.user\"")
    return path


@dataclass(frozen=True, config=STRICT)
class Transform:
    """One step of a table's transforms, applied in order to each JSON value before it is decoded
    (natively): exactly one of ``rename`` (to ``to``), ``drop``, ``flatten`` (members named
    ``field{separator}member``), ``cast`` (to ``to``: string, long, double, boolean) and
    ``filter`` (keep records whose field's text fully matches ``matches``; ``keep = false``: leave
    them out)."""

    rename: Annotated[Text, AfterValidator(_field_path)] = Field(default="", description="a field to rename, with to")
    drop: Annotated[Text, AfterValidator(_field_path)] = Field(default="", description="a field to leave out")
    flatten: Annotated[Text, AfterValidator(_field_path)] = Field(
        default="", description="an object field whose members become fields of its parent")
    cast: Annotated[Text, AfterValidator(_field_path)] = Field(default="", description="a field to cast, with to")
    filter: Annotated[Text, AfterValidator(_field_path)] = Field(
        default="", description="a field whose text decides whether a record is kept, with matches")
    to: Text = Field(default="", description="rename: the new dotted path; cast: string, long, double or boolean")
    separator: Text = Field(default="_", description="flatten: between the field's name and each member's")
    matches: Regex = Field(default="", description="filter: a regex the field's text must fully match")
    keep: Flag = Field(default=True, description="filter: keep the records that match (false: leave them out)")

    @model_validator(mode="after")
    def _one_step(self) -> Self:
        ops = [op for op in _STEPS if getattr(self, op)]
        if len(ops) != 1:
            raise ValueError("a transform is exactly one of rename, drop, flatten, cast, filter (each naming a "
                             f"field), got {', '.join(ops) or 'none'}")
        op = ops[0]
        given = {k for k, default in (("to", ""), ("separator", "_"), ("matches", ""), ("keep", True))
                 if getattr(self, k) != default}
        if given - _STEP_KEYS[op]:
            raise ValueError(f"{op} {getattr(self, op)!r} takes no {', '.join(sorted(given - _STEP_KEYS[op]))}")
        if op == "rename" and not self.to:
            raise ValueError(f"rename {self.rename!r} needs to, the field's new dotted path")
        if op == "rename":
            _field_path(self.to)
        if op == "cast" and self.to not in CAST_TYPES:
            raise ValueError(f"cast {self.cast!r} needs to = one of {', '.join(CAST_TYPES)} (got {self.to!r})")
        if op == "filter" and not self.matches:
            raise ValueError(f"filter {self.filter!r} needs matches, a regex its text must fully match")
        return self

    @property
    def op(self) -> str:
        return next(op for op in _STEPS if getattr(self, op))

    @property
    def field(self) -> str:
        return str(getattr(self, self.op))

    def spec(self) -> dict[str, object]:
        """This step as the native transforms read it."""
        out: dict[str, object] = {"op": self.op, "field": self.field}
        out.update({k: getattr(self, k) for k in _STEP_KEYS[self.op]})
        return out


@dataclass(frozen=True, config=STRICT)
class KeyColumn:
    """A column filled from the Kafka record key: the whole key (``field = ""``, as a header fills
    its column), or a field of a key that is a JSON object (a dotted path), of the column's kind."""

    name: Text = Field(description="the column's name")
    field: Text = Field(default="", description="the key's field (a dotted path); \"\": the whole key")
    type: Annotated[Literal["string", "binary", "int", "long", "double", "boolean"], Refused(
        ": a key lands in a string, binary (the whole key's bytes), int, long, double or boolean column")] = Field(
        default="string", description="string binary int long double boolean")

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return _column_name(name)

    @model_validator(mode="after")
    def _fits(self) -> Self:
        if self.type == "binary" and self.field:
            raise ValueError(f"key column {self.name!r} is binary, which takes the whole key's bytes; a field of a "
                             "JSON key holds text, a number or a boolean: give it one of those types, or leave out "
                             "field")
        if any(not part for part in self.field.split(".")) and self.field:
            raise ValueError(f"key column {self.name!r}: field {self.field!r} is not a dotted path of field names")
        return self

    @property
    def column_type(self) -> ColumnType:
        return HEADER_TYPES[self.type]


@dataclass(frozen=True, config=STRICT)
class ChangesConfig:
    """How a keyed table (``mode = "upsert"`` or ``"cdc"``) reads its records: each record
    replaces or deletes the row of its key (the table's identifier columns), the latest by
    (partition, offset) winning. ``upsert``: every value is the new row. ``cdc``: the value at
    ``op`` names the operation; an upsert's row is at ``after``, a delete's key at ``before``
    (``()``: the value itself)."""

    mode: Annotated[Literal["upsert", "cdc"], Key("mode", default="append"), Refused(
        "must be \"append\" (every record a new row), \"upsert\" (every record replaces the row of its key) or \"cdc\" "
        "(an operation field says insert, update or delete; Debezium's envelope by default)")] = Field(
        description="append: every record a new row; upsert: the new row of its key; cdc: an operation field says")
    tombstones: Annotated[Literal["skip", "delete"], Refused(
        "must be \"skip\" (a record with a null value lands nothing, counted) or \"delete\" (it deletes the row of its "
        "Kafka key; mode upsert or cdc)")] = Field(default="skip", description="what a record with a null value does")
    op: Annotated[tuple[str, ...], Key(None)] = ()            # from [cdc]: the path of the operation field
    after: Annotated[tuple[str, ...], Key(None)] = ()
    before: Annotated[tuple[str, ...], Key(None)] = ()
    upsert_ops: Annotated[tuple[str, ...], Key(None)] = ()
    delete_ops: Annotated[tuple[str, ...], Key(None)] = ()
    unwrap_envelope: Annotated[Flag, Key("cdc.unwrap_envelope")] = Field(
        default=True, description="read through the JSON converter's {\"schema\", \"payload\"}")
    merge: Annotated[Literal["native", "spark"], Refused(
        "must be \"native\" (frazil commits the rows with position deletes of the rows they replace) or \"spark\" "
        "(changes land in a staging table, and Spark MERGEs them into the table)")] = Field(
        default="native", description="native: frazil commits position deletes; spark: a staging table Spark merges")
    merge_interval_s: Seconds = Field(default=60.0, description="merge = \"spark\": how often changes are merged")
    merge_min_changes: Annotated[int, Strict(), zero_or_count("the interval alone")] = Field(
        default=100_000, description="merge = \"spark\": merge as soon as this many wait")
    target: Annotated[str, Key(None)] = ""   # set on a staging table: the table its changes are merged into


def _op_value(value: object) -> object:
    """An operation value as the text records are matched by (``true``, ``7``, ``"U"``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int) else value


OpValue = Annotated[Text, BeforeValidator(_op_value)]


def _listed(values: tuple[str, ...]) -> tuple[str, ...]:
    if not values:
        raise ValueError("must list the operation values (strings or numbers) of its operation")
    return values


@dataclass(frozen=True, config=STRICT)
class CdcSection:
    """``[table.cdc]``: how a change record names its operation (read into ``ChangesConfig``)."""

    format: Annotated[Literal["debezium", "field"], Refused(
        "must be \"debezium\" (op c/r/u with the row in after, d with the key in before) or \"field\" (the value is "
        "the row; cdc.field names the operation)")] = Field(
        default="debezium", description="Debezium's envelope, or a row whose `field` names the operation")
    field: Annotated[tuple[str, ...], BeforeValidator(dotted)] = Field(
        default=(), description="format = \"field\": the dotted path of the operation field, e.g. \"op\"")
    upsert: Annotated[tuple[OpValue, ...], AfterValidator(_listed)] = Field(
        default=(), description="format = \"field\": the operation values that upsert a row, e.g. [\"I\", \"U\"]")
    delete: Annotated[tuple[OpValue, ...], AfterValidator(_listed)] = Field(
        default=(), description="format = \"field\": the operation values that delete a row, e.g. [\"D\"]")


def _table_name(name: str) -> str:
    if name.count(".") < 1 or not all(_NAME.match(part) for part in name.split(".")):
        raise ValueError(f"{name!r} must be \"namespace.table\"")
    return name


_TOPIC_PART = re.compile(r"^topic\[(-?\d+)\]$")   # {topic[1]}: a part of a dotted topic name (0 the first, -1 the last)


def _template(template: str) -> str:
    template = template.strip()
    probe = _PLACEHOLDER.sub("x", template)
    if (not _PLACEHOLDER.search(template) or probe.count(".") < 1 or "{" in probe or "}" in probe
            or not all(_NAME.match(part) for part in probe.split("."))
            or any(not p or not all(p.split(".")) or ("[" in p and not _TOPIC_PART.match(p))
                   for p in _PLACEHOLDER.findall(template))):
        raise ValueError(f"{template!r} must be a \"namespace.table\" template with at least one placeholder: "
                         "{topic}, a part of a dotted topic name ({topic[0]} the first, {topic[-1]} the last) or a "
                         "dotted path into the value, e.g. \"raw.{topic}\" or \"{topic[1]}.{topic[2]}\" for "
                         "Debezium's server.schema.table")
    return template


def _path(path: str) -> str:
    if not path or not all(path.split(".")):
        raise ValueError(f"{path!r} must be a dotted path of an object to infer as a map, e.g. \"attributes\"")
    return path


def _once(columns: tuple[Column, ...]) -> tuple[Column, ...]:
    names = [c.name for c in columns]
    for name in sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f": column {name!r} is declared {names.count(name)} times; declare each column once")
    return columns


def _not_owned(properties: dict[str, str]) -> dict[str, str]:
    owned = [k for k in properties if k.startswith(("frazil.", "commit.retry."))]
    if owned:
        raise ValueError(f"{', '.join(owned)} are set by frazil itself; leave them out")
    return properties


Columns = Annotated[tuple[Column, ...], AfterValidator(_once), NotEmpty(
    "tables like {name = \"id\", type = \"long\"} (leave it out to infer the columns from the records)")]


@dataclass(frozen=True, config=STRICT)
class TableShape:
    """What a declared table and the ``[dynamic]`` template share. Checked against the columns
    when they are declared (config/checks.py); otherwise when the table is created."""

    create: Flag = Field(default=True, kw_only=True, description="create the table (and namespace) if missing")
    metadata_columns: Flag = Field(default=True, kw_only=True, description="add and fill the _kafka_* columns")
    partition_by: tuple[PartitionField, ...] = Field(
        default=(), kw_only=True, description="the partition spec of a new table")
    maps: tuple[Annotated[Text, AfterValidator(_path)], ...] = Field(
        default=(), kw_only=True, description="with inferred columns: objects at these paths are maps")
    identifier_columns: tuple[Text, ...] = Field(default=(), kw_only=True, description="the table's row identity")
    sort_order: SortOrder = Field(default="", kw_only=True, description="the sort order of a new table")
    properties: Annotated[dict[str, Property], AfterValidator(_not_owned)] = Field(
        default_factory=dict, kw_only=True, description="Iceberg table properties set on the table")
    unknown_fields: Annotated[Literal["fail", "ignore", "evolve"], Refused(
        "must be one of fail, ignore, evolve: \"fail\" makes a record with a field the table has no column for a bad "
        "record, \"ignore\" drops such fields and counts them (frazil_fields_ignored_total), \"evolve\" adds them to "
        "the table as optional columns (and widens int, float and decimal columns that values outgrow)")] = Field(
        default="fail", kw_only=True, description="a record field the table has no column for")
    case_insensitive: Flag = Field(
        default=False, kw_only=True, description="a field differing from a column only in case lands in it")
    header_columns: tuple[HeaderColumn, ...] = Field(
        default=(), kw_only=True, description="columns filled from Kafka record headers: {name, header, type}")
    headers_column: Annotated[Text | None, AfterValidator(lambda n: n if n is None else _column_name(n))] = Field(
        default=None, kw_only=True, description="a map<string, binary> column of every header of a record")
    key_columns: tuple[KeyColumn, ...] = Field(
        default=(), kw_only=True, description="columns filled from the Kafka record key: {name, field, type}")
    connect_envelope: Flag = Field(
        default=False, kw_only=True, description="append mode: values are Kafka Connect's JSON envelope "
        "{schema, payload}; the payload is the row, the schema makes and evolves the table")
    transforms: tuple[Transform, ...] = Field(
        default=(), kw_only=True, description="steps applied in order to each JSON value before it is decoded: "
        "{rename, to}, {drop}, {flatten, separator}, {cast, to}, {filter, matches, keep}")
    changes: Annotated[ChangesConfig | None, Key("")] = Field(default=None, kw_only=True)   # None: append mode

    @property
    def mode(self) -> str:
        return "append" if self.changes is None else self.changes.mode

    @property
    def transform_spec(self) -> str | None:
        """The transforms as the native buffer reads them (JSON); None without any."""
        return json.dumps([t.spec() for t in self.transforms]) if self.transforms else None


@dataclass(frozen=True, config=STRICT)
class TableConfig(TableShape):
    name: Annotated[Text, AfterValidator(_table_name)] = Field(
        description="\"namespace.table\", e.g. \"demo.events\"")
    columns: Columns = Field(default=(), description="the table's columns; left out: inferred from its first records")
    # Which records the table takes: all of them unless the topic fully matches ``topics`` and/or
    # the value at ``route_field`` fully matches ``route``.
    topics: Regex = Field(default="", description="regex on the topic name; \"\" takes every topic")
    route_field: Annotated[tuple[str, ...], BeforeValidator(dotted)] = Field(
        default=(), description="a dotted path into the value, with route")
    route: Regex = Field(default="", description="regex on the value at route_field, as text")

    @property
    def routed(self) -> bool:
        return bool(self.topics or self.route_field)


def normalise(value: str) -> str:
    """A placeholder's value as part of an identifier: lower case, anything but letters, digits
    and ``_`` as ``_``. ``"Orders.EU-1"`` gives ``orders_eu_1``."""
    return re.sub(r"[^a-z0-9_]", "_", value.lower())


@dataclass(frozen=True, config=STRICT)
class DynamicConfig(TableShape):
    """Dynamic routing: each record goes to the table its ``table`` template names (placeholders
    ``{topic}``, ``{topic[i]}`` (a part of a dotted topic name) and ``{dotted.path}`` into the value,
    each value normalised to an identifier),
    created on first use when ``create`` is on, with ``columns`` or a schema inferred from the
    first records."""

    table: Annotated[Text, AfterValidator(_template)] = Field(
        description="a template like \"raw.{topic}\" or \"events.{meta.kind}\"")
    topics: Regex = Field(default="", description="regex on the topic: which topics' records the template routes")
    columns: Columns = Field(default=(), description="the columns of created tables; left out: inferred")

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_PLACEHOLDER.findall(self.table)))

    @property
    def fields(self) -> tuple[tuple[str, ...], ...]:
        """The value paths the template reads (``topic`` is the record's topic, not a field)."""
        return tuple(tuple(p.split(".")) for p in self.placeholders if p != "topic" and not _TOPIC_PART.match(p))

    def topic_values(self, topic: str) -> tuple[dict[str, str], list[str]]:
        """The values of the template's ``{topic}`` and ``{topic[i]}`` placeholders for records of
        ``topic``, and the placeholders it has no part (or an empty one) for."""
        values: dict[str, str] = {}
        missing: list[str] = []
        parts = topic.split(".")
        for placeholder in self.placeholders:
            found = _TOPIC_PART.match(placeholder)
            if placeholder != "topic" and found is None:
                continue   # a value field
            i = int(found.group(1)) if found is not None else 0
            value = topic if found is None else parts[i] if -len(parts) <= i < len(parts) else ""
            if normalise(value):
                values[placeholder] = value
            else:
                missing.append(placeholder)
        return values, missing

    def name(self, values: dict[str, str]) -> str:
        """The table for a record whose placeholders hold ``values`` (normalised here); a name part
        that would start with a digit starts with ``_``."""
        name = _PLACEHOLDER.sub(lambda m: normalise(values[m.group(1)]), self.table)
        return ".".join(f"_{part}" if part[:1].isdigit() else part for part in name.split("."))

    def matches(self, name: str) -> bool:
        """Whether a table named ``name`` could have come from this template."""
        parts = re.split(r"(\{[^{}]*\})", self.table)
        pattern = "".join("[a-z0-9_]+" if p.startswith("{") else re.escape(p) for p in parts)
        return re.fullmatch(pattern, name) is not None

    @property
    def namespace(self) -> str | None:
        """The template's namespace when it has no placeholder (where its tables are listed)."""
        namespace = self.table.rsplit(".", 1)[0]
        return None if "{" in namespace else namespace

    def table_config(self, name: str) -> TableConfig:
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(TableShape)}
        return TableConfig(name, self.columns, **shared)


def staged(table: TableConfig) -> TableConfig:
    """``merge = "spark"``: the pipeline writes (and keeps its offsets in) a staging table, whose
    changes Spark merges into the table declared."""
    if table.changes is None or table.changes.merge != "spark" or table.changes.target:
        return table
    return dataclasses.replace(table, name=table.name + STAGING_SUFFIX,
                               changes=dataclasses.replace(table.changes, target=table.name))


def merge_target(staging: TableConfig) -> TableConfig:
    """The table a staging table's changes are merged into, as the config declares it."""
    assert staging.changes is not None and staging.changes.target
    return dataclasses.replace(staging, name=staging.changes.target,
                               changes=dataclasses.replace(staging.changes, target=""), topics="", route_field=(),
                               route="")

