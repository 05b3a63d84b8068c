"""The configuration as frozen, validated values: one class per section of the file, each key
declared once with its type, default and meaning (docs/configuration.md lists them; a test keeps
the two in step). The tables are in config/tables.py.

Rules within one section are checked here, every time a value is made; rules that need the
file as a whole (its location, the installed libraries, several sections) in config/checks.py.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, Strict, field_validator, model_validator
from pydantic.dataclasses import dataclass

from frazil.config.tables import DynamicConfig, TableConfig
from frazil.config.types import (
    File,
    Flag,
    Key,
    Name,
    Positive,
    Problem,
    Property,
    Refused,
    Regex,
    Seconds,
    Secret,
    SortOrder,
    Text,
    TopicName,
    Upper,
    zero_or_count,
)
from frazil.errors import ConfigError

STRICT = ConfigDict(extra="forbid")
MiB = 1024 * 1024
FETCH_MAX_BYTES = 8 * MiB
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_OAUTH_KEYS = ("sasl_oauthbearer_token_endpoint_url", "sasl_oauthbearer_client_id", "sasl_oauthbearer_client_secret",
               "sasl_oauthbearer_scope")


@dataclass(frozen=True, config=STRICT)
class KafkaSecurity:
    """TLS and SASL for every Kafka client frazil creates. Secrets never appear in ``repr``."""

    protocol: Annotated[Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], Upper, Key("security_protocol")] = (
        Field(default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"))
    sasl_mechanism: Annotated[Text, Upper] = Field(
        default="", description="SASL_*: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
    sasl_username: Text = Field(default="", description="SASL_* but OAUTHBEARER: the user")
    sasl_password: Annotated[Text, Secret()] = Field(default="", repr=False,
                                                     description="SASL_* but OAUTHBEARER: the password")
    sasl_oauthbearer_token_endpoint_url: Text = Field(
        default="", description="OAUTHBEARER: the OAuth 2.0 token endpoint tokens are asked for (client credentials)")
    sasl_oauthbearer_client_id: Text = Field(default="", description="OAUTHBEARER: the client id")
    sasl_oauthbearer_client_secret: Annotated[Text, Secret()] = Field(
        default="", repr=False, description="OAUTHBEARER: the client secret")
    sasl_oauthbearer_scope: Text = Field(default="", description="OAUTHBEARER: the scope asked for; \"\": none")
    ssl_cafile: Annotated[Text, File()] = Field(
        default="", description="the CA bundle brokers' certificates are checked against; \"\": the system's")
    ssl_certfile: Annotated[Text, File()] = Field(default="", description="mutual TLS: the client certificate")
    ssl_keyfile: Annotated[Text, File()] = Field(default="", description="mutual TLS: the client certificate's key")
    ssl_key_password: Annotated[Text, Secret()] = Field(default="", repr=False, description="the client key's password")
    ssl_check_hostname: Flag = Field(default=True, description="check that the broker's certificate names its host")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def oauth(self) -> bool:
        return self.sasl and self.sasl_mechanism == "OAUTHBEARER"

    def describe(self) -> str:
        """What a person may see (check-config, logs): never a secret."""
        parts: list[str] = [self.protocol]
        if self.oauth:
            parts.append(f"OAUTHBEARER as client {self.sasl_oauthbearer_client_id} from "
                         f"{self.sasl_oauthbearer_token_endpoint_url} (secret set)")
        elif self.sasl:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username} (password set)")
        if self.tls:
            parts.append(f"CA {self.ssl_cafile or 'system'}"
                         + (f", client cert {self.ssl_certfile}" if self.ssl_certfile else "")
                         + ("" if self.ssl_check_hostname else ", hostname NOT checked"))
        return " ".join(parts)

    @model_validator(mode="after")
    def _settings_fit_the_protocol(self) -> Self:
        if self.sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise Problem(f"kafka.security_protocol = {self.protocol!r} needs kafka.sasl_mechanism, one of "
                              f"{', '.join(SASL_MECHANISMS)} (got {self.sasl_mechanism or 'none'})")
            if self.oauth:
                self._oauth_settings()
            elif not self.sasl_username or not self.sasl_password:
                raise Problem(f"kafka.security_protocol = {self.protocol!r} needs kafka.sasl_username and a password "
                              "(kafka.sasl_password_env or kafka.sasl_password_file; sasl_password in the file works "
                              "but puts the secret there)")
            elif oauth := [k for k in _OAUTH_KEYS if getattr(self, k)]:
                raise Problem(f"{', '.join('kafka.' + k for k in oauth)}: for sasl_mechanism = \"OAUTHBEARER\" only "
                              f"(this is {self.sasl_mechanism!r}); remove them or change the mechanism")
        sasl = [k for k in ("sasl_mechanism", "sasl_username", "sasl_password", *_OAUTH_KEYS) if getattr(self, k)]
        ssl = [k for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_key_password") if getattr(self, k)]
        ssl += [] if self.ssl_check_hostname else ["ssl_check_hostname"]
        for given, kind, used, needs in ((sasl, "sasl", self.sasl, '"SASL_SSL" or "SASL_PLAINTEXT"'),
                                         (ssl, "ssl", self.tls, '"SSL" or "SASL_SSL"')):
            if given and not used:
                raise Problem(f"{', '.join('kafka.' + k for k in given)}: kafka.{kind}_* settings need "
                              f"security_protocol = {needs} (this is {self.protocol!r}); without it they would be "
                              "ignored")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise Problem("kafka.ssl_certfile and kafka.ssl_keyfile go together (a client certificate and its key)")
        return self

    def _oauth_settings(self) -> None:
        """OAUTHBEARER: tokens from an OAuth 2.0 token endpoint by client credentials, never a user
        and password; the endpoint over https unless it is this host's."""
        if given := [k for k in ("sasl_username", "sasl_password") if getattr(self, k)]:
            raise Problem(f"{', '.join('kafka.' + k for k in given)}: sasl_mechanism = \"OAUTHBEARER\" takes no user "
                          "or password; it asks kafka.sasl_oauthbearer_token_endpoint_url for tokens with "
                          "kafka.sasl_oauthbearer_client_id and its secret")
        missing = [k for k in _OAUTH_KEYS[:3] if not getattr(self, k)]
        if missing:
            raise Problem(f"sasl_mechanism = \"OAUTHBEARER\" needs {', '.join('kafka.' + k for k in missing)} (the "
                          "secret as kafka.sasl_oauthbearer_client_secret_env or _file)")
        url = self.sasl_oauthbearer_token_endpoint_url
        parts = urlsplit(url)
        local = parts.scheme.lower() == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")
        if parts.username is not None or parts.password is not None or not parts.hostname or not (
                parts.scheme.lower() == "https" or local):
            raise Problem(f"kafka.sasl_oauthbearer_token_endpoint_url {url!r} must be an https:// URL (http:// only "
                          "on this host): the client secret is sent to it")


