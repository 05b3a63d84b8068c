"""``frazil import-kc``: an Apache Iceberg Kafka Connect sink's configuration as a frazil config.

Pure: ``read`` parses the connector's JSON (``{"name", "config"}`` as the Connect REST API takes
it, or the bare config) or ``.properties`` text; ``convert`` maps it and lists every setting it
could not carry over, or carried over with a different behaviour, so nothing is dropped without
saying so. Settings are the ones the Iceberg docs list (docs/docs/kafka-connect.md). Secrets are
never written: the config names an environment variable for each (``Conversion.env``), and
``check`` parses the config as ``frazil config check`` does with a placeholder in each.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from frazil import config as config_mod
from frazil.errors import ConnectorConfigError

CONNECTOR_CLASSES = ("org.apache.iceberg.connect.IcebergSinkConnector",
                     "io.tabular.iceberg.connect.IcebergSinkConnector")
_NAME = re.compile(r"[^A-Za-z0-9_.-]")
# Kafka Connect's partition transforms (SchemaUtils) as frazil spells them
_TRANSFORMS = {"year": "year", "years": "year", "month": "month", "months": "month", "day": "day", "days": "day",
               "hour": "hour", "hours": "hour"}
_CATALOG_IMPLS = {"org.apache.iceberg.aws.glue.GlueCatalog": "glue", "org.apache.iceberg.rest.RESTCatalog": "rest",
                  "org.apache.iceberg.hive.HiveCatalog": "hive"}
_JAAS = re.compile(r'(?P<key>username|password|clientId|clientSecret|scope)\s*=\s*"(?P<value>[^"]*)"')
# catalog properties that hold a secret: the rule frazil.iceberg.catalog._SECRET_KEYS masks by
# (repeated so this module does not import pyiceberg; a unit test keeps the two the same)
_SECRET_KEYS = re.compile(r"password|secret|token|credential|key", re.IGNORECASE)
# a URI with a password in it: user:password@ or a password-like query parameter
_URI_SECRET = re.compile(r"://[^/@\s]*:[^/@\s]*@|[?&;][^=&;]*(?:password|secret|token|credential|key)[^=&;]*=",
                         re.IGNORECASE)
PLACEHOLDER = "placeholder-set-by-import-kc"


@dataclass
class Conversion:
    toml: str
    carried: list[str] = field(default_factory=list)             # connector keys that became frazil settings
    not_carried: list[tuple[str, str]] = field(default_factory=list)   # (key, why), also behaviour that changes
    env: dict[str, str] = field(default_factory=dict)   # environment variable -> where in the connector its value is


def check(done: Conversion, base: Path) -> config_mod.Config:
    """Parse ``done.toml`` as ``frazil config check`` does (ConfigError when it is not accepted),
    with a placeholder value in each environment variable of ``done.env`` (set or not here) and
    every other variable left as it is; the environment is restored afterwards."""
    saved = {var: os.environ.get(var) for var in done.env}
    try:
        os.environ.update({var: PLACEHOLDER for var in done.env})
        return config_mod.parse(tomllib.loads(done.toml), base=base)
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def _whole(key: str, value: str, unit: str) -> int:
    """Connector setting ``key``'s ``value`` as a whole number of ``unit``, 1 or more."""
    if not re.fullmatch(r"\s*\d+\s*", value) or int(value) < 1:
        raise ConnectorConfigError(f"{key} = {value!r} is not a whole number of {unit} (1 or more)")
    return int(value)


