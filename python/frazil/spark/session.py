"""One Spark session that sees the same Iceberg catalog as pyiceberg.

A REST catalog is one server both engines talk to. A SQL catalog is shared through Iceberg's
``JdbcCatalog`` on the same database (SQLite file or PostgreSQL), pyiceberg's ``SqlCatalog``
tables, when:
- the Spark catalog has the SqlCatalog's name (it is the ``catalog_name`` column of both);
- ``jdbc.init-catalog-tables=false``: pyiceberg creates the tables; the Java start-up check
  otherwise leaves a lock that fails pyiceberg's next commit with "database is locked";
- ``cache-enabled=false``: a cached table made ``rewrite_data_files`` fail with "Missing required
  files to delete".

``conf()`` is the pure mapping; ``get()`` starts the session once, on first use, because a start
costs about 7 s on two cores.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from frazil.config import Config
from frazil.errors import ConfigError
from frazil.spark import jars

_lock = threading.Lock()
_session: Any = None


# Catalog properties Spark's Iceberg catalog takes as they are: the REST client's and Glue's settings and the
# FileIO's (object storage). pyiceberg and Iceberg's Java catalogs spell these the same.
_PASSED_ON = ("credential", "token", "oauth2-server-uri", "scope", "audience", "resource", "prefix", "io-impl",
              "token-exchange-enabled", "token-refresh-enabled", "token-expires-in-ms")
_PASSED_ON_PREFIXES = ("header.", "s3.", "client.", "rest.", "glue.")
_NOT_PASSED_ON = ("glue.access-key-id", "glue.secret-access-key", "glue.session-token")   # pyiceberg's alone


def jdbc_uri(uri: str) -> str:
    """pyiceberg's SQLAlchemy URI as a JDBC URI, without credentials (``jdbc_credentials``):
    ``sqlite:////abs/c.db`` -> ``jdbc:sqlite:/abs/c.db``,
    ``postgresql+psycopg://u:p@host:5432/db?sslmode=require`` -> ``jdbc:postgresql://host:5432/db?sslmode=require``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError:
        raise ConfigError(f"catalog uri {uri!r} is not a SQLAlchemy URL") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        path = url.database or ""
        if not path.startswith("/"):
            raise ConfigError(f"catalog uri {uri!r} must be an absolute path by the time Spark sees it")
        return f"jdbc:sqlite:{path}"
    if backend == "postgresql":
        query = "&".join(f"{k}={v}" for k, v in sorted(url.query.items()) if isinstance(v, str))
        return (f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/{url.database or ''}"
                + (f"?{query}" if query else ""))
    raise ConfigError(f"catalog uri {url.render_as_string(hide_password=True)!r}: Spark shares SQL catalogs on SQLite "
                      "and PostgreSQL; use one of those, or a REST catalog")


