"""The values of single config keys, parsed once: column types, partition transforms, names,
regular expressions; and the markers that say where a field is read from in the file.

``ColumnType`` and ``PartitionField`` are strings (their canonical spelling, as written in the
config and printed in messages) that also carry what was parsed out of them, so code that
builds Iceberg types or partition specs never parses the text again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BeforeValidator, Field, GetCoreSchemaHandler, Strict
from pydantic_core import core_schema

Primitive = Literal["boolean", "int", "long", "float", "double", "string", "binary", "date", "time", "timestamp",
                    "timestamptz", "uuid"]
PRIMITIVES: tuple[str, ...] = get_args(Primitive)


class _Parsed(str):
    """A string that keeps what was parsed out of it; immutable like the string itself."""

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _set(self, **parts: object) -> None:
        for name, value in parts.items():
            object.__setattr__(self, name, value)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(lambda v: v if isinstance(v, cls) else cls(v))


class ColumnType(_Parsed):
    """A declared column's type. ``kind`` is the primitive's name, ``"decimal"`` (with ``precision``
    and ``scale``), ``"fixed"`` (with ``length``), or a nested kind: ``"struct"`` (``fields``, its
    children by name, in order), ``"list"`` (``element``) or ``"map"`` (``key``, always string, and
    ``value``). Attributes a kind does not have are ``None``. Fields nested in a struct, list
    elements and map values are optional. ``str(t)`` is the canonical spelling: lower-case type
    names, field names as written, ``"decimal(10, 2)"``, ``"struct<at: timestamptz, tags: list<string>>"``."""

    kind: Primitive | Literal["decimal", "fixed", "struct", "list", "map"]
    precision: int | None
    scale: int | None
    length: int | None
    fields: tuple[tuple[str, ColumnType], ...] | None
    element: ColumnType | None
    key: ColumnType | None
    value: ColumnType | None

    def __new__(cls, text: object) -> ColumnType:
        if not isinstance(text, str):
            raise ValueError(f"has unknown type {text!r}; {_TYPES_HINT}")
        parser = _TypeParser(text)
        parsed = parser.type()
        parser.end()
        return parsed

    @classmethod
    def _make(cls, spelled: str, kind: str, **parts: object) -> ColumnType:
        self = super().__new__(cls, spelled)
        self._set(kind=kind, **{name: parts.get(name) for name in (
            "precision", "scale", "length", "fields", "element", "key", "value")})
        return self

    @property
    def nested(self) -> bool:
        """A struct, list or map."""
        return self.kind in ("struct", "list", "map")

    def at(self, path: str) -> ColumnType | None:
        """The type of the field at ``path`` (dotted, ``at`` or ``geo.lat``) inside this struct;
        None when there is none (never inside a list or a map)."""
        found: ColumnType | None = self
        for name in path.split("."):
            if found is None or found.fields is None:
                return None
            found = dict(found.fields).get(name)
        return found


_TYPES_HINT = (f"use one of {', '.join(PRIMITIVES)}, decimal(P, S), fixed[N], struct<name: type, ...>, "
               "list<type> or map<string, type>")
_TOKEN = re.compile(r"\s*(?:(\w+)|(\S))")


class _TypeParser:
    """``ColumnType``'s grammar, read left to right: a primitive, ``decimal(P, S)``, ``fixed[N]``,
    ``struct<name: T, ...>``, ``list<T>``, ``map<string, T>``; type names in any case."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = [m.group(1) or m.group(2) for m in _TOKEN.finditer(text.strip())]
        self.at = 0

    def _wrong(self, why: str) -> ValueError:
        return ValueError(f"has type {self.text!r}, which {why}; {_TYPES_HINT}")

    def _next(self) -> str:
        if self.at >= len(self.tokens):
            raise self._wrong("ends too early")
        self.at += 1
        return self.tokens[self.at - 1]

    def _expect(self, token: str) -> None:
        found = self._next()
        if found != token:
            raise self._wrong(f"has {found!r} where {token!r} belongs")

    def _number(self) -> int:
        found = self._next()
        if not found.isdigit():
            raise self._wrong(f"has {found!r} where a number belongs")
        return int(found)

    def end(self) -> None:
        if self.at != len(self.tokens):
            raise self._wrong(f"goes on after a whole type ({' '.join(self.tokens[self.at:])!r})")

    def type(self) -> ColumnType:
        name = self._next().lower()
        if name == "decimal":
            self._expect("(")
            precision = self._number()
            self._expect(",")
            scale = self._number()
            self._expect(")")
            if not 1 <= precision <= 38 or scale > precision:
                raise ValueError(f"{self.text!r} is not a decimal Iceberg can hold: decimal(P, S) needs 1 <= P <= 38 "
                                 f"and S <= P (this has P = {precision}, S = {scale})")
            return ColumnType._make(f"decimal({precision}, {scale})", "decimal", precision=precision, scale=scale)
        if name == "fixed":
            self._expect("[")
            length = self._number()
            self._expect("]")
            if not 1 <= length < 1 << 31:
                raise ValueError(f"{self.text!r}: fixed[N] needs 1 <= N < 2^31 (the number of bytes of every value)")
            return ColumnType._make(f"fixed[{length}]", "fixed", length=length)
        if name == "list":
            self._expect("<")
            element = self.type()
            self._expect(">")
            return ColumnType._make(f"list<{element}>", "list", element=element)
        if name == "map":
            self._expect("<")
            key = self.type()
            self._expect(",")
            value = self.type()
            self._expect(">")
            if key.kind != "string":
                raise ValueError(f"{self.text!r}: a map's keys are string (a JSON object's keys are text), not {key}")
            return ColumnType._make(f"map<{key}, {value}>", "map", key=key, value=value)
        if name == "struct":
            self._expect("<")
            fields: list[tuple[str, ColumnType]] = []
            while True:
                field = self._next()
                if not re.fullmatch(r"\w+", field):
                    raise self._wrong(f"has {field!r} where a field name belongs")
                if field in dict(fields):
                    raise ValueError(f"{self.text!r}: struct field {field!r} is named twice")
                self._expect(":")
                fields.append((field, self.type()))
                if self._next() == ">":
                    break
                self.at -= 1
                self._expect(",")
            spelled = ", ".join(f"{n}: {t}" for n, t in fields)
            return ColumnType._make(f"struct<{spelled}>", "struct", fields=tuple(fields))
        if name not in PRIMITIVES:
            raise ValueError(f"has unknown type {self.text!r}; {_TYPES_HINT}")
        return ColumnType._make(name, name)


