"""The jars Spark needs beside PySpark's own, fetched from Maven Central into the cache.

- ``iceberg``: the Iceberg Spark runtime (it bundles the SQL extensions and procedures and the
  REST catalog client) and the SQLite JDBC driver, so that Spark reads and writes the same
  catalog as pyiceberg.
- ``postgresql``: the PostgreSQL JDBC driver, for a SQL catalog on PostgreSQL.
- ``aws``: Iceberg's AWS bundle (``S3FileIO`` with the AWS SDK, 61 MiB), for a warehouse on S3 or
  an S3-compatible store; fetched only when a catalog's FileIO needs it.
- ``kafka``: Spark's Kafka connector, for the Structured Streaming benchmark peer.

Only the listed jars are copied: their other dependencies are already in PySpark.

    python -m frazil.spark.jars fetch [--kafka]    # prints the jar paths
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from frazil.spark import maven

SPARK_VERSION = "4.1.3"
ICEBERG_VERSION = "1.11.0"
SQLITE_JDBC_VERSION = "3.50.3.0"
POSTGRESQL_JDBC_VERSION = "42.7.8"
# Spark's Kafka connector brings its own Kafka client, independent of the broker's version.
SPARK_KAFKA_CLIENT_VERSION = "3.9.1"
# Maven Central has no spark-token-provider-kafka for 4.1.x (only 4.1.0-preview1); the 4.0.0 one
# carries the same few classes the connector calls.
SPARK_TOKEN_PROVIDER_VERSION = "4.0.0"

ICEBERG = [
    maven.Artifact("org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", ICEBERG_VERSION),
    maven.Artifact("org.xerial", "sqlite-jdbc", SQLITE_JDBC_VERSION),
]
POSTGRESQL = [maven.Artifact("org.postgresql", "postgresql", POSTGRESQL_JDBC_VERSION)]
AWS = [maven.Artifact("org.apache.iceberg", "iceberg-aws-bundle", ICEBERG_VERSION)]
KAFKA = [
    maven.Artifact("org.apache.spark", "spark-sql-kafka-0-10_2.13", SPARK_VERSION),
    maven.Artifact("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", SPARK_TOKEN_PROVIDER_VERSION),
    maven.Artifact("org.apache.kafka", "kafka-clients", SPARK_KAFKA_CLIENT_VERSION),
    maven.Artifact("org.apache.commons", "commons-pool2", "2.12.1"),
]


def jars(*, kafka: bool = False, aws: bool = False) -> list[Path]:
    """Paths of the Iceberg and JDBC driver jars, plus the Kafka connector's with ``kafka=True``
    and Iceberg's AWS bundle (S3FileIO) with ``aws=True``."""
    bundles = [maven.fetch(f"spark-iceberg-{ICEBERG_VERSION}", ICEBERG, transitive=False),
               maven.fetch(f"jdbc-postgresql-{POSTGRESQL_JDBC_VERSION}", POSTGRESQL, transitive=False)]
    if aws:
        bundles.append(maven.fetch(f"iceberg-aws-{ICEBERG_VERSION}", AWS, transitive=False))
    if kafka:
        bundles.append(maven.fetch(f"spark-kafka-{SPARK_VERSION}", KAFKA, transitive=False))
    return sorted(p for lib in bundles for p in lib.glob("*.jar"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m frazil.spark.jars", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    fetch = sub.add_parser("fetch")
    fetch.add_argument("--kafka", action="store_true", help="also the Kafka connector")
    fetch.add_argument("--aws", action="store_true", help="also Iceberg's AWS bundle (S3FileIO)")
    args = parser.parse_args(argv)
    try:
        for path in jars(kafka=args.kafka, aws=args.aws):
            print(path)
    except maven.FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