@dataclass(frozen=True, config=STRICT)
class KafkaConfig:
    bootstrap_servers: Text = Field(description="host:port[,host:port], e.g. \"127.0.0.1:9092\"")
    topics: tuple[TopicName, ...] = Field(default=(), description="the topics to consume; () when topic_pattern is set")
    group_id: Annotated[Text, Key("group_id", default="frazil-{pipeline}")] = Field(
        kw_only=True, description="the consumer group")
    auto_offset_reset: Literal["earliest", "latest"] = Field(
        default="earliest", description="where a partition the table has never seen starts")
    on_retention_gap: Annotated[Literal["stop", "skip"], Refused(
        "must be \"stop\" (records deleted by retention before they were read stop the pipeline, naming them) or "
        "\"skip\" (reading goes on from the log's start; each range logged and counted)")] = Field(
        default="stop", description="records deleted by the topic's retention before frazil read them: stop, or "
                                    "skip them (logged and counted)")
    max_partition_fetch_bytes: Positive = Field(
        default=4 * MiB, description="the most one fetch returns for one partition")
    # the most one fetch response carries, all partitions together: kept under glibc's 32 MiB mmap
    # ceiling so each response's buffers come from reused heap, not freshly mapped (page-faulted)
    # memory; left out of the file, it follows a larger max_partition_fetch_bytes (config/load.py)
    fetch_max_bytes: Positive = Field(default=FETCH_MAX_BYTES, description="the most one fetch response carries")
    session_timeout_ms: Positive = Field(default=10_000, description="the consumer group's session timeout")
    heartbeat_interval_ms: Positive = Field(default=3_000, description="the consumer group's heartbeat interval")
    client_id: Annotated[Text, Key("client_id", default="frazil-{pipeline}")] = Field(
        kw_only=True, description="the client id brokers log")
    topic_pattern: Regex = Field(
        default="", description="a regex: every topic it fully matches, also ones created later")
    metadata_max_age_ms: Positive = Field(default=30_000, description="how often topic metadata is refreshed")
    # never consumed, even when the pattern matches: the control and dead-letter topics
    exclude_topics: Annotated[tuple[str, ...], Key(None)] = ()
    security: Annotated[KafkaSecurity, Key("")] = KafkaSecurity()

    def takes(self, topic: str) -> bool:
        """Whether ``topic`` is one of the pipeline's source topics."""
        if topic in self.exclude_topics:
            return False
        return topic in self.topics if not self.topic_pattern else re.fullmatch(self.topic_pattern, topic) is not None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if bool(self.topics) == bool(self.topic_pattern):
            raise Problem('give kafka.topics (a list, e.g. topics = ["events"]) or kafka.topic_pattern (a regex, '
                          'e.g. topic_pattern = "orders\\..*"), exactly one of the two')
        if self.fetch_max_bytes < self.max_partition_fetch_bytes:
            raise Problem(f"kafka.fetch_max_bytes ({self.fetch_max_bytes}) is below kafka.max_partition_fetch_bytes "
                          f"({self.max_partition_fetch_bytes}): one fetch could not carry one partition's whole fetch; "
                          "raise fetch_max_bytes or leave it out (it then follows max_partition_fetch_bytes)")
        if self.heartbeat_interval_ms * 3 >= self.session_timeout_ms:
            raise Problem(f"kafka.heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below a third of "
                          f"kafka.session_timeout_ms ({self.session_timeout_ms}): a group member that misses a "
                          "heartbeat or two would be taken for dead and its partitions moved; lower "
                          "heartbeat_interval_ms or raise session_timeout_ms")
        return self


