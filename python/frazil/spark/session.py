"""One Spark session that sees the same Iceberg catalog as pyiceberg.

pyiceberg's ``SqlCatalog`` on SQLite and Iceberg's ``JdbcCatalog`` share one file when:
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


def jdbc_uri(uri: str) -> str:
    """pyiceberg's SQLAlchemy SQLite URI as a JDBC URI (``sqlite:////abs/c.db`` -> ``jdbc:sqlite:/abs/c.db``)."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        raise ConfigError(f"catalog uri {uri!r}: Spark shares only the SQLite catalog (sqlite:///<path>) for now")
    path = uri[len(prefix):]
    if not path.startswith("/"):
        raise ConfigError(f"catalog uri {uri!r} must be an absolute path by the time Spark sees it")
    return f"jdbc:sqlite:{path}"


def conf(catalog_name: str, properties: Mapping[str, str], *, jars: list[Path], master: str = "local[*]",
         app_name: str = "frazil", extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings for a session on the frazil catalog ``catalog_name``."""
    if properties.get("type", "sql") != "sql":
        raise ConfigError(f"catalog type {properties.get('type')!r}: Spark shares only the sql catalog for now")
    prefix = f"spark.sql.catalog.{catalog_name}"
    out = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(p) for p in jars),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        f"{prefix}.uri": jdbc_uri(properties["uri"]),
        f"{prefix}.warehouse": properties["warehouse"],
        f"{prefix}.jdbc.init-catalog-tables": "false",
        f"{prefix}.cache-enabled": "false",
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


def for_config(cfg: Config) -> dict[str, str]:
    """The settings of the session a frazil pipeline uses (``[catalog]`` and ``[spark]``)."""
    paths = [Path(j) for j in cfg.spark.jars] or jars.jars()
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

