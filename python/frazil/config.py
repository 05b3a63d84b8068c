"""The frazil configuration: one TOML file, validated once, frozen.

Every error names the key and says how to fix it. The table in ``docs/configuration.md`` lists
every key; keep the two in step.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frazil.errors import ConfigError

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_TYPES = ("boolean", "int", "long", "float", "double", "string", "binary", "date", "time",
          "timestamp", "timestamptz", "uuid")
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
META_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")
_TRANSFORM = re.compile(r"^(identity|year|month|day|hour|bucket\[(\d+)\]|truncate\[(\d+)\])\((\w+)\)$|^(\w+)$")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    required: bool = False
    doc: str | None = None
    unit: str | None = None    # timestamps: what a number sent for it counts (s, ms, us, ns); None: text only
    rounding: str | None = None   # int, long, decimal: "half_even" rounds digits past the scale; None: refused


TIME_UNITS = ("s", "ms", "us", "ns")
UNKNOWN_FIELDS = ("fail", "ignore", "evolve")
MODES = ("append", "upsert", "cdc")
TOMBSTONES = ("skip", "delete")
CDC_FORMATS = ("debezium", "field")


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSecurity:
    """TLS and SASL for every Kafka client frazil creates. Secrets never appear in ``repr``."""

    protocol: str = "PLAINTEXT"     # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    sasl_mechanism: str = ""        # PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* only)
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    ssl_cafile: str = ""            # the CA bundle the brokers' certificates are checked against ("": the system's)
    ssl_certfile: str = ""          # a client certificate (mutual TLS), with ssl_keyfile
    ssl_keyfile: str = ""
    ssl_key_password: str = field(default="", repr=False)
    ssl_check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def describe(self) -> str:
        """What a person may see (check-config, logs): never a secret."""
        parts = [self.protocol]
        if self.sasl:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username} (password set)")
        if self.tls:
            parts.append(f"CA {self.ssl_cafile or 'system'}" + (f", client cert {self.ssl_certfile}" if self.ssl_certfile else "")
                         + ("" if self.ssl_check_hostname else ", hostname NOT checked"))
        return " ".join(parts)


FETCH_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str
    topics: tuple[str, ...]            # () when ``topic_pattern`` is set
    group_id: str
    auto_offset_reset: str = "earliest"
    max_partition_fetch_bytes: int = 4 * 1024 * 1024   # the most one partition fetch returns: a poll's unit of work
    # the most one fetch response carries, all partitions together: kept under glibc's 32 MiB mmap
    # ceiling so each response's buffers come from reused heap, not freshly mapped (page-faulted) memory
    fetch_max_bytes: int = FETCH_MAX_BYTES
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    client_id: str = "frazil"
    topic_pattern: str = ""            # a regex: every topic it fully matches, also ones created later
    metadata_max_age_ms: int = 30_000  # how often topic metadata is refreshed: new matching topics within this
    exclude_topics: tuple[str, ...] = ()   # never consumed, even when the pattern matches (the control topic)
    security: KafkaSecurity = KafkaSecurity()

    def __post_init__(self) -> None:
        if self.fetch_max_bytes < self.max_partition_fetch_bytes:
            raise ConfigError(f"kafka.fetch_max_bytes ({self.fetch_max_bytes}) is below kafka.max_partition_fetch_bytes "
                              f"({self.max_partition_fetch_bytes}): one fetch could not carry one partition's whole fetch; "
                              "raise fetch_max_bytes or leave it out (it then follows max_partition_fetch_bytes)")

    def takes(self, topic: str) -> bool:
        """Whether ``topic`` is one of the pipeline's source topics."""
        if topic in self.exclude_topics:
            return False
        return topic in self.topics if not self.topic_pattern else re.fullmatch(self.topic_pattern, topic) is not None


@dataclass(frozen=True)
class CatalogConfig:
    name: str
    properties: dict[str, str] = field(repr=False)   # may hold secrets: print shown_properties()


@dataclass(frozen=True)
class ChangesConfig:
    """How a keyed table (``mode = "upsert"`` or ``"cdc"``) reads its records: each record
    replaces or deletes the row of its key (the table's identifier columns), the latest by
    (partition, offset) winning. ``upsert``: every value is the new row. ``cdc``: the value at
    ``op`` names the operation; an upsert's row is at ``after``, a delete's key at ``before``
    (``()``: the value itself). ``tombstones``: what a record with a null value does: ``"delete"``
    deletes the row of its Kafka key, ``"skip"`` counts it and lands nothing."""

    mode: str
    tombstones: str = "skip"
    op: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    upsert_ops: tuple[str, ...] = ()
    delete_ops: tuple[str, ...] = ()
    unwrap_envelope: bool = True     # read through the JSON converter's {"schema", "payload"}
    # "native": frazil commits position deletes itself; "spark": changes land in a staging table
    # (this table's name plus STAGING_SUFFIX, with the offsets) and Spark MERGEs them into the table
    merge: str = "native"
    merge_interval_s: float = 60.0
    merge_min_changes: int = 100_000
    target: str = ""                 # set on a staging table: the table its changes are merged into


STAGING_SUFFIX = "__changes"
OP_COLUMN = "_frazil_op"             # a staging table's change: "u" (upsert) or "d" (delete)


DEBEZIUM: dict[str, Any] = {"op": ("op",), "after": ("after",), "before": ("before",), "upsert_ops": ("c", "r", "u"),
            "delete_ops": ("d",)}


