"""How the TOML file maps onto the models: which table each field is read from (the ``Key``
marker, config/types.py), which keys a table may hold, and a field's name in the file, for
messages and for docs/configuration.md.

``gather`` turns the file into the models' input: keys moved to the fields that hold them,
secrets read, relative paths resolved, defaults made of the pipeline's name filled in. It checks
only what the models cannot: unknown keys, files that must exist, keys that only make sense
beside another key's value. Every other check is the models' (config/errors.py words them).
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from frazil.config.tables import DEBEZIUM, CdcSection, ChangesConfig
from frazil.config.types import File, Key, NotEmpty, Secret, refused
from frazil.errors import ConfigError

_MISSING: Any = object()


@dataclass
class Reading:
    """One file being read: its folder (relative paths start there), the pipeline's name
    (defaults are made of it) and whether its one table is a ``[table]``."""

    base: Path
    pipeline: str = ""
    single_table: bool = False


def fields(model: Any) -> dict[str, FieldInfo]:
    return typing.cast(dict[str, FieldInfo], model.__pydantic_fields__)


def marker(info: FieldInfo, kind: type[Any]) -> Any:
    return next((m for m in info.metadata if isinstance(m, kind)), None)


def key_of(name: str, info: FieldInfo) -> Key:
    return marker(info, Key) or Key(name)


def model_in(annotation: Any) -> tuple[Any, bool] | None:
    """The model a field holds and whether it holds several (a tuple of them); None for a value."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return model_in(args[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return next(filter(None, (model_in(a) for a in args if a is not type(None))), None)
    if typing.get_origin(annotation) is tuple:
        inner = model_in(args[0])
        return (inner[0], True) if inner else None
    return (annotation, False) if hasattr(annotation, "__pydantic_fields__") else None


def section(at: str) -> str:
    return f"[{at}]" if at else "the top level"


def child(at: str, name: str) -> str:
    return f"{at}.{name}" if at else name


def element(at: str, name: str, index: int, reading: Reading) -> str:
    """The file's name for entry ``index`` of a list of tables: ``tables[1]``, or ``table``."""
    return "table" if name == "tables" and not at and reading.single_table else f"{child(at, name)}[{index}]"


class Table:
    """One TOML table being read, remembering the keys taken so the rest are reported."""

    def __init__(self, data: dict[str, Any], at: str) -> None:
        self.data, self.at, self.used = data, at, set[str]()
        self.subs: dict[str, Table] = {}

    def take(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key, _MISSING)

    def sub(self, name: str) -> Table:
        if name not in self.subs:
            value = self.take(name)
            if value is not _MISSING and not isinstance(value, dict):
                raise ConfigError(f"{section(child(self.at, name))} must be a table, got {value!r}")
            self.subs[name] = Table({} if value is _MISSING else value, child(self.at, name))
        return self.subs[name]

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(unknown)} in {section(self.at)}; see "
                              "docs/configuration.md for valid keys")
        for sub in self.subs.values():
            sub.finish()


def gather(model: Any, data: dict[str, Any], at: str, reading: Reading, root: Table | None = None) -> dict[str, Any]:
    """The input of ``model`` from its table ``data`` (at ``at`` in the file; ``root``: the
    file's top level, when this is not it)."""
    table = Table(data, at)
    out = _gather(model, table, root or table, reading)
    table.finish()
    return out


def _gather(model: Any, table: Table, root: Table, reading: Reading) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in fields(model).items():
        key = key_of(name, info)
        if key.path is None:
            continue
        inner = model_in(info.annotation)
        if key.path == "":
            assert inner is not None
            flat = (_changes(table, root, reading) if inner[0] is ChangesConfig
                    else _gather(inner[0], table, root, reading))
            if flat is not None:
                out[name] = flat
            continue
        source = root if key.path.startswith("/") else table
        *subs, leaf = key.path.lstrip("/").split(".")
        for sub in subs:
            source = source.sub(sub)
        value = secret(source, leaf, reading) if marker(info, Secret) else source.take(leaf)
        if value is _MISSING and key.default is not None:
            value = key.default.format(pipeline=reading.pipeline)
        if value is _MISSING and inner is not None and not inner[1] and not _optional(info) and _fills_itself(inner[0]):
            value = {}   # a section left out: its defaults
        if value is _MISSING:
            continue
        where = child(source.at, leaf)
        if marker(info, NotEmpty) and value in ([], {}):
            raise ConfigError(f"{where} must be a non-empty array of {marker(info, NotEmpty).text}")
        if inner is not None and inner[1] and isinstance(value, list):
            value = [gather(inner[0], v, element(source.at, leaf, i, reading), reading, root)
                     if isinstance(v, dict) else v for i, v in enumerate(value)]
        elif inner is not None and isinstance(value, dict):
            value = gather(inner[0], value, where, reading, root)
        elif marker(info, File) and isinstance(value, str) and value:
            value = _file(value, where, marker(info, File).exists, reading)
        elif key.scale != 1 and type(value) is int and value > 0:
            value *= key.scale
        out[name] = value
    return out


def _optional(info: FieldInfo) -> bool:
    return type(None) in typing.get_args(info.annotation)


def _fills_itself(model: Any) -> bool:
    """Whether a model left out of the file is made of its defaults (its every key has one)."""
    return all(not info.is_required() or key_of(n, info).default is not None for n, info in fields(model).items())