@dataclass(frozen=True, config=STRICT)
class CatalogConfig:
    name: Text = Field(default="frazil", description="the catalog's name (Spark must use the same)")
    # may hold secrets: print iceberg.catalog.shown_properties()
    properties: dict[str, Property] = Field(default_factory=dict, repr=False,
                                            description="passed to pyiceberg's load_catalog")
    sqlite_journal: Literal["wal", "keep"] = Field(
        default="wal", description="a SQLite catalog's journal: wal (switched to the write-ahead log, one fsync a "
                                   "commit) or keep (left as it is, e.g. on a network file system)")


@dataclass(frozen=True, config=STRICT)
class MetricsConfig:
    port: Annotated[int, Strict()] = Field(default=0, description="serve Prometheus metrics here; 0: none")
    host: Text = Field(default="127.0.0.1", description="the address the metrics endpoint binds to")

    @field_validator("port")
    @classmethod
    def _port(cls, port: int) -> int:
        if not 0 <= port <= 65535:
            raise ValueError(f"{port} must be 0 (off) or a TCP port")
        return port


_MASTER = re.compile(r"^(local(\[(\*|\d+)\])?|spark://[\w.-]+:\d+(,[\w.-]+:\d+)*)$")


@dataclass(frozen=True, config=STRICT)
class SparkConfig:
    master: Text = Field(default="local[*]", description="local, local[N], local[*] or spark://host:port[,host:port]")
    bulk_min_rows: Annotated[int, Strict(), zero_or_count("never")] = Field(
        default=0, description="flushes of at least this many rows are written by Spark; 0: never")
    jars: tuple[Annotated[Text, Field(min_length=1)], ...] = Field(
        default=(), description="jar paths for Spark; (): the Iceberg runtime and JDBC drivers, fetched")
    conf: dict[str, Property] = Field(default_factory=dict, description="extra Spark settings")

    @field_validator("master")
    @classmethod
    def _master(cls, master: str) -> str:
        if not _MASTER.match(master):
            raise ValueError(f"{master!r} must be local, local[N], local[*] or spark://host:port")
        return master