@dataclass(frozen=True)
class TableConfig:
    name: str
    columns: tuple[Column, ...]
    create: bool = True
    metadata_columns: bool = True
    partition_by: tuple[str, ...] = ()
    # Which records the table takes (static routing, docs/configuration.md): all of them unless
    # the topic fully matches ``topics`` and/or the value at ``route_field`` fully matches ``route``.
    topics: str = ""                  # regex on the topic name; "" takes every topic
    route_field: tuple[str, ...] = ()  # dotted path into the value, split; () takes every record
    route: str = ""                   # regex on the route field's value as text
    identifier_columns: tuple[str, ...] = ()   # the table's identifier fields (row identity, for upserts)
    maps: tuple[str, ...] = ()        # with no columns: dotted paths of objects inferred as map<string, V>
    sort_order: str = ""              # the table's sort order when created, e.g. "event_time DESC"
    properties: dict[str, str] = field(default_factory=dict)   # set on the table, created or existing
    # a record field the table has no column for: "fail" (a bad record), "ignore" (dropped, counted)
    # or "evolve" (the table gets the column)
    unknown_fields: str = "fail"
    case_insensitive: bool = False    # a field differing from a column only in case lands in it
    changes: ChangesConfig | None = None   # None: append mode, every record a new row

    @property
    def mode(self) -> str:
        return "append" if self.changes is None else self.changes.mode

    @property
    def routed(self) -> bool:
        return bool(self.topics or self.route_field)


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class DynamicConfig:
    """Dynamic routing: each record goes to the table its ``table`` template names (placeholders
    ``{topic}`` and ``{dotted.path}`` into the value, each value normalised to an identifier),
    created on first use when ``create`` is on, with ``columns`` or a schema inferred from the
    first records."""

    table: str
    topics: str = ""                    # regex on the topic; "" : every topic
    create: bool = True
    columns: tuple[Column, ...] = ()    # () : inferred from the records
    partition_by: tuple[str, ...] = ()
    metadata_columns: bool = True
    maps: tuple[str, ...] = ()          # dotted paths of objects inferred as map<string, V>
    identifier_columns: tuple[str, ...] = ()
    sort_order: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    unknown_fields: str = "fail"
    case_insensitive: bool = False
    changes: ChangesConfig | None = None

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_PLACEHOLDER.findall(self.table)))

    @property
    def fields(self) -> tuple[tuple[str, ...], ...]:
        """The value paths the template reads (``topic`` is the record's topic, not a field)."""
        return tuple(tuple(p.split(".")) for p in self.placeholders if p != "topic")

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
        return TableConfig(name, self.columns, self.create, self.metadata_columns, self.partition_by,
                           identifier_columns=self.identifier_columns, sort_order=self.sort_order,
                           properties=dict(self.properties), maps=self.maps, unknown_fields=self.unknown_fields,
                           case_insensitive=self.case_insensitive, changes=self.changes)


def normalise(value: str) -> str:
    """A placeholder's value as part of an identifier: lower case, anything but letters, digits
    and ``_`` as ``_``. ``"Orders.EU-1"`` gives ``orders_eu_1``."""
    return re.sub(r"[^a-z0-9_]", "_", value.lower())


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 0              # 0: no HTTP endpoint
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    # Flushes of at least this many rows are written by Spark instead of in process (0: never).
    bulk_min_rows: int = 0
    jars: tuple[str, ...] = ()        # empty: fetch the Iceberg runtime and SQLite driver into the cache
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MaintenanceConfig:
    enabled: bool = True
    interval_s: float = 3600.0        # compaction, manifests, position deletes, orphan files
    max_snapshots: int = 100          # expire down to half of this when a commit goes over it
    max_delete_files: int = 64        # rewrite position deletes when commits added this many delete files
    snapshot_max_age_s: float = 86_400.0
    target_file_size_mb: int = 128
    min_input_files: int = 5
    sort_order: str = ""              # e.g. "event_time" or "user_id DESC NULLS LAST"; "" keeps bin-packing
    orphan_min_age_s: float = 259_200.0  # 3 days, Iceberg's own default
    expire_in_process: bool = True    # expiry between full runs without Spark when the history only appended


@dataclass(frozen=True)
class CoordinationConfig:
    mode: str = "single"              # "single": one process; "distributed": many, one coordinator
    control_topic: str = ""           # "" -> frazil-control-<pipeline>
    commit_timeout_s: float = 30.0    # then commit what arrived (partial, no VTTS)


VALUE_FORMATS = ("json", "avro", "avro-confluent")


@dataclass(frozen=True)
class RegistryConfig:
    """A schema registry's Confluent-compatible API (Confluent, Apicurio's ``/apis/ccompat/v7``)."""

    url: str
    username: str = ""
    password: str = field(default="", repr=False)
    ca_file: str = ""               # TLS: the CA bundle to check the registry's certificate with ("": the system's)
    timeout_s: float = 10.0
    max_attempts: int = 5           # per request, on connection errors and 5xx answers


@dataclass(frozen=True)
class ValuesConfig:
    """How record values are encoded (the same for every topic of the pipeline)."""

    format: str = "json"            # "json", "avro" (a plain datum, schema_file) or "avro-confluent" (registry)
    schema_file: str = ""           # format = "avro": the writer schema of every value (.avsc)
    registry: RegistryConfig | None = None   # format = "avro-confluent"

    @property
    def avro(self) -> bool:
        return self.format != "json"


@dataclass(frozen=True)
class Config:
    pipeline: str
    commit_interval_s: float
    max_buffer_records: int
    max_commit_attempts: int
    memory_budget_bytes: int
    outage_timeout_s: float
    txlog_dir: Path
    txlog_fsync: str
    kafka: KafkaConfig
    catalog: CatalogConfig
    tables: tuple[TableConfig, ...]
    on_bad_record: str = "fail"
    metrics: MetricsConfig = MetricsConfig()
    log_level: str = "INFO"
    log_format: str = "text"
    spark: SparkConfig = SparkConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    coordination: CoordinationConfig = CoordinationConfig()
    source: Path | None = field(default=None, compare=False)
    dynamic: DynamicConfig | None = None
    dead_letter_topic: str = ""     # where bad records go with on_bad_record = "dead_letter"
    values: ValuesConfig = ValuesConfig()

    @property
    def table(self) -> TableConfig:
        """The first table: the one table of a ``[table]`` config (commands that act on one table)."""
        if not self.tables:
            raise ConfigError("this needs a table named in the config ([table] or [[tables]]); this pipeline's "
                              "tables are all named by its records ([dynamic])")
        return self.tables[0]

    def table_named(self, name: str) -> TableConfig:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)


