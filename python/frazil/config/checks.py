"""Rules of the file as a whole, checked once it is read: a table's keys against its columns,
sections against each other, the Avro schema file. Offline: nothing here connects anywhere.
Each error names the keys and the fix."""

from __future__ import annotations

import json
from pathlib import Path

from frazil.config.models import Config
from frazil.config.tables import DynamicConfig, TableConfig
from frazil.config.types import META_COLUMN_TYPES, ColumnType, PartitionField
from frazil.errors import ConfigError


def check(cfg: Config, *, single_table: bool) -> None:
    """``single_table``: the file gives its table as ``[table]`` (not ``[[tables]]``)."""
    tables: list[tuple[str, TableConfig | DynamicConfig]] = [
        ("table" if single_table else f"tables[{i}]", t) for i, t in enumerate(cfg.tables)]
    if cfg.dynamic is not None:
        tables.append(("dynamic", cfg.dynamic))
    names = [t.name for t in cfg.tables]
    for name in sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"table {name!r} appears more than once in [[tables]]; give each table one entry (a "
                          "table takes every record that matches its topics and route)")
    for at, table in tables:
        _table(table, at)
    _topics(cfg)
    _maintenance(cfg)
    if cfg.values.avro:
        _avro(cfg)


def _known(table: TableConfig | DynamicConfig) -> dict[str, ColumnType]:
    """The table's columns by name when they are declared, the Kafka metadata columns with them."""
    meta = META_COLUMN_TYPES if table.metadata_columns else {}
    return {**{c.name: c.type for c in table.columns}, **meta}


def _table(table: TableConfig | DynamicConfig, at: str) -> None:
    columns = {c.name: c for c in table.columns}
    declared = f"{at}.columns" if isinstance(table, TableConfig) else "[dynamic] columns"
    if table.identifier_columns and not columns:
        raise ConfigError(f"{at}.identifier_columns needs {declared}: inferred columns are optional, and identifier "
                          "columns must be required")
    for name in table.identifier_columns:
        column = columns.get(name)
        if column is None or not column.required or column.type in ("float", "double"):
            raise ConfigError(f"{at}.identifier_columns entry {name!r} must be a declared column with required = true, "
                              "not float or double (Iceberg's rule for identifier fields)")
    for spec in table.partition_by:
        _partition_field(spec, table, at)
    for term in filter(None, (t.strip() for t in table.sort_order.split(","))):
        name = term.split()[0]
        if columns and name not in columns and not name.startswith("_kafka_"):
            raise ConfigError(f"{at}.sort_order names {name!r}, which is not a declared column")
    if isinstance(table, TableConfig) and bool(table.route_field) != bool(table.route):
        raise ConfigError(f"{at}.route_field and {at}.route go together: the table takes records whose value at "
                          "route_field fully matches route")
    if table.changes is not None:
        _keyed(table, at)


def _partition_field(spec: PartitionField, table: TableConfig | DynamicConfig, at: str) -> None:
    entry = f"{at}.partition_by entry {str(spec)!r}"
    known = {c.name: c.type for c in table.columns}
    if table.columns and spec.source not in known:
        raise ConfigError(f"{entry}: {spec.source!r} is not a declared column; partition by one of "
                          f"{', '.join(known)}")
    column_type = known.get(spec.source)
    if column_type is not None and not spec.applies_to(column_type):
        raise ConfigError(f"{entry}: {spec.transform}() does not apply to {spec.source!r}, a {column_type} column; "
                          f"it takes {', '.join(spec.takes)}")


def _keyed(table: TableConfig | DynamicConfig, at: str) -> None:
    changes = table.changes
    assert changes is not None
    why = f"{at}.mode = \"{changes.mode}\""
    if not table.identifier_columns:
        raise ConfigError(f"{why} needs {at}.identifier_columns: the columns that identify a row (each record "
                          "replaces or deletes the row with its values)")
    if not table.metadata_columns:
        raise ConfigError(f"{why} needs metadata_columns = true: the latest change of a key is the one with the "
                          "highest (_kafka_partition, _kafka_offset), also across processes")
    if table.unknown_fields == "evolve":
        raise ConfigError(f"{why} does not evolve the schema yet: set {at}.unknown_fields to \"fail\" or \"ignore\"")
    if isinstance(table, DynamicConfig) and changes.merge == "spark":
        raise ConfigError(f"{at}.merge = \"spark\" is for declared tables ([table] or [[tables]]) for now; tables "
                          "named by the records merge natively")
    top = changes.op[0] if changes.op and not changes.after else None   # cdc.format = "field": the value is the row
    if top is not None and table.columns and top not in {c.name for c in table.columns} \
            and table.unknown_fields == "fail":
        raise ConfigError(f"{at}.cdc.field {'.'.join(changes.op)!r}: the value is the row, so the operation field "
                          f"lands in a column: declare column {top!r} (it keeps each row's last operation), or set "
                          f"{at}.unknown_fields = \"ignore\"")


