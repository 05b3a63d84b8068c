"""A pydantic ``ValidationError`` as a ``ConfigError`` that names the key as the file spells it
(``kafka.topics``, ``tables[1].partition_by[0]``) and says what would be accepted."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from frazil.config.layout import Reading, child, element, fields, key_of, marker, model_in, section
from frazil.config.types import Problem, Refused
from frazil.errors import ConfigError

_KINDS = {"string_type": "str", "int_type": "int", "float_type": "float", "bool_type": "bool", "tuple_type": "a list",
          "list_type": "a list", "dict_type": "a table", "path_type": "a path", "dataclass_type": "a table",
          "dataclass_exact_type": "a table"}


def translate(exc: ValidationError, model: Any, at: str, reading: Reading) -> ConfigError:
    """The first of ``exc``'s errors (validating ``model``, at ``at`` in the file) as a ConfigError."""
    return ConfigError(message(exc.errors()[0], model, at, reading))


def locate(loc: tuple[int | str, ...], model: Any, at: str, reading: Reading) -> tuple[str, FieldInfo | None, Any]:
    """The file's name for ``loc`` below ``model`` at ``at``; the field there, and the model it
    holds (a section) or None."""
    info: FieldInfo | None = None
    i = 0
    while i < len(loc):
        seg = loc[i]
        if isinstance(seg, int) or model is None or seg not in fields(model):
            # a mapping's entry keeps the mapping's field: what its values may be
            at, model, info = (f"{at}[{seg}]", None, None) if isinstance(seg, int) else (child(at, seg), None, info)
            i += 1
            continue
        info = fields(model)[seg]
        path = key_of(seg, info).path
        path = seg if path is None else path
        inner = model_in(info.annotation)
        if inner is not None and inner[1] and i + 1 < len(loc) and isinstance(loc[i + 1], int):
            at, i = element(at, path, int(loc[i + 1]), reading), i + 1
        elif path:
            at = path.lstrip("/") if path.startswith("/") else child(at, path)
        model = inner[0] if inner is not None else None
        i += 1
    return at, info, model


def message(error: ErrorDetails, model: Any, at: str, reading: Reading) -> str:
    key, info, holds = locate(error["loc"], model, at, reading)
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx", {})
    if kind == "value_error":
        problem = ctx["error"]
        if isinstance(problem, Problem):
            return str(problem)
        return f"{key}{'' if str(problem).startswith(':') else ' '}{problem}"
    if kind == "missing":
        if holds is not None:
            return f"missing section {section(key)}"
        return f"missing required key {key!r}" + (f": {info.description}" if info and info.description else "")
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        where, _, name = key.rpartition(".")
        return f"unknown key(s) {name} in {section(where)}; see docs/configuration.md for valid keys"
    if kind == "literal_error":
        return f"{key} {_refused(info).said(value)}"
    if kind in _KINDS:
        return (f"{section(key)} must be a table, got {value!r}" if holds is not None
                else f"{key} must be {_KINDS[kind]}, got {value!r}")
    bounds = {"greater_than": "greater than {gt:g}", "greater_than_equal": "at least {ge:g}",
              "less_than": "less than {lt:g}", "less_than_equal": "at most {le:g}", "finite_number": "a finite number",
              "string_too_short": "a non-empty string"}
    if kind in bounds:
        return f"{key} must be {bounds[kind].format(**ctx)}, got {value!r}"
    return f"{key}: {error['msg']}"


def _refused(info: FieldInfo | None) -> Refused:
    """What follows ``<key> <value>`` when the value is not one of a field's choices."""
    if info is not None and marker(info, Refused):
        return typing.cast(Refused, marker(info, Refused))
    choices = [str(c) for c in _literals(info.annotation if info else None) if c is not None]
    return Refused(f"must be one of {', '.join(choices)}")


def _literals(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [c for arg in typing.get_args(annotation) for c in _literals(arg)]