class _Section:
    """Reads one TOML table, remembering which keys were used so unknown keys are reported."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"[{path}] must be a table, got {type(data).__name__}")
        self.data, self.path = data, path
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = ..., *, hint: str = "") -> Any:
        self.used.add(name)
        if name not in self.data:
            if default is ...:
                raise ConfigError(f"missing required key {self.key(name)!r}{': ' + hint if hint else ''}")
            return default
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            want = " or ".join(k.__name__ for k in kinds)
            raise ConfigError(f"{self.key(name)} must be {want}, got {value!r}")
        return value

    def positive(self, name: str, kind: type, default: Any) -> Any:
        value = self.get(name, kind, default)
        if value <= 0:
            raise ConfigError(f"{self.key(name)} must be greater than 0, got {value!r}")
        return value

    def section(self, name: str, *, required: bool = True) -> _Section:
        self.used.add(name)
        if name not in self.data:
            if required:
                raise ConfigError(f"missing section [{self.key(name)}]")
            return _Section({}, self.key(name))
        return _Section(self.data[name], self.key(name))

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            where = f"[{self.path}]" if self.path else "the top level"
            raise ConfigError(f"unknown key(s) {', '.join(unknown)} in {where}; see docs/configuration.md for valid keys")


def _secret(s: _Section, name: str, base: Path) -> str:
    """A secret given as ``name`` (in the file), ``name_env`` (an environment variable) or
    ``name_file`` (a file holding it, trailing newline dropped): at most one of the three."""
    given = [k for k in (name, f"{name}_env", f"{name}_file") if k in s.data]
    for k in (name, f"{name}_env", f"{name}_file"):
        s.get(k, str, "")
    if len(given) > 1:
        raise ConfigError(f"give one of {', '.join(s.key(k) for k in given)}, not several")
    if not given:
        return ""
    key = given[0]
    value: str = s.data[key]
    if key.endswith("_env"):
        if value not in os.environ:
            raise ConfigError(f"{s.key(key)} names the environment variable {value!r}, which is not set")
        return os.environ[value]
    if key.endswith("_file"):
        path = (base / value).resolve()
        try:
            return path.read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"{s.key(key)}: cannot read {path}: {exc.strerror}") from None
    return str(value)


def _existing_file(s: _Section, name: str, base: Path) -> str:
    value = s.get(name, str, "")
    if not value:
        return ""
    path = (base / value).resolve()
    if not path.is_file():
        raise ConfigError(f"{s.key(name)} {path} does not exist")
    return str(path)


def _catalog_secrets(props: dict[str, str], base: Path) -> dict[str, str]:
    """``<property>_env`` and ``<property>_file`` give ``<property>`` from an environment variable or
    a file (``uri_env = "CATALOG_URI"`` keeps a database password out of the config file)."""
    section = _Section(props, "catalog.properties")
    out = {}
    for key in props:
        name = key.removesuffix("_env").removesuffix("_file")
        if name != key and name in out:
            continue
        if name != key or any(f"{key}{suffix}" in props for suffix in ("_env", "_file")):
            out[name] = _secret(section, name, base)
        else:
            out[key] = props[key]
    return out


def _kafka_security(k: _Section, base: Path) -> KafkaSecurity:
    protocol = k.get("security_protocol", str, "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"kafka.security_protocol {protocol!r} must be one of {', '.join(SECURITY_PROTOCOLS)}")
    mechanism = k.get("sasl_mechanism", str, "").upper()
    username = k.get("sasl_username", str, "")
    password = _secret(k, "sasl_password", base)
    if protocol.startswith("SASL_"):
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"kafka.security_protocol = {protocol!r} needs kafka.sasl_mechanism, one of "
                              f"{', '.join(SASL_MECHANISMS)} (got {mechanism or 'none'})")
        if not username or not password:
            raise ConfigError(f"kafka.security_protocol = {protocol!r} needs kafka.sasl_username and a password "
                              "(kafka.sasl_password_env or kafka.sasl_password_file; sasl_password in the file works "
                              "but puts the secret there)")
    elif mechanism or username or password:
        given = ", ".join(k.key(n) for n in sorted(k.data) if n.startswith("sasl_"))
        raise ConfigError(f"{given}: kafka.sasl_* settings need security_protocol = \"SASL_SSL\" or "
                          f"\"SASL_PLAINTEXT\" (this is {protocol!r}); without it they would be ignored")
    cafile, certfile = _existing_file(k, "ssl_cafile", base), _existing_file(k, "ssl_certfile", base)
    keyfile, key_password = _existing_file(k, "ssl_keyfile", base), _secret(k, "ssl_key_password", base)
    check_hostname = k.get("ssl_check_hostname", bool, True)
    tls = protocol in ("SSL", "SASL_SSL")
    if not tls and any(n.startswith("ssl_") for n in k.data):
        given = ", ".join(k.key(n) for n in sorted(k.data) if n.startswith("ssl_"))
        raise ConfigError(f"{given}: kafka.ssl_* settings need security_protocol = \"SSL\" or \"SASL_SSL\" (this "
                          f"is {protocol!r}); without it they would be ignored")
    if bool(certfile) != bool(keyfile):
        raise ConfigError("kafka.ssl_certfile and kafka.ssl_keyfile go together (a client certificate and its key)")
    return KafkaSecurity(protocol, mechanism, username, password, cafile, certfile, keyfile, key_password,
                         check_hostname)


def _column_type(value: str, key: str) -> str:
    t = value.strip().lower()
    if t in _TYPES:
        return t
    m = _DECIMAL.match(t)
    if m and 1 <= int(m.group(1)) <= 38 and int(m.group(2)) <= int(m.group(1)):
        return f"decimal({m.group(1)}, {m.group(2)})"
    raise ConfigError(f"{key} has unknown type {value!r}; use one of {', '.join(_TYPES)} or decimal(P, S)")


def _columns(raw: Any, key: str) -> tuple[Column, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{key} must be a non-empty array of tables like {{name = \"id\", type = \"long\"}}")
    columns, seen = [], set()
    for i, item in enumerate(raw):
        s = _Section(item, f"{key}[{i}]")
        name = s.get("name", str)
        if not name or name.startswith(("_kafka_", "_frazil_")):
            raise ConfigError(f"{s.key('name')} {name!r} is empty or uses a reserved prefix (_kafka_, _frazil_)")
        if name in seen:
            raise ConfigError(f"{s.key('name')}: column {name!r} is declared twice")
        seen.add(name)
        column_type = _column_type(s.get("type", str), s.key("type"))
        unit = s.get("unit", str, None)
        if unit is not None and (column_type not in ("timestamp", "timestamptz") or unit not in TIME_UNITS):
            raise ConfigError(f"{s.key('unit')} {unit!r}: a unit is for timestamp and timestamptz columns, one of "
                              f"{', '.join(TIME_UNITS)} (what a number sent for the column counts since the epoch)")
        rounding = s.get("rounding", str, None)
        if rounding is not None and (rounding != "half_even"
                                     or not (column_type in ("int", "long") or column_type.startswith("decimal"))):
            raise ConfigError(f"{s.key('rounding')} {rounding!r}: rounding is \"half_even\", for int, long and decimal "
                              "columns (without it a fraction for an integer, or digits past a decimal's scale, make "
                              "a bad record)")
        columns.append(Column(name, column_type, s.get("required", bool, False), s.get("doc", str, None), unit,
                              rounding))
        s.finish()
    return tuple(columns)


# Which column types each partition transform accepts (Iceberg spec, "Partition Transforms").
_TIME = ("date", "timestamp", "timestamptz")
_TRANSFORM_TYPES = {
    "year": _TIME, "month": _TIME, "day": _TIME, "hour": ("timestamp", "timestamptz"),
    "bucket": ("int", "long", "decimal", "date", "time", "timestamp", "timestamptz", "string", "uuid", "binary"),
    "truncate": ("int", "long", "decimal", "string", "binary"),
}


def _partition_by(raw: list[Any], key: str, columns: tuple[Column, ...]) -> tuple[str, ...]:
    """Each transform's shape and width; with declared ``columns``, its column and type too
    (inferred columns are checked when the table is created)."""
    types = {c.name: c.type for c in columns}
    out = []
    for spec in raw:
        m = _TRANSFORM.match(spec.strip()) if isinstance(spec, str) else None
        source = (m.group(4) or m.group(5)) if m else None
        if not m or (columns and source not in types):
            raise ConfigError(
                f"{key} entry {spec!r} is not a partition transform"
                + (" on a declared column" if columns else "") + "; use e.g. "
                "\"day(event_time)\", \"bucket[16](user_id)\", \"truncate[4](name)\" or \"country\""
            )
        assert source is not None
        transform = m.group(1).split("[")[0] if m.group(1) else "identity"
        width = m.group(2) or m.group(3)
        if width is not None and int(width) < 1:
            raise ConfigError(f"{key} entry {spec!r}: {transform}[N] needs N >= 1")
        column_type = types[source].split("(")[0] if columns else None
        allowed = _TRANSFORM_TYPES.get(transform)
        if column_type is not None and allowed is not None and column_type not in allowed:
            raise ConfigError(f"{key} entry {spec!r}: {transform}() does not apply to {source!r}, a {types[source]} "
                              f"column; it takes {', '.join(allowed)}")
        out.append(spec.strip())
    return tuple(out)


def _regex(s: _Section, name: str, example: str) -> str:
    value: str = s.get(name, str, "")
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigError(f"{s.key(name)} {value!r} is not a valid regular expression ({exc}); e.g. {example}") from None
    return value


_SORT = re.compile(r"^\w+( (ASC|DESC))?( NULLS (FIRST|LAST))?(, *\w+( (ASC|DESC))?( NULLS (FIRST|LAST))?)*$", re.IGNORECASE)


def _layout(s: _Section, columns: tuple[Column, ...]) -> tuple[tuple[str, ...], str, dict[str, str]]:
    """identifier_columns, sort_order and properties of a table (checked against ``columns``
    when they are known; an inferred schema cannot have identifier columns: they must be required)."""
    types = {c.name: c for c in columns}
    identifiers = s.get("identifier_columns", list, [])
    for name in identifiers:
        column = types.get(name) if isinstance(name, str) else None
        if column is None or not column.required or column.type in ("float", "double"):
            raise ConfigError(f"{s.key('identifier_columns')} entry {name!r} must be a declared column with required "
                              "= true, not float or double (Iceberg's rule for identifier fields)")
    sort_order = s.get("sort_order", str, "").strip()
    if sort_order and not _SORT.match(sort_order):
        raise ConfigError(f"{s.key('sort_order')} {sort_order!r} must be columns like \"event_time\" or "
                          "\"user_id DESC NULLS LAST, event_time\"")
    for term in filter(None, (t.strip() for t in sort_order.split(","))):
        if columns and term.split()[0] not in types and not term.split()[0].startswith("_kafka_"):
            raise ConfigError(f"{s.key('sort_order')} names {term.split()[0]!r}, which is not a declared column")
    properties = s.get("properties", dict, {})
    owned = [k for k in properties if k.startswith("frazil.") or k.startswith("commit.retry.")]
    if owned:
        raise ConfigError(f"{s.key('properties')}: {', '.join(owned)} are set by frazil itself; leave them out")
    return tuple(identifiers), sort_order, {str(k): str(v) for k, v in properties.items()}


def _shape(s: _Section, columns_name: str) -> dict[str, Any]:
    """What a configured table and the ``[dynamic]`` template share: columns (left out: the table
    as it exists, or created on its first records with an inferred schema), creation, metadata
    columns, partitioning, maps for inference and the layout keys. Checked against the columns
    when they are declared; otherwise when the table is created."""
    columns = _columns(s.get("columns", list), s.key("columns")) if "columns" in s.data else ()
    s.used.add("columns")
    if "identifier_columns" in s.data and not columns:
        raise ConfigError(f"{s.key('identifier_columns')} needs {columns_name}: inferred columns are optional, "
                          "and identifier columns must be required")
    partition_raw = s.get("partition_by", list, [])
    partition_by = _partition_by(partition_raw, s.key("partition_by"), columns)
    maps = s.get("maps", list, [])
    if not all(isinstance(m, str) and m and all(m.split(".")) for m in maps):
        raise ConfigError(f"{s.key('maps')} must be dotted paths of objects to infer as maps, e.g. [\"attributes\"]")
    identifiers, sort_order, properties = _layout(s, columns)
    unknown_fields = s.get("unknown_fields", str, "fail")
    if unknown_fields not in UNKNOWN_FIELDS:
        raise ConfigError(f"{s.key('unknown_fields')} {unknown_fields!r} must be one of {', '.join(UNKNOWN_FIELDS)}: "
                          "\"fail\" makes a record with a field the table has no column for a bad record, \"ignore\" "
                          "drops such fields and counts them (frazil_fields_ignored_total), \"evolve\" adds them to "
                          "the table as optional columns (and widens int, float and decimal columns that values outgrow)")
    metadata_columns = s.get("metadata_columns", bool, True)
    return {"columns": columns, "create": s.get("create", bool, True),
            "metadata_columns": metadata_columns, "partition_by": partition_by,
            "maps": tuple(maps), "identifier_columns": identifiers, "sort_order": sort_order, "properties": properties,
            "unknown_fields": unknown_fields, "case_insensitive": s.get("case_insensitive", bool, False),
            "changes": _changes(s, columns, identifiers, metadata_columns, unknown_fields)}


def _changes(s: _Section, columns: tuple[Column, ...], identifiers: tuple[str, ...], metadata_columns: bool,
             unknown_fields: str) -> ChangesConfig | None:
    """``mode`` and, for ``cdc``, the ``[...cdc]`` section: how the table's records change rows."""
    mode = s.get("mode", str, "append")
    if mode not in MODES:
        raise ConfigError(f"{s.key('mode')} {mode!r} must be \"append\" (every record a new row), \"upsert\" (every "
                          "record replaces the row of its key) or \"cdc\" (an operation field says insert, update or "
                          "delete; Debezium's envelope by default)")
    tombstones = s.get("tombstones", str, "skip")
    if tombstones not in TOMBSTONES:
        raise ConfigError(f"{s.key('tombstones')} {tombstones!r} must be \"skip\" (a record with a null value lands "
                          "nothing, counted) or \"delete\" (it deletes the row of its Kafka key; mode upsert or cdc)")
    if mode == "append":
        if "cdc" in s.data:
            raise ConfigError(f"[{s.key('cdc')}] needs {s.key('mode')} = \"cdc\"")
        if tombstones != "skip":
            raise ConfigError(f"{s.key('tombstones')} = \"delete\" needs {s.key('mode')} = \"upsert\" or \"cdc\": an "
                              "append table has no key to delete")
        return None
    why = f"{s.key('mode')} = \"{mode}\""
    if not identifiers:
        raise ConfigError(f"{why} needs {s.key('identifier_columns')}: the columns that identify a row (each "
                          "record replaces or deletes the row with its values)")
    if not metadata_columns:
        raise ConfigError(f"{why} needs metadata_columns = true: the latest change of a key is the one with the "
                          "highest (_kafka_partition, _kafka_offset), also across processes")
    if unknown_fields == "evolve":
        raise ConfigError(f"{why} does not evolve the schema yet: set {s.key('unknown_fields')} to \"fail\" or "
                          "\"ignore\"")
    merging = _merging(s, why)
    if mode == "upsert":
        if "cdc" in s.data:
            raise ConfigError(f"[{s.key('cdc')}] needs {s.key('mode')} = \"cdc\"; in upsert mode every value is the row")
        return ChangesConfig("upsert", tombstones, **merging)
    c = s.section("cdc", required=False)
    fmt = c.get("format", str, "debezium")
    if fmt not in CDC_FORMATS:
        raise ConfigError(f"{c.key('format')} {fmt!r} must be \"debezium\" (op c/r/u with the row in after, d with "
                          "the key in before) or \"field\" (the value is the row; cdc.field names the operation)")
    unwrap = c.get("unwrap_envelope", bool, True)
    if fmt == "debezium":
        for key in ("field", "upsert", "delete"):
            if key in c.data:
                raise ConfigError(f"{c.key(key)} is for cdc.format = \"field\"; Debezium's envelope is read as it is")
        c.finish()
        return ChangesConfig("cdc", tombstones, unwrap_envelope=unwrap, **DEBEZIUM, **merging)
    field_path = c.get("field", str, hint='the dotted path of the operation field, e.g. "op"').strip()
    if not field_path or not all(field_path.split(".")):
        raise ConfigError(f"{c.key('field')} {field_path!r} must be a dotted path into the value, e.g. \"op\"")
    ops = {}
    for key in ("upsert", "delete"):
        values = c.get(key, list, hint=f'the operation values that {key} a row, e.g. {["I", "U"] if key == "upsert" else ["D"]}')
        if not values or not all(isinstance(v, (str, int, bool)) for v in values):
            raise ConfigError(f"{c.key(key)} must list the operation values (strings or numbers) that {key} a row")
        ops[key] = tuple(str(v).lower() if isinstance(v, bool) else str(v) for v in values)
    both = set(ops["upsert"]) & set(ops["delete"])
    if both:
        raise ConfigError(f"{c.key('upsert')} and {c.key('delete')} both list {', '.join(sorted(both))}")
    top = field_path.split(".")[0]
    if columns and top not in {col.name for col in columns} and unknown_fields == "fail":
        raise ConfigError(f"{c.key('field')} {field_path!r}: the value is the row, so the operation field lands in "
                          f"a column: declare column {top!r} (it keeps each row's last operation), or set "
                          f"{s.key('unknown_fields')} = \"ignore\"")
    c.finish()
    return ChangesConfig("cdc", tombstones, op=tuple(field_path.split(".")), upsert_ops=ops["upsert"],
                         delete_ops=ops["delete"], unwrap_envelope=unwrap, **merging)