def jdbc_credentials(uri: str) -> dict[str, str]:
    """The user and password in a SQLAlchemy URI, as Iceberg's ``JdbcCatalog`` takes them."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    out = {}
    if url.username:
        out["jdbc.user"] = url.username
    if url.password:
        out["jdbc.password"] = str(url.password)
    return out


def catalog_conf(catalog_name: str, properties: Mapping[str, str]) -> dict[str, str]:
    """Spark's settings for the Iceberg catalog pyiceberg loads from ``properties``: a SQL catalog
    (SQLite, PostgreSQL) through Iceberg's ``JdbcCatalog`` on the same tables, a REST catalog, AWS
    Glue (the same Glue tables through Iceberg's ``GlueCatalog``) or a Hive Metastore (``HiveCatalog``)."""
    prefix = f"spark.sql.catalog.{catalog_name}"
    kind = properties.get("type", "sql").lower()
    out = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.cache-enabled": "false"}
    if kind == "sql":
        out.update({f"{prefix}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
                    f"{prefix}.uri": jdbc_uri(properties["uri"]),
                    f"{prefix}.jdbc.init-catalog-tables": "false"})
        out.update({f"{prefix}.{k}": v for k, v in jdbc_credentials(properties["uri"]).items()})
    elif kind == "rest":
        out.update({f"{prefix}.type": "rest", f"{prefix}.uri": properties["uri"]})
        if "credential" in properties:
            # Iceberg's Java client renews a token before it expires by exchanging it for a new one
            # (RFC 8693), which most identity providers refuse (Keycloak's default, Entra ID, Okta):
            # the renewal fails and every request after the expiry is refused. With the exchange off
            # it asks for a new token with the client credentials, as pyiceberg does.
            out[f"{prefix}.token-exchange-enabled"] = "false"
        if properties.get("rest.sigv4-enabled", "").lower() == "true":
            # pyiceberg's switch; Iceberg's Java client signs with its SigV4 auth manager (AWS bundle),
            # region and service from the same rest.signing-* keys, credentials from the AWS chain
            out[f"{prefix}.rest.auth.type"] = "sigv4"
    elif kind == "glue":   # Iceberg's GlueCatalog: the AWS SDK's own credentials chain, the glue.* settings below
        out[f"{prefix}.type"] = "glue"
    elif kind == "hive":   # Iceberg's HiveCatalog over Thrift; both engines lock the table in the metastore to commit
        out.update({f"{prefix}.type": "hive", f"{prefix}.uri": properties["uri"]})
    else:
        raise ConfigError(f"catalog type {kind!r}: Spark (maintenance, bulk writes) shares \"sql\" (SQLite, "
                          "PostgreSQL), \"rest\", \"glue\" and \"hive\" catalogs; turn maintenance off ([maintenance] "
                          "enabled = false) to ingest into another catalog")
    if "warehouse" in properties:
        out[f"{prefix}.warehouse"] = properties["warehouse"]
    out.update({f"{prefix}.{k}": v for k, v in properties.items()
                if (k in _PASSED_ON or k.startswith(_PASSED_ON_PREFIXES)) and k not in _NOT_PASSED_ON})
    return out


def conf(catalog_name: str, properties: Mapping[str, str], *, jars: list[Path], master: str = "local[*]",
         app_name: str = "frazil", extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings for a session on the frazil catalog ``catalog_name``."""
    out = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(p) for p in jars),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        **catalog_conf(catalog_name, properties),
        "spark.sql.defaultCatalog": catalog_name,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        # Maintenance cut-offs are passed as UTC timestamps.
        "spark.sql.session.timeZone": "UTC",
        # Bulk writes (bulk.py) write plain Parquet that Iceberg adopts: microsecond timestamps,
        # not Spark's INT96; no _SUCCESS marker in the table's folders (it would only ever be an
        # orphan).
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.parquet.compression.codec": "zstd",
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.driver.memory": "2g",
    }
    out.update(extra or {})
    return out


def needs_aws(properties: Mapping[str, str]) -> bool:
    """Whether Spark needs Iceberg's AWS bundle for this catalog: it is AWS Glue, its FileIO is
    ``S3FileIO``, its warehouse is on S3, or its REST requests are signed with SigV4."""
    return (properties.get("type", "").lower() == "glue" or "aws.s3" in properties.get("io-impl", "")
            or properties.get("warehouse", "").startswith(("s3://", "s3a://"))
            or properties.get("rest.sigv4-enabled", "").lower() == "true")


def for_config(cfg: Config) -> dict[str, str]:
    """The settings of the session a frazil pipeline uses (``[catalog]`` and ``[spark]``)."""
    paths = [Path(j) for j in cfg.spark.jars] or jars.jars(aws=needs_aws(cfg.catalog.properties))
    return conf(cfg.catalog.name, cfg.catalog.properties, jars=paths, master=cfg.spark.master,
                app_name=f"frazil-{cfg.pipeline}", extra=cfg.spark.conf)


def available() -> str | None:
    """Why Spark cannot start here (pyspark or Java missing), or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'pyspark==4.1.*')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime: install Java 17 or 21, or set JAVA_HOME"
    return None


def get(settings: Mapping[str, str]) -> Any:
    """The process's Spark session, started with ``settings`` on first call."""
    global _session
    with _lock:
        if _session is None:
            from pyspark.sql import SparkSession

            builder = SparkSession.builder
            for key, value in settings.items():
                builder = builder.config(key, value)
            _session = builder.getOrCreate()
            _session.sparkContext.setLogLevel("WARN")
        return _session


def stop() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None