def read(text: str, filename: str) -> tuple[str, dict[str, str]]:
    """``(connector name, config)`` from a connector JSON or ``.properties`` file."""
    if filename.endswith(".json") or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConnectorConfigError(f"{filename} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConnectorConfigError(f"{filename}: expected a JSON object")
        given = data.get("config", data)
        if not isinstance(given, dict):
            raise ConnectorConfigError(f"{filename}: \"config\" must be a JSON object")
        name = str(data.get("name", given.get("name", "")))
        return name, {str(k): str(v) for k, v in given.items()}
    config: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line.startswith(("#", "!")):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not match:
            raise ConnectorConfigError(f"{filename}: cannot read the line {raw!r} (want key=value)")
        config[_unescape(match.group(1))] = _unescape(match.group(2))
    return config.get("name", ""), config


def _unescape(text: str) -> str:
    r"""Java properties escapes: ``\\`` is a backslash, ``\t`` a tab, ``\uXXXX`` a character,
    and any other escaped character stands for itself."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value))   # a JSON string is a valid TOML basic string


def _list(value: str) -> list[str]:
    """A comma-separated list; commas inside parentheses (``bucket(id, 16)``) do not split."""
    parts, depth, current = [], 0, ""
    for c in value:
        depth += {"(": 1, ")": -1}.get(c, 0)
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += c
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _partition(term: str) -> str | None:
    """One Kafka Connect partition field as frazil's ``partition_by`` entry (None: not mappable)."""
    term = term.strip()
    if re.fullmatch(r"[A-Za-z_][\w.]*", term):
        return term
    m = re.fullmatch(r"(\w+)\(\s*([\w.]+)\s*(?:,\s*(\d+)\s*)?\)", term)
    if not m:
        return None
    fn, column, n = m.group(1).lower(), m.group(2), m.group(3)
    if fn in _TRANSFORMS and n is None:
        return f"{_TRANSFORMS[fn]}({column})"
    if fn in ("bucket", "truncate") and n is not None:
        return f"{fn}[{n}]({column})"
    return None


def convert(name: str, config: dict[str, str], *, pipeline: str = "", bootstrap_servers: str = "",
            dynamic_namespace: str = "") -> Conversion:
    """The frazil config for connector ``config``. ``bootstrap_servers``: Kafka Connect takes the
    brokers from its worker config, not the connector's; give them unless ``iceberg.kafka.*`` or
    ``consumer.override.*`` name them. ``dynamic_namespace``: for dynamic routing, the namespace
    of frazil's template (Kafka Connect's route value names namespace and table together)."""
    cls = config.get("connector.class", "")
    if cls not in CONNECTOR_CLASSES:
        raise ConnectorConfigError(f"connector.class is {cls or 'missing'!r}; import-kc reads Apache Iceberg sink "
                                   f"connectors ({CONNECTOR_CLASSES[0]})")
    used: set[str] = {"connector.class", "name"}
    out = Conversion("")
    skip = out.not_carried.append

    def take(key: str, default: str = "") -> str:
        if key in config:
            used.add(key)
            out.carried.append(key)
        return config.get(key, default)

    def flag(key: str, default: bool) -> bool:
        return take(key, str(default).lower()).strip().lower() == "true"

    def leave(key: str, why: str) -> None:
        """A setting that is not carried over: accounted for, and listed with why."""
        if key in config:
            used.add(key)
            skip((key, why))

    def secret(var: str, source: str) -> str:
        """An environment variable, named after ``var``, for the secret at ``source``."""
        var = re.sub(r"[^A-Za-z0-9]", "_", var).upper()
        name, n = var, 1
        while name in out.env:
            n += 1
            name = f"{var}_{n}"
        out.env[name] = source
        return name

    pipeline = pipeline or _NAME.sub("_", name) or "imported"
    sections: dict[str, dict[str, object]] = {"pipeline": {"name": pipeline}}
    p = sections["pipeline"]
    # --- commits
    if "iceberg.control.commit.interval-ms" in config:
        key = "iceberg.control.commit.interval-ms"
        p["commit_interval_s"] = _whole(key, take(key), "milliseconds") / 1000
    else:
        skip(("iceberg.control.commit.interval-ms", "not set: Kafka Connect committed every 300 s by default; frazil "
              "commits every pipeline.commit_interval_s = 10 s unless told otherwise"))
    # --- bad records (Kafka Connect's own error handling)
    if take("errors.tolerance", "none") == "all":
        dlq = take("errors.deadletterqueue.topic.name")
        if dlq:
            p["on_bad_record"] = "dead_letter"
            p["dead_letter_topic"] = dlq
        else:
            skip(("errors.tolerance", "\"all\" without a dead-letter topic skips bad records silently; frazil never "
                  "drops a record: it stops (on_bad_record = \"fail\"); set on_bad_record = \"dead_letter\" to go on"))
    for key in ("errors.deadletterqueue.context.headers.enable", "errors.deadletterqueue.topic.replication.factor",
                "errors.log.enable", "errors.log.include.messages", "errors.retry.timeout",
                "errors.retry.delay.max.ms"):
        leave(key, "Kafka Connect's error handling; frazil's dead letters always carry the error in headers "
              "(frazil.error, frazil.error.field, frazil.source.*) and the topic is created with up to 3 replicas")

    # --- Kafka
    kafka: dict[str, object] = {}
    client = {k.split(".", 2)[2]: k for k in config if k.startswith("iceberg.kafka.")}
    client.update({k.split(".", 2)[2]: k for k in config if k.startswith("consumer.override.")})
    servers = bootstrap_servers or (take(client["bootstrap.servers"]) if "bootstrap.servers" in client else "")
    if not servers:
        raise ConnectorConfigError("Kafka Connect takes the brokers from its worker config, not the connector's: give "
                           "--bootstrap-servers HOST:PORT")
    kafka["bootstrap_servers"] = servers
    if "topics.regex" in config:
        kafka["topic_pattern"] = take("topics.regex")
    else:
        kafka["topics"] = _list(take("topics"))
        if not kafka["topics"]:
            raise ConnectorConfigError("the connector names no topics (topics or topics.regex)")
    kafka["group_id"] = f"frazil-{pipeline}"
    protocol = take(client["security.protocol"]).upper() if "security.protocol" in client else ""
    if protocol and protocol != "PLAINTEXT":
        kafka["security_protocol"] = protocol
    if "sasl.mechanism" in client:
        kafka["sasl_mechanism"] = take(client["sasl.mechanism"]).upper()
    if "sasl.jaas.config" in client:
        found = dict((m.group("key"), m.group("value")) for m in _JAAS.finditer(take(client["sasl.jaas.config"])))
        if "username" in found:
            kafka["sasl_username"] = found["username"]
        if "password" in found:
            jaas = client["sasl.jaas.config"]
            var = kafka["sasl_password_env"] = secret("FRAZIL_KAFKA_SASL_PASSWORD", f"the password in {jaas}")
            skip((jaas, f"its password is not written to the file: kafka.sasl_password_env = \"{var}\" reads it from "
                  "that environment variable"))
        # OAUTHBEARER's client credentials (Kafka's OAuthBearerLoginModule options)
        if "clientId" in found:
            kafka["sasl_oauthbearer_client_id"] = found["clientId"]
        if "scope" in found:
            kafka["sasl_oauthbearer_scope"] = found["scope"]
        if "clientSecret" in found:
            jaas = client["sasl.jaas.config"]
            var = kafka["sasl_oauthbearer_client_secret_env"] = secret("FRAZIL_KAFKA_OAUTH_CLIENT_SECRET",
                                                                       f"the client secret in {jaas}")
            skip((jaas, f"its client secret is not written to the file: kafka.sasl_oauthbearer_client_secret_env = "
                  f"\"{var}\" reads it from that environment variable"))
    if "sasl.oauthbearer.token.endpoint.url" in client:
        kafka["sasl_oauthbearer_token_endpoint_url"] = take(client["sasl.oauthbearer.token.endpoint.url"])
    for key in ("ssl.truststore.location", "ssl.keystore.location", "ssl.truststore.password", "ssl.keystore.password"):
        if key in client:
            leave(client[key], "Java key stores are not read: convert the CA to PEM for kafka.ssl_cafile (and a "
                  "client certificate to kafka.ssl_certfile/ssl_keyfile)")
    for _short, key in sorted(client.items()):
        if key not in used:
            leave(key, "a Kafka client setting frazil does not take (docs/configuration.md lists the [kafka] keys)")
    sections["kafka"] = kafka
    tasks = _whole("tasks.max", take("tasks.max", "1"), "tasks")
    if tasks > 1:
        sections["coordination"] = {"mode": "distributed"}
        skip(("tasks.max", f"{tasks} tasks: coordination.mode = \"distributed\"; run that many `frazil run` processes "
              "(any number works: the consumer group spreads the partitions)"))
    coordination = sections.setdefault("coordination", {})
    if "iceberg.control.topic" in config:
        coordination["control_topic"] = take("iceberg.control.topic")
    if "iceberg.control.commit.timeout-ms" in config:
        key = "iceberg.control.commit.timeout-ms"
        coordination["commit_timeout_s"] = _whole(key, take(key), "milliseconds") / 1000
    for key, why in (("iceberg.control.group-id-prefix", "frazil's coordinator group is <kafka.group_id>-coordinator"),
                     ("iceberg.control.commit.threads", "frazil commits each table once per cycle"),
                     ("iceberg.control.commit.max-consecutive-failures",
                      "frazil keeps retrying for pipeline.outage_timeout_s (900 s by default) while holding the "
                      "records, then stops"),
                     ("iceberg.coordinator.transactional.prefix",
                      "frazil's transactional ids are frazil-<pipeline>-coordinator and frazil-<pipeline>-<member>")):
        leave(key, why)
    if not coordination:
        del sections["coordination"]

    # --- values
    converter = take("value.converter", "")
    envelope = False   # JSON in the schema envelope ({"schema", "payload"}): each table reads the payload
    if converter.endswith("AvroConverter"):
        url = take("value.converter.schema.registry.url")
        sections["values"] = {"format": "avro-confluent"}
        sections["schema_registry"] = {"url": url.split(",")[0]}
        skip(("value.converter", "Avro with a schema registry: values.format = \"avro-confluent\"; frazil needs the "
              "tables' columns declared for Avro (add [table] columns)"))
    elif converter.endswith("JsonConverter"):
        envelope = take("value.converter.schemas.enable", "true").lower() == "true"
    elif converter:
        skip(("value.converter", f"{converter}: frazil reads JSON objects or Avro"))
    for key in sorted(k for k in config if k.startswith(("key.converter", "value.converter.", "header.converter"))):
        if key not in used:
            leave(key, "converter settings: frazil keeps the key's bytes in _kafka_key")
    for key in sorted(k for k in config if k == "transforms" or k.startswith("transforms.")):
        leave(key, "single message transforms are not run")

    # --- catalog
    catalog: dict[str, str] = {}
    catalog_name = take("iceberg.catalog", "iceberg")
    for key in sorted(k for k in config if k.startswith("iceberg.catalog.")):
        prop = key[len("iceberg.catalog."):]
        value = take(key)
        if prop == "catalog-impl":
            if value in _CATALOG_IMPLS:
                catalog["type"] = _CATALOG_IMPLS[value]
            else:
                skip((key, f"{value} has no pyiceberg counterpart here: set [catalog] properties by hand"))
        elif prop == "io-impl":
            skip((key, "a Java FileIO class: pyiceberg picks its FileIO from the warehouse scheme (s3://, gs://, ...)"))
        elif prop.startswith("jdbc."):
            skip((key, "JDBC settings: put the user and password in a SQLAlchemy uri (uri_env = ...) for a SQL "
                  "catalog"))
        elif value and (_SECRET_KEYS.search(prop) or (prop == "uri" and _URI_SECRET.search(value))):
            var = catalog[f"{prop}_env"] = secret(f"FRAZIL_CATALOG_{prop}", key)
            skip((key, f"a secret: not written to the file; [catalog] properties {prop}_env = \"{var}\" reads it "
                  "from that environment variable"))
        else:
            catalog[prop] = value
    if catalog.get("type") == "jdbc" or config.get("iceberg.catalog.uri", "").startswith("jdbc:"):
        skip(("iceberg.catalog.uri", "a JDBC catalog: write it as pyiceberg's SQL catalog, e.g. uri = "
              "\"postgresql+psycopg://user:password@host:5432/db\" (type = \"sql\")"))
    for key in sorted(k for k in config if k.startswith("iceberg.hadoop") and k not in used):
        leave(key, "Hadoop configuration is not used (pyiceberg reads object storage directly)")
    sections["catalog"] = {"name": catalog_name, "properties": catalog} if catalog else {"name": catalog_name}
    if catalog.get("type", "sql") not in ("sql", "rest"):
        sections["maintenance"] = {"enabled": False}
        skip(("iceberg.catalog.*", f"a {catalog['type']} catalog: frazil ingests into it, but its Spark maintenance "
              "shares only SQL (SQLite, PostgreSQL) and REST catalogs, so [maintenance] enabled = false; compact with "
              "your own Spark jobs"))

    # --- tables
    create = flag("iceberg.tables.auto-create-enabled", False)
    evolve = flag("iceberg.tables.evolve-schema-enabled", False)
    case_insensitive = flag("iceberg.tables.schema-case-insensitive", False)
    unknown = "evolve" if evolve else "fail"
    if not evolve:
        skip(("iceberg.tables.evolve-schema-enabled", "off: Kafka Connect drops record fields the table lacks; frazil "
              "makes such a record bad (unknown_fields = \"fail\"); set unknown_fields = \"ignore\" to drop them as "
              "Kafka Connect did (counted in frazil_fields_ignored_total)"))
    route_field = take("iceberg.tables.route-field")
    if route_field and envelope:   # routes read the value as sent: the row is inside the envelope
        route_field = f"payload.{route_field}"
    default_partition = take("iceberg.tables.default-partition-by")
    for key in ("iceberg.tables.schema-force-optional", "iceberg.tables.replace-null-with-default",
                "iceberg.tables.default-commit-branch", "iceberg.tables.cdc-field",
                "iceberg.tables.upsert-mode-enabled", "iceberg.tables.default-id-columns"):
        leave(key, {"iceberg.tables.schema-force-optional": "inferred columns are optional already; declared ones "
                                                            "keep their `required`",
                    "iceberg.tables.replace-null-with-default": "frazil stores a null as null",
                    "iceberg.tables.default-commit-branch": "frazil commits to the main branch",
                    "iceberg.tables.cdc-field": "not carried over: frazil's keyed tables take changes with mode = "
                                                "\"cdc\" and declared identifier_columns (docs/configuration.md, "
                                                "\"Keyed tables\"); set them on the table by hand",
                    "iceberg.tables.upsert-mode-enabled": "not carried over: frazil's keyed tables take upserts with "
                                                          "mode = \"upsert\" and declared identifier_columns; set "
                                                          "them on the table by hand",
                    "iceberg.tables.default-id-columns": "identifier columns need declared columns "
                                                         "(table.identifier_columns)"}[key])
    for key in sorted(k for k in config if k.startswith(("iceberg.tables.auto-create-props.",
                                                          "iceberg.tables.write-props."))):
        leave(key, "table and writer properties are not passed on (frazil sets its own; set others with Spark or "
              "pyiceberg)")

    def table_entry(table: str) -> dict[str, object]:
        entry: dict[str, object] = {"name": table, "create": create, "unknown_fields": unknown}
        if case_insensitive:
            entry["case_insensitive"] = True
        if envelope:
            entry["connect_envelope"] = True
        if not create:
            entry["metadata_columns"] = False
        prefix = f"iceberg.table.{table}."
        terms = _list(take(prefix + "partition-by") if prefix + "partition-by" in config else default_partition)
        mapped = [_partition(t) for t in terms]
        if terms and None not in mapped:
            entry["partition_by"] = mapped
        elif terms:
            skip((prefix + "partition-by", f"{terms}: not all of these are partition transforms frazil knows"))
        regex = take(prefix + "route-regex")
        if regex and route_field:
            entry["route_field"], entry["route"] = route_field, regex
        leave(prefix + "commit-branch", "frazil commits to the main branch")
        leave(prefix + "id-columns", "identifier columns need declared columns (table.identifier_columns)")
        return entry

    tables = [table_entry(t) for t in _list(take("iceberg.tables"))]
    dynamic = flag("iceberg.tables.dynamic-enabled", False)
    if dynamic:
        if not route_field:
            raise ConnectorConfigError("iceberg.tables.dynamic-enabled needs iceberg.tables.route-field")
        if not dynamic_namespace:
            raise ConnectorConfigError(
                f"dynamic routing: Kafka Connect's route field {route_field!r} holds the whole table name "
                "(namespace.table), while frazil's [dynamic] template fixes the namespace and names the table from "
                "the value; give --dynamic-namespace NS to write \"NS.{" + route_field + "}\" (the value "
                "\"db.events\" then names NS.db_events), or route to a list of tables")
        sections["dynamic"] = {"table": f"{dynamic_namespace}.{{{route_field}}}", "create": create,
                               "unknown_fields": unknown, **({"connect_envelope": True} if envelope else {})}
        skip(("iceberg.tables.dynamic-enabled", f"the table is {dynamic_namespace}.<value>, the value lower-cased with "
              "every character but letters, digits and _ as _ (\"db.Events-1\" names "
              f"{dynamic_namespace}.db_events_1), where Kafka Connect used the value as the table's full name"
              + ("; a record naming a missing table is a bad record, where Kafka Connect skipped it"
                 if not create else "")))
    elif not tables:
        raise ConnectorConfigError("the connector names no table: iceberg.tables (or dynamic routing with "
                                   "iceberg.tables.dynamic-enabled and iceberg.tables.route-field)")
    if not create:
        skip(("iceberg.tables.auto-create-enabled", "off: the tables must exist; frazil writes them as they are, "
              "without its _kafka_* metadata columns (metadata_columns = false)"))
    for key in sorted(set(config) - used):
        if key.startswith("iceberg.table.") and not any(key.startswith(f"iceberg.table.{t['name']}.") for t in tables):
            skip((key, "names a table that iceberg.tables does not list"))
        else:
            skip((key, "not a setting of the Iceberg sink that frazil knows"))
    if out.env:
        skip(("(environment)", "before `frazil run` or `frazil config check`, set " + "; ".join(
            f"{var} to {'the value of ' if source in config else ''}{source}" for var, source in out.env.items())
            + " (the file names these variables, not the secrets; import-kc checks the config with a placeholder "
            "value in each)"))
    skip(("(offsets)", "frazil keeps its offsets in the table; partitions it has never seen start at "
          "kafka.auto_offset_reset (earliest), which would read again what the connector landed. Stop the connector "
          "after its last commit, then move the tables' offsets to its consumer group's before the first frazil run: "
          f"frazil offsets -c <config> --from-group connect-{name or '<connector>'} --reason \"moved from Kafka "
          "Connect\" (docs/operations.md, \"Migrating from the Iceberg Kafka Connect sink\")"))

    lines = [f"# converted by `frazil import-kc` from the Kafka Connect connector {name or '(unnamed)'}", ""]
    for section in ("pipeline", "kafka", "coordination", "catalog", "maintenance", "values", "schema_registry",
                    "dynamic"):
        if section in sections:
            lines.append(f"[{section}]")
            lines += [f"{k} = {_toml(v)}" for k, v in sections[section].items()]
            lines.append("")
    for entry in tables:
        lines.append("[[tables]]" if len(tables) > 1 or dynamic else "[table]")
        lines += [f"{k} = {_toml(v)}" for k, v in entry.items()]
        lines.append("")
    out.toml = "\n".join(lines)
    return out
