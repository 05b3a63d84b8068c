"""Rules of the file as a whole, checked once it is read: a table's keys against its columns,
sections against each other, the catalog against what this install can load, the Avro schema
file. Offline: nothing here connects anywhere. Each error names the keys and the fix."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING

from frazil.config.models import AVRO_FORMATS, CatalogConfig, Config
from frazil.config.tables import DEBEZIUM, DynamicConfig, TableConfig
from frazil.config.types import META_COLUMN_TYPES, ColumnType, PartitionField
from frazil.errors import ConfigError

if TYPE_CHECKING:
    from frazil import _native

# pyiceberg 0.12's catalog types (pyiceberg.catalog.CatalogType; a unit test keeps the two the
# same), with the modules each needs beyond pyiceberg itself and what installs them: frazil's own
# extra where frazil has one (tested here), else pyiceberg's
CATALOG_TYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "sql": (("sqlalchemy",), "pyiceberg[sql-sqlite]"), "in-memory": (("sqlalchemy",), "pyiceberg[sql-sqlite]"),
    "rest": ((), ""), "hive": (("thrift",), "frazil[hive]"), "glue": (("boto3",), "frazil[glue]"),
    "dynamodb": (("boto3",), "pyiceberg[dynamodb]"), "bigquery": (("google.cloud.bigquery",), "pyiceberg[bigquery]")}
# the catalogs Spark (maintenance, bulk writes) shares, and the SQL catalogs' databases (spark/session.py)
SPARK_CATALOGS = ("sql", "rest", "glue", "hive")
SPARK_DATABASES = ("sqlite", "postgresql")
# SQLAlchemy drivers whose Python module has another name
_DRIVER_MODULES = {"pysqlite": "sqlite3", "mysqldb": "MySQLdb", "mariadbconnector": "mariadb"}


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
        formats = _formats(cfg, at, table)
        _table(table, at, from_writer=any(f in AVRO_FORMATS for f in formats))
        _transforms(table, at, formats)
        name = f"table {table.name}" if isinstance(table, TableConfig) else "[dynamic]"
        for fmt in formats:
            if fmt in AVRO_FORMATS:
                _avro(name, table, fmt)
            elif fmt != "json":
                _json_schema(name, table, fmt)
    _topics(cfg)
    _maintenance(cfg)
    if "avro" in cfg.values.formats:
        problem = avro_schema_problem(Path(cfg.values.schema_file))
        if problem:
            raise ConfigError(f"values.schema_file {cfg.values.schema_file}: {problem}")
    if "protobuf" in cfg.values.formats:
        problem = proto_file_problem(Path(cfg.values.schema_file), cfg.values.message)
        if problem:
            raise ConfigError(f"values.schema_file {cfg.values.schema_file}: {problem}")
    _catalog(cfg.catalog, maintenance=cfg.maintenance.enabled)


def _known(table: TableConfig | DynamicConfig) -> dict[str, ColumnType]:
    """The table's columns by name when they are declared, the Kafka metadata columns with them."""
    meta = META_COLUMN_TYPES if table.metadata_columns else {}
    headers = {h.name: h.column_type for h in table.header_columns}
    headers.update({k.name: k.column_type for k in table.key_columns})
    if table.headers_column:
        headers[table.headers_column] = ColumnType("map<string, binary>")
    return {**{c.name: c.type for c in table.columns}, **headers, **meta}


def _declared(known: dict[str, ColumnType], path: str) -> ColumnType | None:
    """The declared type at ``path``: a column, or a field nested in struct columns (``meta.at``)."""
    top, _, rest = path.partition(".")
    column = known.get(top)
    return column.at(rest) if column is not None and rest else column


