"""Reading the configuration: one TOML file, validated once, frozen.

``load`` reads the file; ``parse`` turns its tables into a ``Config``: config/layout.py gathers
the models' input from the file, the models validate it (config/errors.py words what they
refuse), and config/checks.py checks the rules of the file as a whole.
"""

from __future__ import annotations

import dataclasses
import logging
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from frazil.config import checks
from frazil.config.errors import translate
from frazil.config.layout import Reading, Table, gather, secret
from frazil.config.models import FETCH_MAX_BYTES, Config
from frazil.config.tables import staged
from frazil.errors import ConfigError

log = logging.getLogger(__name__)


def load(path: Path | str) -> Config:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:   # no permission (0640 root:frazil), a folder, not text
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return parse(data, base=path.resolve().parent, source=path)


def parse(data: dict[str, Any], *, base: Path = Path("."), source: Path | None = None) -> Config:
    """The config in ``data`` (a TOML file's tables); relative paths start at ``base``."""
    data = dict(data)
    if not isinstance(data.get("pipeline"), dict):
        raise ConfigError("missing section [pipeline]" if "pipeline" not in data
                          else f"[pipeline] must be a table, got {data['pipeline']!r}")
    name = data["pipeline"].get("name")
    reading = Reading(base, name if isinstance(name, str) else "", single_table="table" in data)
    _one_table_form(data)
    kafka = data.get("kafka")
    if isinstance(kafka, dict) and "max_poll_records" in kafka:
        data["kafka"] = {k: v for k, v in kafka.items() if k != "max_poll_records"}
        log.warning("kafka.max_poll_records no longer has an effect: a poll takes each partition's fetch whole, read "
                    "natively (at most kafka.max_partition_fetch_bytes per partition); remove it from the config")
    raw = gather(Config, data, "", reading)
    kafka = raw.get("kafka")
    if isinstance(kafka, dict) and "fetch_max_bytes" not in kafka \
            and type(kafka.get("max_partition_fetch_bytes")) is int:   # left out: it follows a larger partition fetch
        kafka["fetch_max_bytes"] = max(FETCH_MAX_BYTES, kafka["max_partition_fetch_bytes"])
    if isinstance(raw.get("catalog"), dict) and isinstance(raw["catalog"].get("properties", {}), dict):
        raw["catalog"]["properties"] = _catalog_properties(raw["catalog"].get("properties", {}), base)
    try:
        cfg = Config(**raw, source=source)
    except ValidationError as exc:
        raise translate(exc, Config, "", reading) from None
    checks.check(cfg, single_table=reading.single_table)
    kafka_cfg = dataclasses.replace(cfg.kafka, exclude_topics=(cfg.coordination.control_topic, cfg.dead_letter_topic))
    return dataclasses.replace(cfg, kafka=kafka_cfg, tables=tuple(staged(t) for t in cfg.tables))


def _one_table_form(data: dict[str, Any]) -> None:
    """``[table]`` (one table, every record) or ``[[tables]]`` (several, each with its routing);
    none when ``[dynamic]`` names every table. ``[table]`` is read as a list of one."""
    if "table" in data and "tables" in data:
        raise ConfigError("give the target as [table] (one table) or as [[tables]] (several, with routing), not both")
    if "table" not in data and "tables" not in data and "dynamic" not in data:
        raise ConfigError("missing section [table]: give the target as [table] (one table), [[tables]] (several, "
                          "with routing) or [dynamic] (tables named by the records)")
    if "table" in data:
        data["tables"] = [data.pop("table")]
    elif data.get("tables") == []:
        raise ConfigError("[[tables]] must hold at least one table")


def _catalog_properties(props: dict[str, Any], base: Path) -> dict[str, Any]:
    """The catalog's properties: ``<property>_env`` and ``<property>_file`` give ``<property>``
    from an environment variable or a file (``uri_env = "CATALOG_URI"`` keeps a database password
    out of the config file); the SQLite default; relative sqlite and file locations taken relative
    to the config file."""
    table, out = Table(props, "catalog.properties"), {}
    for key in props:
        name = key.removesuffix("_env").removesuffix("_file")
        if name not in out:
            out[name] = secret(table, name, Reading(base))
    if "py-catalog-impl" not in out:
        out.setdefault("type", "sql")
    if out.get("type") == "sql":
        out.setdefault("uri", "sqlite:///warehouse/catalog.db")
        out.setdefault("warehouse", "file://warehouse")
    return {key: _relative(value, base) if isinstance(value, str) else value for key, value in out.items()}


def _relative(value: str, base: Path) -> str:
    """Relative sqlite/file locations are taken relative to the config file."""
    for prefix in ("sqlite:///", "file://"):
        if value.startswith(prefix):
            rest = value[len(prefix):]
            if rest and not rest.startswith("/"):
                return prefix + str((base / rest).resolve())
    return value
