"""The Spark settings that make Spark and pyiceberg share one SQLite catalog (pure, no JVM)."""

from pathlib import Path

import pytest

from frazil.errors import ConfigError
from frazil.spark import session


def test_conf_points_spark_at_the_same_sqlite_file_under_the_same_catalog_name() -> None:
    props = {"type": "sql", "uri": "sqlite:////data/wh/catalog.db", "warehouse": "file:///data/wh"}
    conf = session.conf("lake", props, jars=[Path("/c/a.jar"), Path("/c/b.jar")], master="local[2]")
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert conf["spark.sql.catalog.lake.uri"] == "jdbc:sqlite:/data/wh/catalog.db"
    assert conf["spark.sql.catalog.lake.warehouse"] == "file:///data/wh"
    # the two settings stack.md found necessary for sharing the file
    assert conf["spark.sql.catalog.lake.jdbc.init-catalog-tables"] == "false"
    assert conf["spark.sql.catalog.lake.cache-enabled"] == "false"
    assert conf["spark.sql.defaultCatalog"] == "lake"
    assert conf["spark.jars"] == "/c/a.jar,/c/b.jar"
    assert conf["spark.master"] == "local[2]"


@pytest.mark.parametrize("uri", ["postgresql://db/cat", "sqlite:///relative/catalog.db"])
def test_conf_refuses_catalogs_spark_cannot_share(uri: str) -> None:
    with pytest.raises(ConfigError, match="catalog uri"):
        session.conf("frazil", {"type": "sql", "uri": uri, "warehouse": "file:///w"}, jars=[])