@dataclass(frozen=True, config=STRICT)
class MaintenanceConfig:
    enabled: Flag = Field(default=True, description="run table maintenance on Spark")
    interval_s: Seconds = Field(default=3600.0, description="compaction, manifests, position deletes, orphan files")
    max_snapshots: Annotated[int, Strict(), Field(ge=2)] = Field(
        default=100, description="expire down to half of this when a commit goes over it")
    max_delete_files: Positive = Field(default=64, description="rewrite position deletes when commits added this many")
    snapshot_max_age_s: Seconds = Field(default=86_400.0, description="expiry also removes snapshots older than this")
    target_file_size_mb: Positive = Field(default=128, description="compaction's target data file size")
    min_input_files: Positive = Field(default=5, description="compaction rewrites a partition with this many files")
    sort_order: SortOrder = Field(default="", description="compaction sorts by these columns; \"\": bin-packing only")
    orphan_min_age_s: Seconds = Field(default=259_200.0, description="orphan removal deletes files older than this")
    expire_in_process: Flag = Field(default=True, description="expiry between full runs, without Spark, of appends")


@dataclass(frozen=True, config=STRICT)
class CoordinationConfig:
    mode: Annotated[Literal["single", "distributed"], Refused(
        "must be \"single\" (one process is worker and coordinator) or \"distributed\" (every process a worker, one "
        "of them also the coordinator)")] = Field(default="single", description="one process, or many")
    control_topic: Annotated[TopicName, Key("control_topic", default="frazil-control-{pipeline}")] = Field(
        kw_only=True, description="the control topic, shared by every process of the pipeline")
    commit_timeout_s: Seconds = Field(default=30.0, description="then a cycle commits what arrived (partial, no VTTS)")


def _http_url(url: str) -> str:
    url = url.rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"{url!r} must be an http:// or https:// URL")
    return url


@dataclass(frozen=True, config=STRICT)
class RegistryConfig:
    """A schema registry's Confluent-compatible API (Confluent, Apicurio's ``/apis/ccompat/v7``)."""

    url: Text = Field(description="the registry's API, e.g. \"http://127.0.0.1:8081\"")
    username: Text = Field(default="", description="HTTP basic auth, with a password")
    password: Annotated[Text, Secret()] = Field(default="", repr=False, description="HTTP basic auth, with username")
    ca_file: Annotated[Text, File()] = Field(default="", description="TLS: the CA bundle the registry is checked with")
    timeout_s: Seconds = Field(default=10.0, description="per request")
    max_attempts: Positive = Field(default=5, description="per request, on connection errors and 5xx answers")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return _http_url(url)

    @model_validator(mode="after")
    def _basic_auth(self) -> Self:
        if bool(self.username) != bool(self.password):
            raise Problem("schema_registry.username and a password (password, password_env or password_file) go "
                          "together (HTTP basic auth)")
        return self


_TOPIC_NAME = re.compile(r"[A-Za-z0-9_-]+")   # a regex that matches one topic only: its text
_DOTTED_NAME = re.compile(r"[A-Za-z0-9._-]+")   # a topic name whose dots match any character too
ValueFormat = Literal["json", "avro", "avro-confluent", "json-schema-confluent", "protobuf", "protobuf-confluent"]
AVRO_FORMATS = ("avro", "avro-confluent")
_FORMATS = Refused(
    "must be \"json\", \"avro\" (plain Avro datums, with values.schema_file), \"avro-confluent\" (Avro in "
    "the Confluent wire format, with [schema_registry]), \"json-schema-confluent\" (JSON in the Confluent "
    "wire format, written by a JSON Schema serializer, with [schema_registry]), \"protobuf\" (bare Protobuf "
    "messages, with values.schema_file) or \"protobuf-confluent\" (Protobuf in the Confluent wire format, with "
    "[schema_registry])")


