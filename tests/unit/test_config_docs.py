"""docs/configuration.md's tables list every key the config models declare, with their defaults,
and no key the models do not have."""

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import PydanticUndefined

from frazil.config.layout import FileKey, keys
from frazil.config.models import Config

DOC = Path(__file__).parents[2] / "docs" / "configuration.md"
KEYS = {k.key: k for k in keys(Config)}


def rows() -> list[tuple[list[str], str | None, str]]:
    """Each row of the doc's key tables: its keys (``tables[]`` read as ``table``; a bare name
    takes the section of the key before it), its default cell, and the whole row."""
    out: list[tuple[list[str], str | None, str]] = []
    header: list[str] = []
    for line in DOC.read_text().splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = cells
            continue
        if header[0] != "key" or set(cells[0]) <= {"-"}:
            continue
        names: list[str] = []
        for token in re.findall(r"`([^`]+)`", cells[0]):
            token = token.replace("tables[].", "table.")
            names.append(token if "." in token or not names else f"{names[0].rsplit('.', 1)[0]}.{token}")
        default = cells[header.index("default")] if "default" in header else None
        out.append((names, default, line))
    return out


ROWS = rows()
DOCUMENTED = {name: (default, len(names), line) for names, default, line in ROWS for name in names}


def test_every_key_of_the_models_is_in_the_doc() -> None:
    missing = []
    for name in KEYS:
        parent = name.split("[]")[0]
        if "[]." in name:   # a column's keys are listed in the row of its array
            if parent not in DOCUMENTED or name.rsplit(".", 1)[1] not in DOCUMENTED[parent][2]:
                missing.append(name)
        elif name not in DOCUMENTED:
            missing.append(name)
    assert not missing, f"docs/configuration.md lists no row for {missing}"


def test_every_key_in_the_doc_is_a_key_of_the_models() -> None:
    unknown = [name for name in DOCUMENTED if name not in KEYS]
    assert not unknown, f"docs/configuration.md lists keys the config does not have: {unknown}"


def _doc_value(text: str) -> Any:
    text = text.strip().replace("<pipeline>", "{pipeline}")
    if text in ("true", "false"):
        return text == "true"
    if text in ("[]", "{}"):
        return text
    if re.fullmatch(r"-?[\d_]+(\.\d+)?", text):
        return float(text.replace("_", ""))
    return text.strip('"')


def _model_value(key: FileKey) -> Any:
    value = key.default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, tuple):
        return "[]"
    if isinstance(value, dict):
        return "{}"
    return value


@pytest.mark.parametrize("names, default, line", [r for r in ROWS if r[1] is not None], ids=lambda v: str(v)[:40])
def test_the_doc_gives_each_key_the_default_of_the_models(names: list[str], default: str, line: str) -> None:
    if default.strip() == "required":
        assert all(KEYS[n].default is PydanticUndefined for n in names if n in KEYS), line
        return
    leading = re.match(r"(`[^`]*`(?:, `[^`]*`)*)", default.strip())
    given = re.findall(r"`([^`]*)`", leading.group(1)) if leading else []
    if len(given) < len(names):   # in words ("none", "inferred", "one of ..."): nothing to compare
        return
    for name, text in zip(names, given[:len(names)], strict=True):
        if name in KEYS and KEYS[name].default is not None:
            assert _doc_value(text) == _model_value(KEYS[name]), f"{name}: the doc says {text}, the models " \
                                                                 f"{KEYS[name].default!r}"