# The Kafka metadata columns a table gets with metadata_columns = true, and their types.
META_COLUMN_TYPES: dict[str, ColumnType] = {
    "_kafka_topic": ColumnType("string"), "_kafka_partition": ColumnType("int"), "_kafka_offset": ColumnType("long"),
    "_kafka_timestamp": ColumnType("timestamptz"), "_kafka_key": ColumnType("binary")}
META_COLUMNS = tuple(META_COLUMN_TYPES)

Transform = Literal["identity", "year", "month", "day", "hour", "bucket", "truncate"]
_TIME = ("date", "timestamp", "timestamptz")
# The column types each transform applies to, by kind (Iceberg spec, "Partition Transforms");
# identity takes every primitive.
TRANSFORM_TAKES: dict[Transform, tuple[str, ...]] = {
    "identity": (*PRIMITIVES, "decimal", "fixed"),
    "year": _TIME, "month": _TIME, "day": _TIME, "hour": ("timestamp", "timestamptz"),
    "bucket": ("int", "long", "decimal", "date", "time", "timestamp", "timestamptz", "string", "uuid", "fixed",
               "binary"),
    "truncate": ("int", "long", "decimal", "string", "binary"),
}
# a source is a column, or a field nested in struct columns by its dotted path (``meta.at``)
_TRANSFORM = re.compile(r"^(?:(identity|year|month|day|hour)|(bucket|truncate)\[(\d+)\])\((\w+(?:\.\w+)*)\)$"
                        r"|^(\w+(?:\.\w+)*)$")


class PartitionField(_Parsed):
    """One ``partition_by`` entry: ``transform`` of the column ``source`` (or of a field nested in
    struct columns, by its dotted path: ``meta.at``), with ``width`` for ``bucket[N]`` and
    ``truncate[W]`` (``None`` otherwise). ``str(f)`` is the entry as written (``"day(event_time)"``,
    ``"country"`` for identity)."""

    transform: Transform
    width: int | None
    source: str

    def __new__(cls, text: object) -> PartitionField:
        m = _TRANSFORM.match(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"{text!r} is not a partition transform; use e.g. \"day(event_time)\", "
                             "\"bucket[16](user_id)\", \"truncate[4](name)\" or \"country\"")
        transform = m.group(1) or m.group(2) or "identity"
        width = int(m.group(3)) if m.group(3) is not None else None
        if width is not None and width < 1:
            raise ValueError(f"{text!r}: {transform}[N] needs N >= 1")
        assert isinstance(text, str)
        self = super().__new__(cls, text.strip())
        self._set(transform=transform, width=width, source=m.group(4) or m.group(5))
        return self

    @property
    def takes(self) -> tuple[str, ...]:
        """The kinds of column this transform applies to."""
        return TRANSFORM_TAKES[self.transform]

    def applies_to(self, column_type: str) -> bool:
        """Whether the transform applies to a column of ``column_type`` (a ``ColumnType``, or any
        Iceberg type's text: ``"decimal(9, 2)"``, ``"fixed[16]"``, ``"struct<...>"``)."""
        return re.split(r"[(\[<]", column_type, maxsplit=1)[0] in self.takes