def _table(table: TableConfig | DynamicConfig, at: str, *, from_writer: bool) -> None:
    """``from_writer``: a table without columns is created from its first record's writer schema
    (Avro), which names the identifier columns' types; else a keyed table's from the schema of
    Kafka Connect's JSON envelope (checked when it is made), and an append table's columns are
    inferred from JSON."""
    columns = {c.name: c for c in table.columns}
    declared = f"{at}.columns" if isinstance(table, TableConfig) else "[dynamic] columns"
    if table.identifier_columns and not columns and not from_writer and table.changes is None \
            and not table.connect_envelope:
        raise ConfigError(f"{at}.identifier_columns needs {declared}: inferred columns are optional, and identifier "
                          "columns must be required")
    for name in table.identifier_columns if columns else ():   # a writer schema's are checked at creation
        column = columns.get(name)
        if column is None or not column.required or column.type in ("float", "double") or column.type.nested:
            raise ConfigError(f"{at}.identifier_columns entry {name!r} must be a declared column with required = true, "
                              "not float, double, struct, list or map (Iceberg's rule for identifier fields)")
    for spec in table.partition_by:
        _partition_field(spec, table, at)
    for term in filter(None, (t.strip() for t in table.sort_order.split(","))):
        name = term.split()[0]
        if columns and name not in _known(table):
            raise ConfigError(f"{at}.sort_order names {name!r}, which is not a declared column")
    if isinstance(table, TableConfig) and bool(table.route_field) != bool(table.route):
        raise ConfigError(f"{at}.route_field and {at}.route go together: the table takes records whose value at "
                          "route_field fully matches route")
    if table.changes is not None:
        _keyed(table, at)
    _headers(table, at)
    if table.connect_envelope and table.changes is not None:
        raise ConfigError(f"{at}.connect_envelope is for append tables; a keyed table with mode = \"cdc\" reads "
                          f"Kafka Connect's JSON envelope through {at}.cdc.unwrap_envelope (on by default), and one "
                          "with mode = \"upsert\" cannot read it yet")
    if table.connect_envelope:
        paths = ([table.route_field] if isinstance(table, TableConfig) and table.route_field else []) + \
            (list(table.fields) if isinstance(table, DynamicConfig) else [])
        for path in paths:
            if path[0] != "payload":
                raise ConfigError(f"{at} reads the value's field {'.'.join(path)!r}, and with connect_envelope = "
                                  "true a value is {\"schema\", \"payload\"}: routes read the value as sent, so name "
                                  f"the row's field inside the payload: \"payload.{'.'.join(path)}\"")
    if table.connect_envelope and from_writer:
        raise ConfigError(f"{at}.connect_envelope reads JSON values (Kafka Connect's JsonConverter with "
                          "schemas.enable=true); with values.format = \"avro\" or \"avro-confluent\" leave it out")


def _headers(table: TableConfig | DynamicConfig, at: str) -> None:
    """Header and key columns: on append tables, each name once among the table's columns."""
    keys = [k.name for k in table.key_columns]
    names = [h.name for h in table.header_columns] + ([table.headers_column] if table.headers_column else []) + keys
    if not names:
        return
    which = " and ".join(f"{at}.{k}" for k, given in (("header_columns", table.header_columns),
                                                      ("headers_column", table.headers_column),
                                                      ("key_columns", keys)) if given)
    one = " and " not in which
    if table.changes is not None:
        raise ConfigError(f"{which} {'is' if one else 'are'} for append tables; a keyed table's row is its change's")
    declared = [c.name for c in table.columns]
    for name in sorted({n for n in names if names.count(n) > 1 or n in declared}):
        raise ConfigError(f"{at}: column {name!r} is named more than once among columns, header_columns, "
                          "headers_column and key_columns; give each column its own name")


def _partition_field(spec: PartitionField, table: TableConfig | DynamicConfig, at: str) -> None:
    entry = f"{at}.partition_by entry {str(spec)!r}"
    if spec.source in META_COLUMN_TYPES and not table.metadata_columns:
        raise ConfigError(f"{entry}: {spec.source} is a Kafka metadata column, and this table has metadata_columns "
                          f"= false; set {at}.metadata_columns = true or partition by a declared column")
    known = _known(table)
    column_type = _declared(known, spec.source)
    if table.columns and column_type is None:
        if "." in spec.source:
            raise ConfigError(f"{entry}: {spec.source!r} is not a field of a declared struct column (a nested "
                              "field is named by its path through struct columns, never inside a list or a map)")
        raise ConfigError(f"{entry}: {spec.source!r} is not a declared column; partition by one of "
                          f"{', '.join(known)}")
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
    if table.unknown_fields == "evolve" and changes.merge == "spark":
        raise ConfigError(f"{at}.merge = \"spark\" does not evolve the schema yet: set {at}.unknown_fields to "
                          "\"fail\" or \"ignore\", or merge = \"native\"")
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


