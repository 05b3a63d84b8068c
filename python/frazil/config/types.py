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
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


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
    """A declared column's type: ``kind`` is the primitive's name, or ``"decimal"`` with
    ``precision`` and ``scale`` (``None`` for every other kind). ``str(t)`` is the canonical
    spelling: lower case, ``"decimal(10, 2)"``."""

    kind: Primitive | Literal["decimal"]
    precision: int | None
    scale: int | None

    def __new__(cls, text: object) -> ColumnType:
        spelled = text.strip().lower() if isinstance(text, str) else ""
        m = _DECIMAL.match(spelled)
        if m:
            precision, scale = int(m.group(1)), int(m.group(2))
            if not 1 <= precision <= 38 or scale > precision:
                raise ValueError(f"{text!r} is not a decimal Iceberg can hold: decimal(P, S) needs 1 <= P <= 38 and "
                                 f"S <= P (this has P = {precision}, S = {scale})")
            self = super().__new__(cls, f"decimal({precision}, {scale})")
            self._set(kind="decimal", precision=precision, scale=scale)
            return self
        if spelled not in PRIMITIVES:
            raise ValueError(f"has unknown type {text!r}; use one of {', '.join(PRIMITIVES)} or decimal(P, S)")
        self = super().__new__(cls, spelled)
        self._set(kind=spelled, precision=None, scale=None)
        return self


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