@dataclass(frozen=True, config=STRICT)
class ValuesConfig:
    """How record values are encoded: ``format`` for every topic, but those ``topics`` names (a
    regex fully matching the topic, the first that does in file order) with a format of their own."""

    format: Annotated[ValueFormat, _FORMATS] = Field(default="json", description="how record values are encoded")
    topics: Annotated[dict[Regex, ValueFormat], _FORMATS] = Field(
        default_factory=dict, description="[values.topics]: a topic regex to the format of its topics' values")
    schema_file: Annotated[Text, File()] = Field(
        default="", description="format = \"avro\": the writer schema (.avsc); \"protobuf\": the .proto file")
    message: Text = Field(default="", description="format = \"protobuf\": the message type of every value (its full "
                          "name, e.g. shop.Order); \"\": the file's first message")
    registry: Annotated[RegistryConfig | None, Key("/schema_registry")] = None   # the "-confluent" formats

    @property
    def formats(self) -> tuple[ValueFormat, ...]:
        """Every format the pipeline's values may have, ``format`` first."""
        return tuple(dict.fromkeys([self.format, *self.topics.values()]))

    def format_of(self, topic: str) -> ValueFormat:
        """The format of ``topic``'s values."""
        return next((fmt for pattern, fmt in self.topics.items() if re.fullmatch(pattern, topic)), self.format)

    def of(self, fmt: ValueFormat) -> ValuesConfig:
        """These values as if every topic had format ``fmt`` (one of :attr:`formats`)."""
        return dataclasses.replace(self, format=fmt, topics={},
                                   schema_file=self.schema_file if fmt in ("avro", "protobuf") else "",
                                   message=self.message if fmt == "protobuf" else "",
                                   registry=self.registry if fmt.endswith("-confluent") else None)

    @model_validator(mode="after")
    def _fits_the_format(self) -> Self:
        formats = self.formats
        shown = self.format if len(formats) == 1 else ", ".join(formats)
        if "avro" in formats and not self.schema_file:
            raise Problem('values.format = "avro" needs values.schema_file, the writer schema (.avsc) of every value '
                          'in that format')
        if "protobuf" in formats and not self.schema_file:
            raise Problem('values.format = "protobuf" needs values.schema_file, the .proto file of every value in that '
                          'format (and values.message, its message type, unless it is the file\'s first)')
        if "avro" in formats and "protobuf" in formats:
            raise Problem('values.format "avro" and "protobuf" each read values.schema_file, so one pipeline takes one '
                          'of the two (a registry format needs no file: "avro-confluent", "protobuf-confluent")')
        if "avro" not in formats and "protobuf" not in formats and self.schema_file:
            raise Problem(f"values.schema_file is for values.format = \"avro\" or \"protobuf\" (this is {shown!r})")
        if "protobuf" not in formats and self.message:
            raise Problem(f"values.message is for values.format = \"protobuf\" (this is {shown!r})")
        framed = [f for f in formats if f.endswith("-confluent")]
        if framed and self.registry is None:
            raise Problem(f'values.format = "{framed[0]}" needs a [schema_registry] section with its url')
        if not framed and self.registry is not None:
            raise Problem("[schema_registry] is for values.format = \"avro-confluent\", \"json-schema-confluent\" or "
                          f"\"protobuf-confluent\" (this is {shown!r})")
        return self


def _pipeline(key: str, default: str | None = None, *, scale: int = 1) -> Key:
    return Key(f"pipeline.{key}", default, scale)