def _merging(s: _Section, why: str) -> dict[str, Any]:
    """``merge`` and its triggers: how a keyed table's changes reach it."""
    merge = s.get("merge", str, "native")
    if merge not in ("native", "spark"):
        raise ConfigError(f"{s.key('merge')} {merge!r} must be \"native\" (frazil commits the rows with position "
                          "deletes of the rows they replace) or \"spark\" (changes land in a staging table, and "
                          "Spark MERGEs them into the table)")
    interval = s.positive("merge_interval_s", float, 60.0)
    threshold = s.get("merge_min_changes", int, 100_000)
    if threshold < 0:
        raise ConfigError(f"{s.key('merge_min_changes')} must be 0 (the interval alone) or a count, got {threshold}")
    if merge == "native" and ("merge_interval_s" in s.data or "merge_min_changes" in s.data):
        raise ConfigError(f"{s.key('merge_interval_s')} and {s.key('merge_min_changes')} are for {s.key('merge')} = "
                          f"\"spark\"; with {why} and merge = \"native\" every commit lands the changes")
    return {"merge": merge, "merge_interval_s": interval, "merge_min_changes": threshold}


def merge_target(staging: TableConfig) -> TableConfig:
    """The table a staging table's changes are merged into, as the config declares it."""
    assert staging.changes is not None and staging.changes.target
    return dataclasses.replace(staging, name=staging.changes.target,
                               changes=dataclasses.replace(staging.changes, target=""), topics="", route_field=(),
                               route="")