def _formats(cfg: Config, at: str, table: TableConfig | DynamicConfig) -> tuple[str, ...]:
    """The value formats ``table``'s topics may have: one for a declared table (its buffer reads
    one); several for ``[dynamic]`` only when each of its tables is named by one whole topic."""
    formats = cfg.formats_of(table)
    if len(formats) == 1:
        return formats
    listed = "the topics it takes" if cfg.kafka.topics else "kafka.topic_pattern, its topics regex"
    if isinstance(table, TableConfig):
        raise ConfigError(f"{at} ({table.name}) may take topics of several value formats ({', '.join(formats)}, "
                          f"going by {listed} and [values.topics]): a table's topics share one format; give it a "
                          "topics regex that takes topics of one format (with a topic pattern: the regex of its "
                          "[values.topics] entry, as written there)")
    if "{topic}" not in table.table:
        raise ConfigError(f"[dynamic] may take topics of several value formats ({', '.join(formats)}): its "
                          f"table template {table.table!r} must name each table by its whole topic ({{topic}}), "
                          "so that each table takes one topic's format")
    return formats


def _transforms(table: TableConfig | DynamicConfig, at: str, formats: tuple[str, ...]) -> None:
    """Transforms rewrite an append table's JSON values before they are decoded: not Avro's (decoded
    by their writer schema), not a keyed table's changes or an envelope's rows (for now), and a
    table made or evolved from a registry's schema would take the fields as sent, not as
    transformed."""
    if not table.transforms:
        return
    where = f"{at}.transforms"
    avro = [f for f in formats if f in AVRO_FORMATS]
    if avro:
        raise ConfigError(f"{where} rewrite JSON values before they are decoded; Avro values (values.format = "
                          f"{avro[0]!r}) are decoded by their writer schema: leave transforms out")
    if table.changes is not None:
        raise ConfigError(f"{where}: keyed tables (mode = {table.changes.mode!r}) take no transforms for now; "
                          "leave them out, or make the table an append table")
    if table.connect_envelope:
        raise ConfigError(f"{where}: a table reading Kafka Connect's envelope (connect_envelope) takes no "
                          "transforms for now (its schema, not the transforms, says what its rows are)")
    if table.case_insensitive:
        raise ConfigError(f"{where}: transforms name fields as they are spelled, and case_insensitive lets a field "
                          "spelled otherwise land (a filter would leave such a record out unseen): use one or the "
                          "other")
    schema_made = [f for f in formats if f != "json"]
    if schema_made and (not table.columns or table.unknown_fields == "evolve"):
        raise ConfigError(f"{where}: with values.format = {schema_made[0]!r} the values' schema (the registry's, or "
                          "the .proto file's) makes and evolves a table, and it names the fields as sent, not as "
                          "transformed: declare the table's columns (as the transforms leave the values) and leave "
                          "unknown_fields at \"fail\" or \"ignore\"")
    from frazil import _native  # the transforms run natively: what it cannot run is refused now, not at start

    try:
        _native.transform_values(table.transform_spec or "[]", [])
    except _native.NativeError as exc:
        raise ConfigError(f"{where}: {exc} (the native regex engine has no look-around or back-references)") from None


def _json_schema(name: str, t: TableConfig | DynamicConfig, fmt: str) -> None:
    """JSON Schema and Protobuf values in the Confluent wire format: append tables, routed by topic
    (for now). A table without columns is created from the registry's schema of its first record."""
    if t.changes is not None:
        raise ConfigError(f"{name}: keyed tables (mode = {t.changes.mode!r}) read plain JSON or Avro for now; "
                          f"with values.format = {fmt!r} leave mode out (an append table)")
    if t.connect_envelope:
        raise ConfigError(f"{name}.connect_envelope reads Kafka Connect's JSON envelope; values in the Confluent "
                          f"wire format (values.format = {fmt!r}) carry their schema's id instead: leave it out")
    _by_topic(name, t, fmt, "plain JSON values for now")