def secret(table: Table, key: str, reading: Reading) -> Any:
    """A secret given as ``key`` (in the file), ``key_env`` (an environment variable) or
    ``key_file`` (a file holding it, trailing newline dropped): at most one of the three."""
    forms = [k for k in (key, f"{key}_env", f"{key}_file") if table.take(k) is not _MISSING]
    if len(forms) > 1:
        raise ConfigError(f"give one of {', '.join(child(table.at, k) for k in forms)}, not several")
    if not forms or forms[0] == key:
        return table.data.get(key, _MISSING)
    given, value = child(table.at, forms[0]), table.data[forms[0]]
    if not isinstance(value, str):
        raise ConfigError(f"{given} must be str, got {value!r}")
    if forms[0].endswith("_env"):
        if value not in os.environ:
            raise ConfigError(f"{given} names the environment variable {value!r}, which is not set")
        return os.environ[value]
    path = (reading.base / value).resolve()
    try:
        return path.read_text().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{given}: cannot read {path}: {exc.strerror}") from None


def _file(value: str, where: str, exists: bool, reading: Reading) -> str:
    path = (reading.base / value).resolve()
    if exists and not path.is_file():
        raise ConfigError(f"{where} {path} does not exist")
    return str(path)


def _changes(table: Table, root: Table, reading: Reading) -> dict[str, Any] | None:
    """``mode`` and the keys of a keyed table (``ChangesConfig``); ``None`` in append mode."""
    at = table.at
    mode = table.data.get("mode", key_of("mode", fields(ChangesConfig)["mode"]).default)
    given = [k for k in ("tombstones", "merge", "merge_interval_s", "merge_min_changes", "cdc") if k in table.data]
    if mode == "append":
        table.used.update(["mode", *given])
        if "cdc" in given:
            raise ConfigError(f"[{at}.cdc] needs {at}.mode = \"cdc\"")
        tombstones = table.data.get("tombstones", "skip")
        if tombstones == "delete":
            raise ConfigError(f"{at}.tombstones = \"delete\" needs {at}.mode = \"upsert\" or \"cdc\": an append table "
                              "has no key to delete")
        if tombstones != "skip":
            raise ConfigError(f"{at}.tombstones {refused(ChangesConfig, 'tombstones').said(tombstones)}")
        keyed = [child(at, k) for k in given if k != "tombstones"]
        if keyed:
            raise ConfigError(f"{', '.join(keyed)} {'is' if len(keyed) == 1 else 'are'} for keyed tables ({at}.mode "
                              "= \"upsert\" or \"cdc\"); leave them out of an append table")
        return None
    why = f"{at}.mode = \"{mode}\""
    if table.data.get("merge", "native") == "native" and {"merge_interval_s", "merge_min_changes"} & set(given):
        raise ConfigError(f"{at}.merge_interval_s and {at}.merge_min_changes are for {at}.merge = \"spark\"; with "
                          f"{why} and merge = \"native\" every commit lands the changes")
    if mode == "upsert" and "cdc" in given:
        raise ConfigError(f"[{at}.cdc] needs {at}.mode = \"cdc\"; in upsert mode every value is the row")
    out = _gather(ChangesConfig, table, root, reading)
    if mode == "cdc":
        out.update(_cdc(table.sub("cdc"), reading))
    return out


def _cdc(table: Table, reading: Reading) -> dict[str, Any]:
    """``[table.cdc]`` (what ``unwrap_envelope`` left) as the operation fields of ``ChangesConfig``."""
    at, rest = table.at, {k: v for k, v in table.data.items() if k not in table.used}
    table.used.update(rest)
    try:
        cdc = CdcSection(**rest)
    except ValidationError as exc:
        from frazil.config.errors import translate  # errors.py names keys with this module

        raise translate(exc, CdcSection, at, reading) from None
    if cdc.format == "debezium":
        for key in ("field", "upsert", "delete"):
            if key in rest:
                raise ConfigError(f"{at}.{key} is for cdc.format = \"field\"; Debezium's envelope is read as it is")
        return dict(DEBEZIUM)
    for key in ("field", "upsert", "delete"):
        if key not in rest:
            raise ConfigError(f"missing required key '{at}.{key}': {fields(CdcSection)[key].description}")
    both = set(cdc.upsert) & set(cdc.delete)
    if both:
        raise ConfigError(f"{at}.upsert and {at}.delete both list {', '.join(sorted(both))}")
    return {"op": cdc.field, "upsert_ops": cdc.upsert, "delete_ops": cdc.delete}


@dataclass(frozen=True)
class FileKey:
    """One key of the file, as docs/configuration.md lists it."""

    key: str
    info: FieldInfo
    default: Any = None


def keys(model: Any, at: str = "") -> Iterator[FileKey]:
    """Every key of the file below ``model`` (at ``at``): tables as ``table.X``, secrets also as
    ``X_env`` and ``X_file``, a flat model's keys in the table that holds it."""
    for name, info in fields(model).items():
        key = key_of(name, info)
        if key.path is None:
            continue
        inner = model_in(info.annotation)
        where = key.path.lstrip("/") if key.path.startswith("/") else child(at, key.path)
        if key.path == "":
            yield from keys(inner[0], at) if inner else ()
            if inner and inner[0] is ChangesConfig:
                yield from keys(CdcSection, child(at, "cdc"))
            continue
        if inner is not None and not (inner[1] and name != "tables"):
            yield from keys(inner[0], "table" if name == "tables" else where)
            continue
        if inner is not None:   # an array of tables in one key (columns)
            yield FileKey(where, info, ())
            yield from keys(inner[0], f"{where}[]")
            continue
        default = key.default if key.default is not None else info.get_default(call_default_factory=True)
        if key.scale != 1 and isinstance(default, int):
            default //= key.scale
        for suffix in ("", "_env", "_file") if marker(info, Secret) else ("",):
            yield FileKey(where + suffix, info, default if not suffix else None)
