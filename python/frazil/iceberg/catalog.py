"""Catalog loading and table set-up (schema, partition spec, frazil's table properties)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NotInstalledError,
    OAuthError,
    TableAlreadyExistsError,
    UnauthorizedError,
)
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table import Table
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.types import (
    BinaryType,
    IcebergType,
    IntegerType,
    LongType,
    MapType,
    NestedField,
    StringType,
    TimestamptzType,
)

from frazil.config import (
    OP_COLUMN,
    CatalogConfig,
    DynamicConfig,
    MaintenanceConfig,
    TableConfig,
)
from frazil.config.checks import CATALOG_TYPES
from frazil.errors import CatalogUnavailable, ConfigError, TableMissingError, first_line
from frazil.flow import retry
from frazil.iceberg import declared, layout, mutations, offsets
from frazil.iceberg.catalog_errors import (
    _SECRET_KEYS,
    aws_setup_error,
    aws_setup_missing,
    describe,
    masked_uri,
    refused_message,
    wrong_properties,
)
from frazil.iceberg.layout import check_spec_fits, sort_order_for, spec_for
from frazil.iceberg.pyiceberg_patches import install_all

log = logging.getLogger(__name__)

LOAD_BACKOFF = retry.Backoff(0.2, 1.0)   # SQLite catalogs of processes starting together race to create it

META_COLUMNS: tuple[tuple[str, IcebergType, bool], ...] = (
    ("_kafka_topic", StringType(), True),
    ("_kafka_partition", IntegerType(), True),
    ("_kafka_offset", LongType(), True),
    ("_kafka_timestamp", TimestamptzType(), True),
    ("_kafka_key", BinaryType(), False),
)

# Table properties frazil relies on. frazil's own commits never use pyiceberg's retry (it would
# re-apply the offsets without re-checking them, see committer.py). These retries are for the
# other writers: Spark's maintenance commits re-validate on each retry, and with frazil committing
# every few seconds they lose the compare-and-swap often (Iceberg's default is 4 retries).
PARQUET_CODEC = "write.parquet.compression-codec"
REQUIRED_PROPERTIES = {"commit.retry.num-retries": "20", "commit.retry.min-wait-ms": "50"}
# Set when a table has no say of its own. Every append adds a manifest, and every commit writes
# the manifest list naming all of them: without merging, a commit's cost grows with the commits
# since the last manifest rewrite (an hourly maintenance run lets thousands pile up). Merged once
# 16 small ones are there, as Iceberg's own appends do (at 100 by default): the manifest list
# stays short, and a merge rewrites the live data files' entries, which compaction keeps few.
MANIFEST_MERGE = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "16"}

def shown_properties(cfg: CatalogConfig) -> dict[str, str]:
    """The catalog properties as they may be printed: secrets masked (check-config, status)."""
    return {k: "***" if _SECRET_KEYS.search(k) else (masked_uri(v) if k == "uri" else v)
            for k, v in sorted(cfg.properties.items())}


def load(cfg: CatalogConfig, *, attempts: int = 5, busy_timeout_s: float | None = None) -> Catalog:
    """Load the catalog; for the embedded SQLite default, create its folders first.
    ``attempts``: SQLite catalogs are retried (processes starting together race to create its
    tables). ``busy_timeout_s``: how long a SQLite statement waits for a lock (sqlite3's default is
    5 s per statement); one-shot commands fail fast instead of waiting out an outage."""
    install_all()   # raises on a pyiceberg release frazil's changes to it were not tested with
    props = dict(cfg.properties)
    if busy_timeout_s is not None and props.get("uri", "").startswith("sqlite:") and "?" not in props["uri"]:
        props["uri"] += f"?timeout={busy_timeout_s:g}"
    for key, prefix in (("uri", "sqlite:///"), ("warehouse", "file://")):
        value = props.get(key, "")
        if value.startswith(prefix):
            path = Path(value[len(prefix):].split("?", 1)[0])
            folder = path.parent if key == "uri" else path
            _writable(cfg, key, folder, path if key == "uri" else None)
    for attempt in retry.attempts(attempts, LOAD_BACKOFF):
        try:
            catalog = load_catalog(cfg.name, **props)
            if props.get("uri", "").startswith("sqlite:") and cfg.sqlite_journal == "wal":
                _write_ahead(cfg, catalog)
            return catalog
        except wrong_properties() as exc:
            raise ConfigError(f"catalog {cfg.name} ({describe(cfg)}) cannot be loaded: {first_line(exc)}; check the "
                              "[catalog] properties (docs/configuration.md)") from None
        except NotInstalledError:   # a client library the catalog type needs (config check names it too)
            extra = CATALOG_TYPES.get(props.get("type", "sql").lower(), ((), ""))[1]
            raise ConfigError(f"catalog {cfg.name} ({describe(cfg)}) cannot be loaded: the client library of its "
                              f"type is not installed; pip install '{extra or 'pyiceberg'}'") from None
        except aws_setup_missing() as exc:
            raise aws_setup_error(cfg, exc) from None
        except (OAuthError, UnauthorizedError, ForbiddenError) as exc:   # an answer, not an outage
            raise ConfigError(refused_message(cfg, exc)) from None
        except Exception as exc:  # noqa: BLE001 - processes starting together race to create SQLite's tables
            if attempt == attempts or props.get("type") != "sql":
                raise CatalogUnavailable(f"catalog {cfg.name} ({describe(cfg)}) cannot be reached: "
                                         f"{type(exc).__name__}: {first_line(exc)}. Check that it is up (or not "
                                         "locked by another process) and the [catalog] properties") from None
            log.warning("loading catalog %s failed (%s: %s); retrying", cfg.name, type(exc).__name__,
                        str(exc).splitlines()[0][:200])
    raise AssertionError("unreachable")


def _write_ahead(cfg: CatalogConfig, catalog: Catalog) -> None:
    """A SQLite catalog's database in write-ahead-log mode: each commit is one fsync of the log
    instead of the rollback journal's several (about 11 ms a commit here against 2), and still
    durable (SQLite's default synchronous = FULL syncs the log at every commit). The mode is kept
    in the file, so one switch serves every process and tool that opens it. A database another
    process holds in a transaction cannot switch now: it switches at a later start."""
    engine = getattr(catalog, "engine", None)
    if engine is None:
        return
    try:
        with engine.connect() as conn:
            mode = conn.exec_driver_sql("PRAGMA journal_mode=WAL").scalar()
    except Exception as exc:  # noqa: BLE001 - busy: it stays as it is, and works as it did
        log.info("catalog %s: SQLite journal mode left as it is (%s: %s)", cfg.name, type(exc).__name__,
                 first_line(exc))
        return
    if mode != "wal":
        log.info("catalog %s: SQLite keeps its %s journal mode", cfg.name, mode)


def _writable(cfg: CatalogConfig, key: str, folder: Path, database: Path | None) -> None:
    """A local catalog's folder (made if missing) and database file must be writable by this
    process: a read-only one is a configuration error (exit status 2) naming the path, not an
    outage (SQLite answers "attempt to write a readonly database" only once a table is made)."""
    where = f"catalog {cfg.name}: [catalog] properties.{key}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot create {folder} ({exc.strerror}); make it writable by this user, or "
                          "point it at a folder that is") from None
    for path in (folder, *([database] if database is not None and database.exists() else [])):
        if not os.access(path, os.W_OK | (os.X_OK if path.is_dir() else 0)):
            raise ConfigError(f"{where}: {path} is not writable by this user (uid {os.getuid()}); frazil writes "
                              "the catalog's database and the tables' files there. Fix its permissions or point "
                              "it at a folder that is writable")


def staging(table: TableConfig) -> bool:
    """Whether ``table`` is a staging table (``merge = "spark"``: changes, merged into another table)."""
    return table.changes is not None and bool(table.changes.target)


def header_columns(table: TableConfig | DynamicConfig) -> tuple[tuple[str, IcebergType, bool], ...]:
    """The columns a table's records' headers fill, as ``(name, type, required)`` like
    ``META_COLUMNS`` (the map's key and value ids are placeholders: a new table's are assigned
    afresh)."""
    named = [(h.name, declared.PRIMITIVES[h.type], False) for h in table.header_columns]
    if table.headers_column:
        named.append((table.headers_column, MapType(_MAP_KEY_ID, StringType(), _MAP_KEY_ID + 1, BinaryType(),
                                                    value_required=False), False))
    return tuple(named)


def key_columns(table: TableConfig | DynamicConfig) -> tuple[tuple[str, IcebergType, bool], ...]:
    """The columns a table's records' keys fill, as ``(name, type, required)`` like ``META_COLUMNS``."""
    return tuple((k.name, declared.PRIMITIVES[k.type], False) for k in table.key_columns)


_MAP_KEY_ID = 1 << 30   # far above any counter of a schema being made


def extra_columns(table: TableConfig | DynamicConfig) -> tuple[tuple[str, IcebergType, bool], ...]:
    """The columns a table has beside its values': its header and key columns, then the Kafka
    metadata."""
    return header_columns(table) + key_columns(table) + (META_COLUMNS if table.metadata_columns else ())


def schema_for(table: TableConfig) -> Schema:
    """A new table's schema. A staging table's columns are optional but for the identifier columns
    (a delete holds only its key; the values were checked against the declared columns when they
    were read), and it has the change's operation, ``_frazil_op``."""
    keyed = staging(table)
    nested = declared.placeholder_ids(len(table.columns) + len(extra_columns(table)) + 2)
    fields = [NestedField(i + 1, c.name, declared.iceberg_type(c.type, nested), doc=c.doc,
                          required=c.required and (not keyed or c.name in table.identifier_columns))
              for i, c in enumerate(table.columns)]
    fields += [NestedField(len(table.columns) + i + 1, name, t, required=req)
               for i, (name, t, req) in enumerate(extra_columns(table))]
    if keyed:
        fields.append(NestedField(len(fields) + 1, OP_COLUMN, StringType(), required=True,
                                  doc="the change: u (upsert) or d (delete)"))
    ids = {f.name: f.field_id for f in fields}
    return Schema(*fields, identifier_field_ids=[ids[name] for name in table.identifier_columns])


def maintenance_properties(cfg: MaintenanceConfig) -> dict[str, str]:
    """Table properties that keep metadata bounded when maintenance is on: every commit writes a
    new metadata file, and only the last ``max_snapshots`` of them are kept."""
    if not cfg.enabled:
        return {}
    return {"write.metadata.delete-after-commit.enabled": "true",
            "write.metadata.previous-versions-max": str(cfg.max_snapshots)}


NAME_MAPPING = "schema.name-mapping.default"


def ensure_table(catalog: Catalog, cfg: TableConfig, properties: dict[str, str] | None = None, *,
                 schema: Callable[[], Schema] | None = None,
                 created_with: Callable[[], dict[str, str]] | None = None) -> Table:
    """Load the table, creating it (and its namespace) when missing and ``create`` is on; set
    frazil's required properties and ``properties`` on it. ``schema``: for a new table, the
    schema to create it with (inferred from records) instead of the config's columns;
    ``created_with``: asked after it, more properties for a new table only (in its first
    metadata). A table this call creates gets a name mapping (``schema.name-mapping.default``)."""
    created = False
    try:
        table = catalog.load_table(cfg.name)
    except NoSuchTableError:
        if not cfg.create:
            raise TableMissingError(f"table {cfg.name} does not exist and create is false; create it or set "
                                    "create = true") from None
        namespace = cfg.name.rsplit(".", 1)[0]
        try:
            catalog.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        except Exception:  # several processes starting at once: SQLite's unique key fires
            if not catalog.namespace_exists(namespace):
                raise
        new_schema = schema() if schema is not None else schema_for(cfg)
        check_spec_fits(new_schema, cfg.partition_by, cfg.name)
        try:
            order = sort_order_for(new_schema, cfg.sort_order)
        except ValueError as exc:
            raise ConfigError(f"{cfg.name}: sort_order {cfg.sort_order!r}: {exc}") from None
        try:
            first = {**(properties or {}), **(created_with() if created_with is not None else {})}
            table = catalog.create_table(cfg.name, new_schema, partition_spec=spec_for(new_schema, cfg.partition_by),
                                         sort_order=order, properties=_created_with(new_schema, cfg, first))
            created = True
            log.info("created table %s with %d columns%s, partitioned by %s", cfg.name, len(new_schema.fields),
                     " made from its first records" if schema is not None else "",
                     list(cfg.partition_by) or "nothing")
        except TableAlreadyExistsError:
            table = catalog.load_table(cfg.name)
        except Exception:  # the same race, for the table
            if not catalog.table_exists(cfg.name):
                raise
            table = catalog.load_table(cfg.name)
    missing = [c for c in [m[0] for m in extra_columns(cfg)] + [c.name for c in cfg.columns]
               + ([OP_COLUMN] if staging(cfg) else []) if c not in {f.name for f in table.schema().fields}]
    if missing:
        raise ConfigError(f"table {cfg.name} has no column(s) {', '.join(missing)}; add them to the table or drop "
                          "them from the config")
    fields = {f.name: f for f in table.schema().fields}
    nested = declared.placeholder_ids(1)
    differ = [why for c in cfg.columns if (why := declared.misfit(
        declared.iceberg_type(c.type, nested), fields[c.name].field_type, evolve=cfg.unknown_fields == "evolve",
        path=c.name)) is not None]
    differ += [f"{c.name} is optional in the table but required in the config (nulls would land)" for c in cfg.columns
               if c.required and not fields[c.name].required and cfg.unknown_fields != "evolve"   # evolve relaxes it
               and not (staging(cfg) and c.name not in cfg.identifier_columns)]   # checked when read
    if differ:
        raise ConfigError(f"table {cfg.name}: column types disagree: {'; '.join(differ)}. Make the config say what the "
                          "table holds (frazil never changes a value's type silently)")
    have = sorted(table.schema().identifier_field_names())
    if cfg.identifier_columns and have != sorted(cfg.identifier_columns):
        raise ConfigError(f"table {cfg.name}: identifier columns are {have or 'none'} in the table but "
                          f"{sorted(cfg.identifier_columns)} in the config; make the config say what the table holds")
    if not created:   # a changed partition_by or sort_order: the table's layout evolves to it, once it checked out
        table = layout.keep(lambda: catalog.load_table(cfg.name), cfg)
    wanted = _defaults(table.properties, {**cfg.properties, **REQUIRED_PROPERTIES, **(properties or {}),
                                          **_keyed_properties(table, cfg)})
    if created and NAME_MAPPING not in table.properties:
        # files written without field ids by other tools stay readable: columns are found by name
        wanted[NAME_MAPPING] = create_mapping_from_schema(table.schema()).model_dump_json()
    for attempt in range(5):  # processes starting together race here; the loser re-reads
        wrong = {k: v for k, v in wanted.items() if table.properties.get(k) != v}
        if not wrong:
            return table
        try:
            with table.transaction() as tx:
                tx.set_properties(wrong)
            log.info("set table properties %s on %s", wrong, cfg.name)
        except CommitFailedException:
            if attempt == 4:
                raise
        table = catalog.load_table(cfg.name)
    return table


def _defaults(have: Mapping[str, str], wanted: dict[str, str]) -> dict[str, str]:
    """``wanted`` plus the properties frazil sets where neither the table (``have``) nor the config
    says otherwise."""
    out = dict(wanted)
    if PARQUET_CODEC not in have and PARQUET_CODEC not in out:
        # pyiceberg writes zstd without it; Spark's compaction would write gzip (Iceberg's old default)
        out[PARQUET_CODEC] = "zstd"
    for key, value in MANIFEST_MERGE.items():
        if key not in have and key not in out:
            out[key] = value
    return out


def _created_with(schema: Schema, cfg: TableConfig, properties: dict[str, str] | None) -> dict[str, str]:
    """A new table's properties, all in its first metadata (one catalog commit for a table, not
    two): frazil's own and its defaults, and a name mapping of the schema as the catalog numbers
    it (fresh ids, as ``create_table`` assigns them), so files written without field ids by other
    tools stay readable."""
    mapping = create_mapping_from_schema(assign_fresh_schema_ids(schema)).model_dump_json()
    return {"format-version": "2", **_defaults({}, {**cfg.properties, **REQUIRED_PROPERTIES, **(properties or {})}),
            NAME_MAPPING: mapping}


def _keyed_properties(table: Table, cfg: TableConfig) -> dict[str, str]:
    """A keyed table (mode upsert or cdc) says so in ``frazil.mode`` (every committer, in any
    process, then plans position deletes for it), and Spark's DML on it writes position deletes
    too. A table some run made keyed is never appended to as if it were not."""
    was = table.properties.get(mutations.MODE_PROPERTY)
    if cfg.changes is not None and cfg.changes.target:
        if was in mutations.KEYED_MODES:
            raise ConfigError(f"table {cfg.name} is keyed itself ({mutations.MODE_PROPERTY} = {was}); it cannot be the "
                              f"staging table of {cfg.changes.target}")
        # the merge's DELETE of merged rows must not fail on frazil's appends of newer changes meanwhile
        return {mutations.STAGING_PROPERTY: cfg.changes.target, "write.delete.isolation-level": "snapshot"}
    if cfg.changes is None:
        if was in mutations.KEYED_MODES:
            raise ConfigError(f"table {cfg.name} is keyed ({mutations.MODE_PROPERTY} = {was}: each record replaces the "
                              f"row of its key) but the config says mode = \"append\", which would land every change "
                              f"as another row; set mode = \"{was}\"")
        return {}
    if table.format_version < 2:
        raise ConfigError(f"table {cfg.name} is format version {table.format_version}; mode = {cfg.mode!r} writes "
                          "position deletes, which need version 2 (upgrade it: ALTER TABLE ... SET TBLPROPERTIES "
                          "('format-version' = '2'))")
    return {mutations.MODE_PROPERTY: cfg.mode, **mutations.MERGE_ON_READ}


def dynamic_tables(catalog: Catalog, dynamic: DynamicConfig, pipeline: str) -> list[str]:
    """The existing tables the ``[dynamic]`` template named for ``pipeline``: those it could have
    named (listed in its namespace, or in every namespace when the namespace is a placeholder too)
    that hold the pipeline's offsets. A table of the same shape that another pipeline or engine
    wrote is never taken over (``{topic[1]}.{topic[2]}`` could name any table in the catalog)."""
    namespaces = [dynamic.namespace] if dynamic.namespace else [".".join(ns) for ns in catalog.list_namespaces()]
    names = []
    for namespace in namespaces:
        try:
            identifiers = catalog.list_tables(namespace)
        except NoSuchNamespaceError:
            continue
        for name in (".".join(i) for i in identifiers):
            if not dynamic.matches(name) or BULK_SCRATCH in name:   # a bulk write's scratch table is no target
                continue
            try:
                properties = catalog.load_table(name).properties
            except NoSuchTableError:   # dropped meanwhile
                continue
            if offsets.property_key(pipeline) in properties:
                names.append(name)
    return sorted(names)


BULK_SCRATCH = "__frazil_bulk_"   # names a Spark bulk write's scratch table (spark/bulk.py)


UNIT_KEY = b"frazil.unit"   # field metadata the native decoder reads: the unit of numbers for a timestamp, time, date
# a table property: {column: unit} for a table made from a source's schema that sends those columns
# as numbers (Kafka Connect's JSON envelope: a date as days), read with the declared columns' units
UNITS_PROPERTY = "frazil.column-units"
ROUNDING_KEY = b"frazil.rounding"   # and: round digits past an integer's or decimal's scale (half_even)


def arrow_schema(table: Table, options: Mapping[str, Mapping[bytes, bytes]] | None = None) -> pa.Schema:
    """The Arrow schema the native buffer decodes into: the table's schema, field ids included;
    ``options``: per top-level column, field metadata the native decoder reads (``UNIT_KEY``: the
    unit numbers sent for a timestamp, time or date count; ``ROUNDING_KEY``: round digits past the
    scale)."""
    schema = schema_to_pyarrow(table.schema())
    for name, metadata in (options or {}).items():
        i = schema.get_field_index(name)
        if i < 0:
            continue
        field = schema.field(i)
        schema = schema.set(i, field.with_metadata({**(field.metadata or {}), **metadata}))
    return schema