def _by_topic(name: str, t: TableConfig | DynamicConfig, fmt: str, reads: str) -> None:
    """Values in ``fmt`` route by topic: a route field or a template's value field reads ``reads``."""
    if isinstance(t, TableConfig) and t.route_field:
        raise ConfigError(f"{name}: route_field reads {reads}; with values.format = {fmt!r} route by topic "
                          "(topics = ...)")
    if isinstance(t, DynamicConfig) and t.fields:
        raise ConfigError(f"[dynamic] with values.format = {fmt!r} must name tables by {{topic}} only (the "
                          f"placeholders of value fields read {reads})")


def _avro(name: str, t: TableConfig | DynamicConfig, fmt: str) -> None:
    """Avro values: routing by value, the staging-table merge and operation fields other than
    Debezium's need JSON values (for now). A table without columns is created from the writer
    schema of its first record."""
    changes = t.changes
    if changes is not None and changes.op and (changes.op, changes.after, changes.before) != (
            DEBEZIUM["op"], DEBEZIUM["after"], DEBEZIUM["before"]):
        raise ConfigError(f"{name}: with values.format = {fmt!r}, mode = \"cdc\" reads Debezium's envelope "
                          "(cdc.format = \"debezium\"); an operation field of the row (cdc.format = \"field\") "
                          "needs JSON values for now")
    if changes is not None and changes.merge == "spark":
        raise ConfigError(f"{name}: merge = \"spark\" reads JSON values for now; with values.format = {fmt!r} "
                          "use merge = \"native\"")
    _by_topic(name, t, fmt, "JSON values")


def compile_plain(path: Path, message: str) -> tuple[_native.ProtoSchemas, str, list[int]]:
    """The schema of plain Protobuf values of type ``message`` ("": the first), from ``path``: a
    ``.proto`` source file, or any other name a descriptor set (``protoc --include_imports
    --descriptor_set_out``, ``buf build -o``). The compiled schemas, the message's full name and
    indexes. OSError or UnicodeDecodeError when the file cannot be read, NativeError when it does
    not compile or has no such message."""
    from frazil import _native  # the compiler is native; a JSON pipeline's config check never loads it

    schemas = _native.ProtoSchemas()
    if path.suffix == ".proto":
        schemas.register(0, path.read_text())
    else:
        schemas.register_descriptor_set(path.read_bytes(), message)
    name, indexes = schemas.read_plain(message)
    return schemas, name, indexes


def proto_file_problem(path: Path, message: str) -> str | None:
    """What is wrong with a ``.proto`` file or descriptor set for plain Protobuf values of type
    ``message``, if anything."""
    from frazil import _native

    try:
        compile_plain(path, message)
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read ({exc})"
    except _native.NativeError as exc:
        return str(exc)
    return None


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


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:   # a parent package is missing
        return False