def _table(s: _Section) -> TableConfig:
    name = s.get("name", str, hint='"namespace.table", e.g. "demo.events"')
    if name.count(".") < 1 or not all(_NAME.match(part) for part in name.split(".")):
        raise ConfigError(f"{s.key('name')} {name!r} must be \"namespace.table\"")
    shape = _shape(s, s.key("columns"))
    route_field = s.get("route_field", str, "").strip()
    if route_field and not all(part for part in route_field.split(".")):
        raise ConfigError(f"{s.key('route_field')} {route_field!r} must be a dotted path into the value, e.g. "
                          "\"type\" or \"meta.kind\"")
    table = TableConfig(name=name, topics=_regex(s, "topics", '"orders\\..*"'),
                        route_field=tuple(route_field.split(".")) if route_field else (),
                        route=_regex(s, "route", '"order_(created|paid)"'), **shape)
    if bool(table.route_field) != bool(table.route):
        raise ConfigError(f"{s.key('route_field')} and {s.key('route')} go together: the table takes records whose "
                          "value at route_field fully matches route")
    s.finish()
    if table.changes is not None and table.changes.merge == "spark":
        # the pipeline writes (and keeps its offsets in) the staging table; Spark merges it into this one
        return dataclasses.replace(table, name=table.name + STAGING_SUFFIX,
                                   changes=dataclasses.replace(table.changes, target=table.name))
    return table


