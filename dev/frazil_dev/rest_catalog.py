"""A real Iceberg REST catalog server for tests: Apache Iceberg's own REST fixture
(``org.apache.iceberg.rest.RESTCatalogServer``), the server Iceberg runs its REST compatibility
kit against and publishes as its ``iceberg-rest-fixture`` image.

Maven Central has it as ``iceberg-open-api``'s ``test-fixtures`` jar (four classes, no pom
dependencies); the classpath it needs is the one Iceberg's build gives it: iceberg-core and its
test jar (the servlet and the catalog adapter), Hadoop's client API (a ``Configuration``), Jetty 12,
the SQLite JDBC driver and an SLF4J binding. Fetched once by Maven into the cache outside git.

The server keeps its tables in a ``JdbcCatalog`` on a SQLite file of its own and its warehouse in a
folder (or, with ``properties``, anywhere its FileIO reaches). pyiceberg and Spark both talk to it
over HTTP, as two hosts sharing one catalog would. It listens on every interface (the fixture has
no host setting); tests use 127.0.0.1.

    with RestCatalogServer.start(workdir) as rest:
        print(rest.uri)    # http://127.0.0.1:PORT, a frazil [catalog] uri with type = "rest"
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from frazil.spark import maven
from frazil_dev.kafka_broker import free_port
from frazil_dev.server import ServerProcess

ICEBERG_VERSION = "1.11.0"   # the Iceberg Spark runtime's version (spark/jars.py)
# Iceberg 1.11.0's own choices for the fixture (its gradle/libs.versions.toml)
JETTY_VERSION = "12.1.8"
HADOOP_VERSION = "3.4.3"
SQLITE_JDBC_VERSION = "3.50.3.0"
SLF4J_VERSION = "2.0.17"
START_TIMEOUT_S = 90.0
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"

ARTIFACTS = [
    maven.Artifact("org.apache.iceberg", "iceberg-open-api", ICEBERG_VERSION, classifier="test-fixtures"),
    maven.Artifact("org.apache.iceberg", "iceberg-core", ICEBERG_VERSION),
    maven.Artifact("org.apache.iceberg", "iceberg-core", ICEBERG_VERSION, classifier="tests"),
    maven.Artifact("org.apache.hadoop", "hadoop-client-api", HADOOP_VERSION),
    maven.Artifact("org.apache.hadoop", "hadoop-client-runtime", HADOOP_VERSION),
    maven.Artifact("org.eclipse.jetty.ee10", "jetty-ee10-servlet", JETTY_VERSION),
    maven.Artifact("org.eclipse.jetty.compression", "jetty-compression-server", JETTY_VERSION),
    maven.Artifact("org.eclipse.jetty.compression", "jetty-compression-gzip", JETTY_VERSION),
    maven.Artifact("org.xerial", "sqlite-jdbc", SQLITE_JDBC_VERSION),
    maven.Artifact("org.slf4j", "slf4j-simple", SLF4J_VERSION),
]

FAILSAFE_VERSION = "3.3.2"
# S3FileIO for a warehouse on S3: Iceberg's AWS module (the FileIO), its AWS SDK bundle (the SDK
# alone) and the one runtime dependency of iceberg-aws that iceberg-core does not bring
S3_ARTIFACTS = [
    maven.Artifact("org.apache.iceberg", "iceberg-aws", ICEBERG_VERSION),
    maven.Artifact("org.apache.iceberg", "iceberg-aws-bundle", ICEBERG_VERSION),
    maven.Artifact("dev.failsafe", "failsafe", FAILSAFE_VERSION),
]


class RestCatalogError(RuntimeError):
    """The REST catalog server could not be fetched or started."""


def classpath(*, s3: bool = False) -> str:
    """The server's classpath (fetched first when not cached), with S3FileIO's jars for ``s3``."""
    try:
        libs = [maven.fetch(f"iceberg-rest-fixture-{ICEBERG_VERSION}", ARTIFACTS)]
        if s3:
            libs.append(maven.fetch(f"iceberg-rest-fixture-s3-{ICEBERG_VERSION}", S3_ARTIFACTS, transitive=False))
    except maven.FetchError as exc:
        raise RestCatalogError(str(exc)) from exc
    return os.pathsep.join(str(lib / "*") for lib in libs)


def environment(port: int, workdir: Path, properties: Mapping[str, str]) -> dict[str, str]:
    """The fixture's settings: it reads catalog properties from ``CATALOG_*`` variables (``__`` for
    ``-``, ``_`` for ``.``, lower-cased), e.g. ``CATALOG_IO__IMPL`` is ``io-impl``."""
    props = {"rest.port": str(port), "uri": f"jdbc:sqlite:{workdir / 'rest-catalog.db'}",
             "warehouse": (workdir / "warehouse").as_uri(), **properties}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    for key, value in props.items():
        env["CATALOG_" + key.replace("-", "__").replace(".", "_").upper()] = value
    return env


class RestCatalogServer(ServerProcess):
    """A running fixture process."""

    LOG = "rest-catalog.log"
    WHAT = "the REST catalog server"
    Error = RestCatalogError

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, workdir: Path, *, properties: Mapping[str, str] | None = None, heap: str = "384m"
              ) -> RestCatalogServer:
        """Start a server whose tables live under ``workdir``; ``properties``: more catalog
        properties for its backend catalog (``io-impl``, ``s3.*``, ...); S3FileIO's jars come with
        an ``io-impl`` of S3FileIO."""
        cp = classpath(s3=(properties or {}).get("io-impl") == S3_FILE_IO)
        workdir = Path(workdir).resolve()
        (workdir / "warehouse").mkdir(parents=True, exist_ok=True)
        port = free_port()
        server = cls.spawn(["java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-cp", cp,
                            "org.apache.iceberg.rest.RESTCatalogServer"],
                           workdir, port, env=environment(port, workdir, properties or {}))
        return server.ready(f"{server.uri}/v1/config", START_TIMEOUT_S)


if __name__ == "__main__":   # fetch ahead of the tests; prints the classpath
    try:
        print(classpath())
    except RestCatalogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