def _matches(pattern: str, message: str) -> AfterValidator:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.match(value):
            raise ValueError(f"{value!r} {message}")
        return value
    return AfterValidator(check)


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a valid regular expression ({exc}); e.g. \"orders\\..*\"") from None
    return value


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


def _text(value: object) -> object:
    """Table and Spark properties: TOML numbers and booleans as the text Iceberg and Spark read."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (int, float)) else value


Text = Annotated[str, Strict()]
Flag = Annotated[bool, Strict()]


def zero_or_count(zero: str) -> AfterValidator:
    """A count, where 0 means ``zero``."""
    def check(value: int) -> int:
        if value < 0:
            raise ValueError(f"must be 0 ({zero}) or a count, got {value}")
        return value
    return AfterValidator(check)


Positive = Annotated[int, Strict(), Field(gt=0)]
Seconds = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
Upper = BeforeValidator(_upper)
Property = Annotated[str, BeforeValidator(_text), Strict()]
Name = Annotated[str, Strict(), _matches(r"^[A-Za-z0-9_.-]+$", "may only hold letters, digits, '_', '.' and '-'")]
TopicName = Annotated[str, Strict(), _matches(r"^[A-Za-z0-9_.-]+$", "is not a valid topic name")]
Regex = Annotated[str, Strict(), AfterValidator(_regex)]
_TERM = r"\w+( (ASC|DESC))?( NULLS (FIRST|LAST))?"
SortOrder = Annotated[str, Strict(), AfterValidator(str.strip),
                      _matches(rf"(?i)^$|^{_TERM}(, *{_TERM})*$",
                               "must be columns like \"event_time\" or \"user_id DESC NULLS LAST, event_time\"")]


def dotted(value: object) -> object:
    """A dotted path into a record value, ``"meta.kind"``, as its parts (a tuple passes as it is)."""
    if isinstance(value, tuple):
        return value
    parts = tuple(value.strip().split(".")) if isinstance(value, str) else ("",)
    if not all(parts) and value != "":
        raise ValueError(f"{value!r} must be a dotted path into the value, e.g. \"type\" or \"meta.kind\"")
    return parts if value != "" else ()


# Where a field is read from in the TOML file (config/layout.py reads these).

@dataclass(frozen=True)
class Key:
    """The field's key, when it is not the field's name in its model's table: ``"pipeline.name"``
    (a key of a sub-table), ``"/schema_registry"`` (a table at the top of the file), ``""`` (the
    field's model is read from this same table), ``None`` (set at load, not a key of the file).
    ``default``: the file's default when the value has none of its own (``{pipeline}`` is the
    pipeline's name). ``scale``: the file gives the value in units of this (MiB for bytes)."""

    path: str | None
    default: Any = None
    scale: int = 1


@dataclass(frozen=True)
class Secret:
    """Also given as ``<key>_env`` (an environment variable) or ``<key>_file`` (a file holding it,
    trailing newline dropped); at most one of the three. The field is left out of ``repr``."""


@dataclass(frozen=True)
class File:
    """A path, relative to the config file; ``exists``: it must be a file."""

    exists: bool = True


@dataclass(frozen=True)
class NotEmpty:
    """Given in the file, it must not be empty (left out, the value's default stands); ``text``
    says what it holds."""

    text: str


@dataclass(frozen=True)
class Refused:
    """What the message says after ``<key> <value>`` when the value is not one of the choices."""

    text: str

    def said(self, value: object) -> str:
        return f"{value!r}{'' if self.text.startswith(':') else ' '}{self.text}"


def refused(model: Any, name: str) -> Refused:
    """The ``Refused`` marker of field ``name`` of ``model``."""
    return next(m for m in model.__pydantic_fields__[name].metadata if isinstance(m, Refused))


class Problem(ValueError):
    """A rule across several keys, broken; its message names every key (it is shown as it is)."""