def _catalog(catalog: CatalogConfig, *, maintenance: bool) -> None:
    props = catalog.properties
    if "py-catalog-impl" in props:
        module = props["py-catalog-impl"].rpartition(".")[0]
        if "type" in props or not module or not _installed(module):
            raise ConfigError(f"catalog.properties.py-catalog-impl {props['py-catalog-impl']!r} must name a class in "
                              "an installed module (\"package.module.Class\"), and leave out catalog.properties.type")
        kind = ""
    else:
        kind = props.get("type", "sql").lower()
        if kind not in CATALOG_TYPES:
            raise ConfigError(f"catalog.properties.type {props.get('type')!r} is not a catalog type pyiceberg knows; "
                              f"use one of {', '.join(CATALOG_TYPES)}")
        modules, extra = CATALOG_TYPES[kind]
        missing = [m for m in modules if not _installed(m)]
        if missing:
            raise ConfigError(f"catalog.properties.type = {kind!r} needs {', '.join(missing)}, which this install "
                              f"lacks: pip install '{extra}'")
    if maintenance and kind not in SPARK_CATALOGS:
        raise ConfigError(f"catalog.properties.type = {kind or props['py-catalog-impl']!r}: Spark maintenance shares "
                          "\"sql\" (SQLite, PostgreSQL), \"rest\", \"glue\" and \"hive\" catalogs only; set "
                          "[maintenance] enabled = false to ingest into this catalog (and maintain its tables with its "
                          "own tools)")
    if kind == "sql":
        _sql_uri(props["uri"], maintenance=maintenance)
    if kind == "rest" and props.get("rest.sigv4-enabled", "").lower() == "true" and not _installed("boto3"):
        raise ConfigError("catalog.properties.rest.sigv4-enabled = \"true\": pyiceberg signs REST requests with "
                          "botocore, which this install lacks: pip install 'frazil[glue]'")
    if kind == "glue" and maintenance:
        _glue_for_spark(props)


# pyiceberg's Glue settings that Iceberg's Java GlueCatalog (Spark maintenance) does not read: with
# them, the two engines would use another region or another identity
GLUE_PYICEBERG_ONLY = ("glue.region", "glue.profile-name", "glue.access-key-id", "glue.secret-access-key",
                       "glue.session-token", "client.profile-name", "client.access-key-id", "client.secret-access-key",
                       "client.session-token")


def _glue_for_spark(props: dict[str, str]) -> None:
    """A Glue catalog Spark shares: the region as ``client.region`` (both engines read it), the
    credentials from the AWS default chain (both engines read it), never pyiceberg-only keys."""
    given = [k for k in GLUE_PYICEBERG_ONLY if k in props]
    if given:
        raise ConfigError(f"catalog.properties {', '.join(given)}: only pyiceberg reads these, Spark maintenance "
                          "would use another region or identity; set the region as \"client.region\" and give the "
                          "credentials through the AWS default chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a "
                          "profile in AWS_PROFILE, or the instance role), which both engines read")


def _sql_uri(uri: str, *, maintenance: bool) -> None:
    """A SQL catalog's URI names a database SQLAlchemy knows and a driver this install has (pyiceberg
    opens it with SQLAlchemy's synchronous engine)."""
    from sqlalchemy.engine import make_url  # half a second; pyiceberg's SQL catalog imports it anyway
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    scheme = uri.split("://", 1)[0] if "://" in uri else uri
    try:
        dialect = make_url(uri).get_dialect()
        driver = _DRIVER_MODULES.get(dialect.driver, dialect.driver)
        usable = not getattr(dialect, "is_async", False) and _installed(driver)
        backend = make_url(uri).get_backend_name()
    except (ArgumentError, NoSuchModuleError, ValueError):
        usable, backend = False, ""
    if not usable:
        loadable = [s for s in ("sqlite", "postgresql", "postgresql+psycopg", "postgresql+psycopg2",
                                "postgresql+pg8000", "mysql+pymysql") if _sql_loadable(s)]
        raise ConfigError(f"catalog.properties.uri: {scheme!r} is not a database SQLAlchemy can open with the drivers "
                          f"installed here; use one of {', '.join(s + '://' for s in loadable)} (e.g. "
                          "\"postgresql+psycopg://user:password@host:5432/db\"), or type = \"rest\" for a REST catalog")
    if maintenance and backend not in SPARK_DATABASES:
        raise ConfigError(f"catalog.properties.uri: {scheme!r}: Spark maintenance shares SQL catalogs on SQLite and "
                          "PostgreSQL only; use one of those, or set [maintenance] enabled = false")


def _sql_loadable(scheme: str) -> bool:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import NoSuchModuleError

    try:
        dialect = make_url(f"{scheme}://").get_dialect()
    except NoSuchModuleError:
        return False
    return not getattr(dialect, "is_async", False) and _installed(_DRIVER_MODULES.get(dialect.driver, dialect.driver))