def _dynamic(s: _Section) -> DynamicConfig:
    template = s.get("table", str, hint='a template like "raw.{topic}" or "events.{meta.kind}"').strip()
    probe = _PLACEHOLDER.sub("x", template)
    if (not _PLACEHOLDER.search(template) or probe.count(".") < 1 or "{" in probe or "}" in probe
            or not all(_NAME.match(part) for part in probe.split("."))
            or any(not p or not all(p.split(".")) for p in _PLACEHOLDER.findall(template))):
        raise ConfigError(f"{s.key('table')} {template!r} must be a \"namespace.table\" template with at least one "
                          "placeholder: {topic} or a dotted path into the value, e.g. \"raw.{topic}\"")
    dynamic = DynamicConfig(table=template, topics=_regex(s, "topics", '"raw\\..*"'), **_shape(s, "[dynamic] columns"))
    if dynamic.changes is not None and dynamic.changes.merge == "spark":
        raise ConfigError(f"{s.key('merge')} = \"spark\" is for declared tables ([table] or [[tables]]) for now; "
                          "tables named by the records merge natively")
    if dynamic.changes is not None and dynamic.changes.merge == "spark":
        raise ConfigError(f"{s.key('merge')} = \"spark\" is for declared tables ([table] or [[tables]]) for now; "
                          "tables named by the records merge natively")
    s.finish()
    return dynamic


def _tables(top: _Section) -> tuple[TableConfig, ...]:
    """``[table]`` (one table, every record) or ``[[tables]]`` (several, each with its routing);
    none when ``[dynamic]`` names every table."""
    if "table" in top.data and "tables" in top.data:
        raise ConfigError("give the target as [table] (one table) or as [[tables]] (several, with routing), "
                          "not both")
    if "table" not in top.data and "tables" not in top.data:
        if "dynamic" in top.data:
            return ()
        raise ConfigError("missing section [table]: give the target as [table] (one table), [[tables]] (several, "
                          "with routing) or [dynamic] (tables named by the records)")
    if "table" in top.data:
        return (_table(top.section("table")),)
    raw = top.get("tables", list)
    if not raw:
        raise ConfigError("[[tables]] must hold at least one table")
    tables = tuple(_table(_Section(item, f"tables[{i}]")) for i, item in enumerate(raw))
    names = [t.name for t in tables]
    for name in sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"table {name!r} appears more than once in [[tables]]; give each table one entry (a "
                          "table takes every record that matches its topics and route)")
    return tables


def _values(s: _Section, r: _Section, base: Path) -> ValuesConfig:
    fmt = s.get("format", str, "json")
    if fmt not in VALUE_FORMATS:
        raise ConfigError(f"values.format {fmt!r} must be \"json\", \"avro\" (plain Avro datums, with "
                          "values.schema_file) or \"avro-confluent\" (the Confluent wire format, with [schema_registry])")
    schema_file = s.get("schema_file", str, "")
    s.finish()
    if fmt == "avro":
        if not schema_file:
            raise ConfigError('values.format = "avro" needs values.schema_file, the writer schema (.avsc) of every value')
        schema_file = str((base / schema_file).resolve())
        try:
            text = Path(schema_file).read_text()
        except OSError as exc:
            raise ConfigError(f"values.schema_file {schema_file}: {exc.strerror or exc}") from None
        from frazil.ingest import avro   # noqa: PLC0415 - the config module stays free of the ingest modules otherwise
        try:
            avro.parse(text)
        except ValueError as exc:
            raise ConfigError(f"values.schema_file {schema_file}: {exc}") from None
    elif schema_file:
        raise ConfigError(f"values.schema_file is for values.format = \"avro\" (this is {fmt!r})")
    registry = None
    if r.data:
        url = r.get("url", str, hint='e.g. "http://127.0.0.1:8081"').rstrip("/")
        if not re.match(r"^https?://[^/\s]+", url):
            raise ConfigError(f"schema_registry.url {url!r} must be an http:// or https:// URL")
        password = _secret(r, "password", base)
        username = r.get("username", str, "")
        if bool(username) != bool(password):
            raise ConfigError("schema_registry.username and a password (password, password_env or password_file) go "
                              "together (HTTP basic auth)")
        ca_file = r.get("ca_file", str, "")
        if ca_file:
            ca_file = str((base / ca_file).resolve())
            if not Path(ca_file).is_file():
                raise ConfigError(f"schema_registry.ca_file {ca_file} does not exist")
        registry = RegistryConfig(url, username, password, ca_file, r.positive("timeout_s", float, 10.0),
                                  r.positive("max_attempts", int, 5))
        r.finish()
    if fmt == "avro-confluent" and registry is None:
        raise ConfigError('values.format = "avro-confluent" needs a [schema_registry] section with its url')
    if fmt != "avro-confluent" and registry is not None:
        raise ConfigError(f"[schema_registry] is for values.format = \"avro-confluent\" (this is {fmt!r})")
    return ValuesConfig(fmt, schema_file, registry)