def _topics(cfg: Config) -> None:
    control, dead = cfg.coordination.control_topic, cfg.dead_letter_topic
    if control in cfg.kafka.topics:
        raise ConfigError(f"kafka.topics lists {control!r}, the pipeline's control topic; it carries frazil's own "
                          "commit events, not records")
    if dead in cfg.kafka.topics:
        raise ConfigError(f"kafka.topics lists {dead!r}, the pipeline's dead-letter topic: its records would come "
                          "back as bad records; give pipeline.dead_letter_topic another name")


def _maintenance(cfg: Config) -> None:
    m = cfg.maintenance
    # A written data file waits for its commit for at most outage_timeout_s (then frazil stops, and
    # the transaction log commits it on restart before maintenance runs): it must never look orphaned.
    floor = cfg.outage_timeout_s + 2 * cfg.commit_interval_s
    if m.orphan_min_age_s <= floor:
        raise ConfigError(
            f"maintenance.orphan_min_age_s ({m.orphan_min_age_s:g}) must be greater than pipeline.outage_timeout_s "
            f"plus two commit intervals ({floor:g}): a data file written but not yet committed would be deleted")
    for table in cfg.tables:
        known = _known(table)
        for term in filter(None, m.sort_order.split(",")):
            name = term.split()[0]
            if table.columns and name not in known:
                raise ConfigError(f"maintenance.sort_order names {name!r}, which is not a column of {table.name}; "
                                  f"use one of {', '.join(sorted(known))}")


def _avro(cfg: Config) -> None:
    """Avro values: routing by value, inferred schemas and keyed tables need JSON values (for now)."""
    fmt = cfg.values.format
    for name, t in [*((f"table {t.name}", t) for t in cfg.tables), *(("[dynamic]", d) for d in [cfg.dynamic] if d)]:
        if t.changes is not None:
            raise ConfigError(f"{name}: mode = {t.changes.mode!r} reads JSON values for now; with values.format = "
                              f"{fmt!r} use mode = \"append\"")
    for t in cfg.tables:
        if t.route_field:
            raise ConfigError(f"table {t.name}: route_field reads JSON values; with values.format = {fmt!r} "
                              "route by topic (topics = ...)")
        if not t.columns:
            raise ConfigError(f"table {t.name}: with values.format = {fmt!r} declare its columns (schemas are "
                              "inferred from JSON values only); unknown_fields = \"evolve\" then adds what the "
                              "writer schemas have")
    if cfg.dynamic is not None and (cfg.dynamic.fields or not cfg.dynamic.columns):
        raise ConfigError(f"[dynamic] with values.format = {fmt!r} must name tables by {{topic}} only and declare "
                          "its columns")
    if fmt == "avro":
        problem = avro_schema_problem(Path(cfg.values.schema_file))
        if problem:
            raise ConfigError(f"values.schema_file {cfg.values.schema_file}: {problem}")


def avro_schema_problem(path: Path) -> str | None:
    """What is wrong with the writer schema in ``path`` (None: a valid Avro record schema)."""
    try:
        schema = json.loads(path.read_text())
    except OSError as exc:
        return exc.strerror or str(exc)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"the Avro schema is not JSON: {exc}"
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return f"the Avro schema of a record value must be a record (got {json.dumps(schema)[:100]})"
    import fastavro  # a tenth of a second; JSON pipelines never need it

    try:
        fastavro.parse_schema(schema, _write_hint=False)
    except Exception as exc:  # noqa: BLE001 - fastavro's parse errors have no common base
        return f"not a valid Avro schema: {exc}"
    return None