@dataclass(frozen=True, config=STRICT, kw_only=True)
class Config:
    pipeline: Annotated[Name, _pipeline("name")] = Field(
        description="a short stable name; offsets are stored under it")
    commit_interval_s: Annotated[Seconds, _pipeline("commit_interval_s")] = Field(
        default=10.0, description="commit what is buffered this often")
    max_buffer_records: Annotated[Positive, _pipeline("max_buffer_records")] = Field(
        default=1_000_000, description="commit early when this many records are buffered")
    max_commit_attempts: Annotated[Positive, _pipeline("max_commit_attempts")] = Field(
        default=5, description="attempts within one commit cycle")
    memory_budget_bytes: Annotated[Positive, _pipeline("memory_budget_mb", scale=MiB)] = Field(
        default=512 * MiB, description="what ingestion may hold in memory (MiB in the file)")
    outage_timeout_s: Annotated[Seconds, _pipeline("outage_timeout_s")] = Field(
        default=900.0, description="how long commits may keep failing before the pipeline stops")
    txlog_dir: Annotated[Path, _pipeline("txlog_dir", "txlog/{pipeline}"), File(exists=False)] = Field(
        description="the transaction log's directory")
    txlog_fsync: Annotated[Literal["always", "interval", "never"], _pipeline("txlog_fsync"), Refused(
        "must be \"always\" (every log append fsynced), \"interval\" (at most every 50 ms) or \"never\" (left to the "
        "OS)")] = Field(default="always", description="when transaction log appends are fsynced")
    on_bad_record: Annotated[Literal["fail", "dead_letter"], _pipeline("on_bad_record"), Refused(
        "must be \"fail\" (stop, naming the record) or \"dead_letter\" (send it to pipeline.dead_letter_topic and go "
        "on)")] = Field(default="fail", description="what a record that cannot become a row does")
    dead_letter_topic: Annotated[TopicName, _pipeline("dead_letter_topic", "frazil-dead-letters-{pipeline}")] = Field(
        description="where bad records go with on_bad_record = \"dead_letter\"")
    log_level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], Upper, _pipeline("log_level")] = Field(
        default="INFO", description="DEBUG, INFO, WARNING or ERROR")
    log_format: Annotated[Literal["text", "json"], _pipeline("log_format")] = Field(
        default="text", description="text, or json for one JSON object per line")
    kafka: KafkaConfig
    catalog: CatalogConfig = CatalogConfig()
    tables: tuple[TableConfig, ...] = ()   # [table] or [[tables]]
    dynamic: DynamicConfig | None = None
    metrics: MetricsConfig = MetricsConfig()
    spark: SparkConfig = SparkConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    coordination: CoordinationConfig
    values: ValuesConfig = ValuesConfig()
    source: Annotated[Path | None, Key(None)] = dataclasses.field(default=None, compare=False)   # the file read

    @property
    def table(self) -> TableConfig:
        """The first table: the one table of a ``[table]`` config (commands that act on one table)."""
        if not self.tables:
            raise ConfigError("this needs a table named in the config ([table] or [[tables]]); this pipeline's "
                              "tables are all named by its records ([dynamic])")
        return self.tables[0]

    def formats_of(self, table: TableConfig | DynamicConfig) -> tuple[str, ...]:
        """The value formats the topics ``table`` takes may have: those of the listed
        ``kafka.topics`` it takes; with a topic pattern, going through ``[values.topics]`` in file
        order, the format of each entry that may match one of its topics, up to the entry whose
        regex is its ``topics`` regex (as written: every topic it takes matches that one, unless an
        entry before did), else ``values.format`` too; a table naming one topic has its format. An
        entry may match unless it names one topic the table's regex does not take (a dot in either
        taken as any character)."""
        values = self.values
        if not values.topics:
            return (values.format,)
        pattern = re.compile(table.topics) if table.topics else None
        if self.kafka.topics:
            taken = [t for t in self.kafka.topics if pattern is None or pattern.fullmatch(t)]
            return tuple(dict.fromkeys(map(values.format_of, taken))) or (values.format,)
        if _TOPIC_NAME.fullmatch(table.topics):   # the table takes one topic
            return (values.format_of(table.topics),)
        consumed = re.compile(self.kafka.topic_pattern)

        def may_feed(key: str) -> bool:
            if _TOPIC_NAME.fullmatch(key):   # one topic: exactly whether it is consumed and the table takes it
                return consumed.fullmatch(key) is not None and (pattern is None or pattern.fullmatch(key) is not None)
            if _DOTTED_NAME.fullmatch(key) and _DOTTED_NAME.fullmatch(table.topics):   # two names, "." any character
                return len(key) == len(table.topics) and all(
                    a == b or "." in (a, b) for a, b in zip(key, table.topics, strict=True))
            return True   # two patterns: they may overlap

        found: list[str] = []
        for key, fmt in values.topics.items():
            if key == table.topics:
                return tuple(dict.fromkeys([*found, fmt]))
            if may_feed(key):
                found.append(fmt)
        return tuple(dict.fromkeys([values.format, *found]))

    def table_named(self, name: str) -> TableConfig:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)