def _check_avro(values: ValuesConfig, tables: tuple[TableConfig, ...], dynamic: DynamicConfig | None) -> None:
    """Avro values: routing by value, inferred schemas and keyed tables need JSON values (for now)."""
    keyed: list[TableConfig | DynamicConfig] = [*tables, *([dynamic] if dynamic is not None else [])]
    for t in keyed:
        if t.changes is not None:
            name = f"table {t.name}" if isinstance(t, TableConfig) else "[dynamic]"
            raise ConfigError(f"{name}: mode = {t.changes.mode!r} reads JSON values for now; with values.format = "
                              f"{values.format!r} use mode = \"append\"")
    for t in tables:
        if t.route_field:
            raise ConfigError(f"table {t.name}: route_field reads JSON values; with values.format = {values.format!r} "
                              "route by topic (topics = ...)")
        if not t.columns:
            raise ConfigError(f"table {t.name}: with values.format = {values.format!r} declare its columns (schemas "
                              "are inferred from JSON values only); unknown_fields = \"evolve\" then adds what the "
                              "writer schemas have")
    if dynamic is not None and (dynamic.fields or not dynamic.columns):
        raise ConfigError(f"[dynamic] with values.format = {values.format!r} must name tables by {{topic}} only and "
                          "declare its columns")


def _spark(s: _Section) -> SparkConfig:
    master = s.get("master", str, "local[*]")
    if not re.match(r"^(local(\[(\*|\d+)\])?|spark://[\w.-]+:\d+(,[\w.-]+:\d+)*)$", master):
        raise ConfigError(f"spark.master {master!r} must be local, local[N], local[*] or spark://host:port")
    bulk_min_rows = s.get("bulk_min_rows", int, 0)
    if bulk_min_rows < 0:
        raise ConfigError(f"spark.bulk_min_rows must be 0 (never) or a row count, got {bulk_min_rows}")
    jars = s.get("jars", list, [])
    if not all(isinstance(j, str) and j for j in jars):
        raise ConfigError(f"spark.jars must be a list of jar paths, got {jars!r}")
    conf = s.get("conf", dict, {})
    s.finish()
    return SparkConfig(master, bulk_min_rows, tuple(jars), {str(k): str(v) for k, v in conf.items()})


def _maintenance(s: _Section, outage_timeout_s: float, commit_interval_s: float) -> MaintenanceConfig:
    m = MaintenanceConfig(
        enabled=s.get("enabled", bool, True),
        interval_s=s.positive("interval_s", float, 3600.0),
        max_snapshots=s.positive("max_snapshots", int, 100),
        max_delete_files=s.positive("max_delete_files", int, 64),
        snapshot_max_age_s=s.positive("snapshot_max_age_s", float, 86_400.0),
        target_file_size_mb=s.positive("target_file_size_mb", int, 128),
        min_input_files=s.positive("min_input_files", int, 5),
        sort_order=s.get("sort_order", str, "").strip(),
        orphan_min_age_s=s.positive("orphan_min_age_s", float, 259_200.0),
        expire_in_process=s.get("expire_in_process", bool, True),
    )
    s.finish()
    if m.max_snapshots < 2:
        raise ConfigError(f"maintenance.max_snapshots must be at least 2, got {m.max_snapshots}")
    # A written data file waits for its commit for at most outage_timeout_s (then frazil stops, and
    # the transaction log commits it on restart before maintenance runs): it must never look orphaned.
    floor = outage_timeout_s + 2 * commit_interval_s
    if m.orphan_min_age_s <= floor:
        raise ConfigError(
            f"maintenance.orphan_min_age_s ({m.orphan_min_age_s:g}) must be greater than pipeline.outage_timeout_s "
            f"plus two commit intervals ({floor:g}): a data file written but not yet committed would be deleted")
    if m.sort_order and not _SORT.match(m.sort_order):
        raise ConfigError(f"maintenance.sort_order {m.sort_order!r} must be columns like \"event_time\" or "
                          "\"user_id DESC NULLS LAST, event_time\"")
    return m


def _resolve(value: str, base: Path) -> str:
    """Relative sqlite/file locations are taken relative to the config file."""
    for prefix in ("sqlite:///", "file://"):
        if value.startswith(prefix):
            rest = value[len(prefix):]
            if rest and not rest.startswith("/"):
                return prefix + str((base / rest).resolve())
    return value


