"""A real Hive Metastore for tests: Apache Hive's standalone metastore 3.1.3 (its binary
distribution from Maven Central) on an embedded Derby database, over Thrift on 127.0.0.1.

Why 3.1: pyiceberg's Hive client calls ``get_table``, which the Hive 4 metastore no longer serves,
and Spark's Hive client is 2.3; a 3.1 metastore serves both. Hadoop's jars, which the distribution
expects from a Hadoop install, come from Maven Central too (``hadoop-common`` and ``hadoop-hdfs``
with their dependencies). Both are fetched once into the cache outside git; each start gets its own
folder, schema (``schematool -initSchema``) and port, so sessions share nothing.

Commits are serialized by the metastore's own table locks, which pyiceberg and Iceberg's Java
``HiveCatalog`` both take: the compare-and-swap that lets Spark maintenance and frazil commit to
one table.

    with HiveMetastore.start(workdir) as hms:
        hms.uri          # thrift://127.0.0.1:<port>
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

from frazil.spark import maven
from frazil_dev.kafka_broker import free_port
from frazil_dev.server import ServerProcess

HIVE_VERSION = "3.1.3"
HADOOP_VERSION = "3.3.6"
START_TIMEOUT_S = 120.0

# The metastore alone, without Hive's query engine: the expression proxy and the always-on tasks
# default to classes that only hive-exec has.
_SITE = """<configuration>
  <property><name>metastore.thrift.port</name><value>{port}</value></property>
  <property><name>metastore.thrift.bind.host</name><value>127.0.0.1</value></property>
  <property><name>metastore.warehouse.dir</name><value>file://{warehouse}</value></property>
  <property><name>javax.jdo.option.ConnectionURL</name><value>jdbc:derby:;databaseName={db};create=true</value></property>
  <property><name>javax.jdo.option.ConnectionDriverName</name><value>org.apache.derby.jdbc.EmbeddedDriver</value></property>
  <property><name>metastore.schema.verification</name><value>true</value></property>
  <property><name>metastore.expression.proxy</name><value>org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy</value></property>
  <property><name>metastore.task.threads.always</name><value>org.apache.hadoop.hive.metastore.events.EventCleanerTask</value></property>
  <property><name>metastore.event.db.notification.api.auth</name><value>false</value></property>
</configuration>
"""


class HiveMetastoreError(RuntimeError):
    """The metastore could not be fetched or started."""


def distribution() -> tuple[Path, Path]:
    """The metastore's home and the folder of Hadoop's jars, fetched and unpacked on first use."""
    bundle = f"hive-metastore-{HIVE_VERSION}"
    root = maven.cache_dir() / bundle
    home = root / f"apache-hive-metastore-{HIVE_VERSION}-bin"
    unpacked = root / ".unpacked"
    try:
        hadoop = maven.fetch(f"hadoop-{HADOOP_VERSION}", [
            maven.Artifact("org.apache.hadoop", "hadoop-common", HADOOP_VERSION),
            maven.Artifact("org.apache.hadoop", "hadoop-hdfs", HADOOP_VERSION)])
        if unpacked.exists():
            return home, hadoop
        lib = maven.fetch(bundle, [maven.Artifact("org.apache.hive", "hive-standalone-metastore", HIVE_VERSION,
                                                  kind="tar.gz", classifier="bin")], transitive=False)
    except maven.FetchError as exc:
        raise HiveMetastoreError(str(exc)) from exc
    with tarfile.open(lib / f"hive-standalone-metastore-{HIVE_VERSION}-bin.tar.gz") as archive:
        archive.extractall(root, filter="data")
    unpacked.write_text(HIVE_VERSION)
    return home, hadoop


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class HiveMetastore(ServerProcess):
    LOG = "metastore.log"
    WHAT = "the Hive Metastore"
    Error = HiveMetastoreError

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, workdir: Path, *, heap: str = "512m") -> HiveMetastore:
        """A metastore of its own under ``workdir``, its default warehouse in ``workdir/warehouse``."""
        home, hadoop = distribution()
        workdir = Path(workdir).resolve()
        conf = workdir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        port = free_port()
        (conf / "metastore-site.xml").write_text(_SITE.format(port=port, warehouse=workdir / "warehouse",
                                                              db=workdir / "metastore_db"))
        java = [os.path.join(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java",
                f"-Xmx{heap}", f"-Dderby.system.home={workdir}",
                "-cp", os.pathsep.join([str(conf), str(home / "lib" / "*"), str(hadoop / "*")])]
        env = {**os.environ, "METASTORE_HOME": str(home)}
        schema = subprocess.run([*java, "org.apache.hadoop.hive.metastore.tools.MetastoreSchemaTool",
                                 "-dbType", "derby", "-initSchema"], capture_output=True, text=True, cwd=workdir,
                                env=env)
        if schema.returncode != 0:
            raise HiveMetastoreError(f"schematool -initSchema failed:\n{schema.stdout[-3000:]}{schema.stderr[-3000:]}")
        server = cls.spawn([*java, "org.apache.hadoop.hive.metastore.HiveMetaStore"], workdir, port, env=env)
        return server.ready(lambda: _answers(port), START_TIMEOUT_S, every_s=0.5)


if __name__ == "__main__":   # fetch ahead of the tests
    try:
        print(distribution()[0])
    except HiveMetastoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
