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


@pytest.mark.parametrize("uri", ["mysql+pymysql://u:pw@db/cat", "sqlite:///relative/catalog.db"])
def test_conf_refuses_catalogs_spark_cannot_share(uri: str) -> None:
    with pytest.raises(ConfigError, match="catalog uri") as info:
        session.conf("frazil", {"type": "sql", "uri": uri, "warehouse": "file:///w"}, jars=[])
    assert "pw" not in str(info.value)   # a password in the URI is never shown


def test_conf_for_postgresql_passes_the_credentials_apart_from_the_jdbc_uri() -> None:
    conf = session.conf("lake", {"type": "sql", "uri": "postgresql+psycopg://bob:s3cret@db.internal:6432/ice?sslmode=require",
                                 "warehouse": "s3://b/w", "s3.endpoint": "http://minio:9000"}, jars=[])
    assert conf["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://db.internal:6432/ice?sslmode=require"
    assert (conf["spark.sql.catalog.lake.jdbc.user"] == "bob"
            and conf["spark.sql.catalog.lake.jdbc.password"] == "s3cret")
    assert conf["spark.sql.catalog.lake.s3.endpoint"] == "http://minio:9000"
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"


def test_conf_for_a_rest_catalog() -> None:
    conf = session.conf("lake", {"type": "rest", "uri": "https://cat:8181", "credential": "id:secret",
                                 "warehouse": "wh", "header.X-Iceberg-Access-Delegation": "vended-credentials"},
                        jars=[])
    assert conf["spark.sql.catalog.lake.type"] == "rest" and conf["spark.sql.catalog.lake.uri"] == "https://cat:8181"
    assert conf["spark.sql.catalog.lake.credential"] == "id:secret"
    assert conf["spark.sql.catalog.lake.header.X-Iceberg-Access-Delegation"] == "vended-credentials"
    assert "spark.sql.catalog.lake.catalog-impl" not in conf
    # client credentials renew the token as pyiceberg does, not a token exchange most providers refuse
    assert conf["spark.sql.catalog.lake.token-exchange-enabled"] == "false"
    given = session.conf("lake", {"type": "rest", "uri": "https://cat:8181", "credential": "id:secret",
                                  "token-exchange-enabled": "true", "oauth2-server-uri": "https://idp/token",
                                  "scope": "catalog"}, jars=[])
    assert given["spark.sql.catalog.lake.token-exchange-enabled"] == "true"
    assert given["spark.sql.catalog.lake.oauth2-server-uri"] == "https://idp/token"
    assert given["spark.sql.catalog.lake.scope"] == "catalog"
    token = session.conf("lake", {"type": "rest", "uri": "https://cat:8181", "token": "t"}, jars=[])
    assert "spark.sql.catalog.lake.token-exchange-enabled" not in token


def test_conf_for_a_rest_catalog_signed_with_sigv4() -> None:
    """pyiceberg's switch becomes Iceberg's SigV4 auth manager, the signing keys passed on, the AWS
    bundle (the signer) on the classpath."""
    props = {"type": "rest", "uri": "https://cat", "rest.sigv4-enabled": "true", "rest.signing-region": "eu-west-3",
             "rest.signing-name": "execute-api"}
    conf = session.conf("lake", props, jars=[])
    assert conf["spark.sql.catalog.lake.rest.auth.type"] == "sigv4"
    assert conf["spark.sql.catalog.lake.rest.signing-region"] == "eu-west-3"
    assert conf["spark.sql.catalog.lake.rest.signing-name"] == "execute-api"
    assert session.needs_aws(props) and not session.needs_aws({**props, "rest.sigv4-enabled": "false"})
    assert "spark.sql.catalog.lake.rest.auth.type" not in session.conf("lake", {"type": "rest", "uri": "u"}, jars=[])


def test_conf_for_a_glue_catalog() -> None:
    """Iceberg's GlueCatalog on the same Glue tables; its endpoint, region and FileIO passed on, and
    the AWS bundle (Glue's client) on the classpath. Credentials are the AWS SDK chain's."""
    props = {"type": "glue", "warehouse": "s3://b/w", "glue.endpoint": "http://glue:5000", "glue.id": "123",
             "client.region": "eu-west-1", "s3.endpoint": "http://s3:9000",
             "io-impl": "org.apache.iceberg.aws.s3.S3FileIO"}
    conf = session.conf("lake", props, jars=[])
    assert conf["spark.sql.catalog.lake.type"] == "glue" and "spark.sql.catalog.lake.catalog-impl" not in conf
    for key in ("warehouse", "glue.endpoint", "glue.id", "client.region", "s3.endpoint", "io-impl"):
        assert conf[f"spark.sql.catalog.lake.{key}"] == props[key], key
    assert session.needs_aws({"type": "glue"}) and not session.needs_aws({"type": "rest", "uri": "http://r"})
    # the type as pyiceberg takes it (any case); pyiceberg's own Glue keys stay out of Spark's settings
    conf = session.conf("lake", {**props, "type": "GLUE", "glue.secret-access-key": "s3cret"}, jars=[])
    assert conf["spark.sql.catalog.lake.type"] == "glue" and "s3cret" not in conf.values()
    assert session.needs_aws({"type": "Glue"})


def test_conf_for_a_hive_metastore() -> None:
    """Iceberg's HiveCatalog on the same metastore, its Thrift URI and warehouse as pyiceberg has them."""
    conf = session.conf("lake", {"type": "Hive", "uri": "thrift://hms:9083", "warehouse": "file:///w"}, jars=[])
    assert {k: v for k, v in conf.items() if k.startswith("spark.sql.catalog.lake.")} == {
        "spark.sql.catalog.lake.cache-enabled": "false", "spark.sql.catalog.lake.type": "hive",
        "spark.sql.catalog.lake.uri": "thrift://hms:9083", "spark.sql.catalog.lake.warehouse": "file:///w"}
    assert not session.needs_aws({"type": "hive", "uri": "thrift://hms:9083"})


def test_conf_refuses_a_catalog_type_spark_cannot_share() -> None:
    with pytest.raises(ConfigError, match="turn maintenance off"):
        session.conf("lake", {"type": "dynamodb", "warehouse": "s3://b/w"}, jars=[])