def parse(data: dict[str, Any], *, base: Path = Path("."), source: Path | None = None) -> Config:
    top = _Section(data, "")
    p = top.section("pipeline")
    pipeline = p.get("name", str, hint="a short stable name; offsets are stored under it")
    if not _NAME.match(pipeline):
        raise ConfigError(f"pipeline.name {pipeline!r} may only hold letters, digits, '_', '.' and '-'")
    commit_interval_s = p.positive("commit_interval_s", float, 10.0)
    max_buffer_records = p.positive("max_buffer_records", int, 1_000_000)
    max_commit_attempts = p.positive("max_commit_attempts", int, 5)
    memory_budget_mb = p.positive("memory_budget_mb", int, 512)
    outage_timeout_s = p.positive("outage_timeout_s", float, 900.0)
    txlog_dir = (base / p.get("txlog_dir", str, f"txlog/{pipeline}")).resolve()
    txlog_fsync = p.get("txlog_fsync", str, "always")
    if txlog_fsync not in ("always", "interval", "never"):
        raise ConfigError(f"pipeline.txlog_fsync {txlog_fsync!r} must be \"always\", \"interval\" or \"never\"")
    on_bad_record = p.get("on_bad_record", str, "fail")
    if on_bad_record not in ("fail", "dead_letter"):
        raise ConfigError(f"pipeline.on_bad_record {on_bad_record!r} must be \"fail\" (stop, naming the record) or "
                          "\"dead_letter\" (send it to pipeline.dead_letter_topic and go on)")
    dead_letter_topic = p.get("dead_letter_topic", str, f"frazil-dead-letters-{pipeline}")
    if not _NAME.match(dead_letter_topic):
        raise ConfigError(f"pipeline.dead_letter_topic {dead_letter_topic!r} is not a valid topic name")
    log_level = p.get("log_level", str, "INFO").upper()
    if log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"pipeline.log_level {log_level!r} must be DEBUG, INFO, WARNING or ERROR")
    log_format = p.get("log_format", str, "text")
    if log_format not in ("text", "json"):
        raise ConfigError(f"pipeline.log_format {log_format!r} must be \"text\" or \"json\"")
    p.finish()

    k = top.section("kafka")
    if "max_poll_records" in k.data:
        k.used.add("max_poll_records")
        log.warning("kafka.max_poll_records no longer has an effect: a poll takes each partition's fetch whole, read "
                    "natively (at most kafka.max_partition_fetch_bytes per partition); remove it from the config")
    topic_pattern = _regex(k, "topic_pattern", '"orders\\..*"')
    topics = k.get("topics", list, [])
    if bool(topics) == bool(topic_pattern):
        raise ConfigError('give kafka.topics (a list, e.g. topics = ["events"]) or kafka.topic_pattern (a regex, '
                          'e.g. topic_pattern = "orders\\..*"), exactly one of the two')
    if not all(isinstance(t, str) and _NAME.match(t) for t in topics):
        raise ConfigError(f"kafka.topics must be a list of topic names, got {topics!r}")
    reset = k.get("auto_offset_reset", str, "earliest")
    if reset not in ("earliest", "latest"):
        raise ConfigError(f"kafka.auto_offset_reset {reset!r} must be \"earliest\" or \"latest\"")
    partition_fetch = k.positive("max_partition_fetch_bytes", int, 4 * 1024 * 1024)
    kafka = KafkaConfig(
        bootstrap_servers=k.get("bootstrap_servers", str, hint='e.g. "127.0.0.1:9092"'),
        topics=tuple(topics),
        group_id=k.get("group_id", str, f"frazil-{pipeline}"),
        auto_offset_reset=reset,
        max_partition_fetch_bytes=partition_fetch,
        fetch_max_bytes=k.positive("fetch_max_bytes", int, max(FETCH_MAX_BYTES, partition_fetch)),
        session_timeout_ms=k.positive("session_timeout_ms", int, 10_000),
        heartbeat_interval_ms=k.positive("heartbeat_interval_ms", int, 3_000),
        client_id=k.get("client_id", str, f"frazil-{pipeline}"),
        topic_pattern=topic_pattern,
        metadata_max_age_ms=k.positive("metadata_max_age_ms", int, 30_000),
        security=_kafka_security(k, base),
    )
    k.finish()

    c = top.section("catalog", required=False)
    catalog_name = c.get("name", str, "frazil")
    props = c.get("properties", dict, {})
    c.finish()
    props = _catalog_secrets({str(key): str(value) for key, value in props.items()}, base)
    props.setdefault("type", "sql")
    if props["type"] == "sql":
        props.setdefault("uri", "sqlite:///warehouse/catalog.db")
        props.setdefault("warehouse", "file://warehouse")
    props = {key: _resolve(value, base) for key, value in props.items()}

    m = top.section("metrics", required=False)
    metrics_port = m.get("port", int, 0)
    if not 0 <= metrics_port <= 65535:
        raise ConfigError(f"metrics.port {metrics_port} must be 0 (off) or a TCP port")
    metrics = MetricsConfig(metrics_port, m.get("host", str, "127.0.0.1"))
    m.finish()

    co = top.section("coordination", required=False)
    mode = co.get("mode", str, "single")
    if mode not in ("single", "distributed"):
        raise ConfigError(f"coordination.mode {mode!r} must be \"single\" or \"distributed\"")
    control_topic = co.get("control_topic", str, f"frazil-control-{pipeline}")
    if not _NAME.match(control_topic):
        raise ConfigError(f"coordination.control_topic {control_topic!r} is not a valid topic name")
    coordination = CoordinationConfig(mode, control_topic, co.positive("commit_timeout_s", float, 30.0))
    co.finish()
    kafka = dataclasses.replace(kafka, exclude_topics=(control_topic, dead_letter_topic))
    if control_topic in kafka.topics:
        raise ConfigError(f"kafka.topics lists {control_topic!r}, the pipeline's control topic; it carries frazil's "
                          "own commit events, not records")
    if dead_letter_topic in kafka.topics:
        raise ConfigError(f"kafka.topics lists {dead_letter_topic!r}, the pipeline's dead-letter topic: its records "
                          "would come back as bad records; give pipeline.dead_letter_topic another name")
    spark = _spark(top.section("spark", required=False))
    maintenance = _maintenance(top.section("maintenance", required=False), outage_timeout_s, commit_interval_s)

    tables = _tables(top)
    dynamic = _dynamic(top.section("dynamic")) if "dynamic" in top.data else None
    values = _values(top.section("values", required=False), top.section("schema_registry", required=False), base)
    top.finish()
    if values.avro:
        _check_avro(values, tables, dynamic)
    for table in tables:
        known = {c.name for c in table.columns} | (set(META_COLUMNS) if table.metadata_columns else set())
        for term in filter(None, maintenance.sort_order.split(",")):
            if term.split()[0] not in known:
                raise ConfigError(f"maintenance.sort_order names {term.split()[0]!r}, which is not a column of "
                                  f"{table.name}; use one of {', '.join(sorted(known))}")
    return Config(pipeline, commit_interval_s, max_buffer_records, max_commit_attempts,
                  memory_budget_mb * 1024 * 1024, outage_timeout_s, txlog_dir, txlog_fsync, kafka,
                  CatalogConfig(catalog_name, props), tables, on_bad_record, metrics, log_level, log_format, spark,
                  maintenance, coordination, source, dynamic, dead_letter_topic, values)


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
