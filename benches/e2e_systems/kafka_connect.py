"""The Apache Iceberg Kafka Connect sink in a standalone Kafka Connect worker.

Kafka Connect 4.1.2 and the Iceberg sink 1.11.0 (with its ORC and Parquet writers, shaded
Hadoop, and the SQLite JDBC driver) come from Maven Central into ``~/.cache/frazil``; nothing
is built. The sink writes through Iceberg's ``JdbcCatalog`` on the same SQLite file as the other
systems, with two tasks, the same commit interval, JSON values without schemas, and Iceberg's
``KafkaMetadataTransform`` adding the Kafka topic, partition, offset and timestamp columns the
harness reads back. The table is created first with pyiceberg (as the plain loop creates its
own), because schemaless JSON cannot drive the sink's auto-create. The process becomes the JVM,
so SIGTERM stops the worker cleanly.

    python benches/e2e_systems/kafka_connect.py --job job.json
    python benches/e2e_systems/kafka_connect.py --fetch
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from frazil.spark import maven

CONNECT_VERSION = "4.1.2"
ICEBERG_VERSION = "1.11.0"
_A = maven.Artifact
ARTIFACTS = [
    _A("org.apache.kafka", "connect-runtime", CONNECT_VERSION),
    _A("org.apache.kafka", "connect-json", CONNECT_VERSION),
    _A("org.apache.iceberg", "iceberg-kafka-connect", ICEBERG_VERSION),
    _A("org.apache.iceberg", "iceberg-kafka-connect-transforms", ICEBERG_VERSION),
    _A("org.apache.iceberg", "iceberg-parquet", ICEBERG_VERSION),
    _A("org.apache.iceberg", "iceberg-orc", ICEBERG_VERSION),  # the format registry loads it even for Parquet
    _A("org.apache.hadoop", "hadoop-client-api", "3.4.1"),
    _A("org.apache.hadoop", "hadoop-client-runtime", "3.4.1"),
    _A("org.xerial", "sqlite-jdbc", "3.50.3.0"),
    _A("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
    _A("org.apache.logging.log4j", "log4j-core", "2.24.3"),
]
_LOG4J2 = """<Configuration status="WARN"><Appenders><Console name="c" target="SYSTEM_OUT">
<PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders><Loggers><Root level="INFO">
<AppenderRef ref="c"/></Root><Logger name="org.apache.kafka.clients" level="WARN"/>
<Logger name="org.apache.kafka.common" level="WARN"/></Loggers></Configuration>
"""


def lib() -> Path:
    return maven.fetch(f"kafka-connect-iceberg-{ICEBERG_VERSION}", ARTIFACTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path)
    parser.add_argument("--fetch", action="store_true", help="only fetch the jars")
    args = parser.parse_args()
    jars = lib()
    if args.fetch:
        print(jars)
        return
    job: dict[str, Any] = json.loads(args.job.read_text())
    import pyarrow as pa
    from plain_python import table_for  # the same table set-up as the plain loop

    import _dev  # noqa: F401 - dev/ on the path, for frazil_dev (benches/ is on PYTHONPATH: e2e.py)
    from frazil_dev.workload import create_topic

    table_for(job, pa.ipc.read_schema(pa.py_buffer(base64.b64decode(job["arrow_schema"]))))
    control = f"{job['name']}-control".replace("_", "-")
    asyncio.run(create_topic(job["bootstrap"], control, 1))
    work = Path(job["checkpoint"])
    work.mkdir(parents=True, exist_ok=True)
    (work / "log4j2.xml").write_text(_LOG4J2)
    props = job["catalog_properties"]
    (work / "worker.properties").write_text("\n".join([
        f"bootstrap.servers={job['bootstrap']}",
        "key.converter=org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter=org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable=false",
        f"offset.storage.file.filename={work / 'connect.offsets'}",
        "listeners=http://127.0.0.1:0",
        f"plugin.path={work}",
        # The sink answers the coordinator's StartCommit only inside put()/flush(), and Connect
        # polls with a timeout up to the next offset flush (60 s by default): a task whose
        # partitions are drained sat on its last records until that tick, the coordinator made a
        # partial commit after its 30 s timeout, and the tail of the run waited for the next tick
        # (the 60-110 s stalls; apache/iceberg#17811). The sink's preCommit returns nothing, so a
        # short interval costs only a skipped offset commit.
        "offset.flush.interval.ms=500",
    ]) + "\n")
    (work / "sink.properties").write_text("\n".join([
        f"name={job['name']}",  # the consumer groups are named after it: one per run
        "connector.class=org.apache.iceberg.connect.IcebergSinkConnector",
        "tasks.max=2",
        f"topics={job['topic']}",
        f"iceberg.tables={job['table']}",
        f"iceberg.catalog={job['catalog_name']}",
        "iceberg.catalog.catalog-impl=org.apache.iceberg.jdbc.JdbcCatalog",
        f"iceberg.catalog.uri=jdbc:sqlite:{props['uri'].removeprefix('sqlite:///')}",
        f"iceberg.catalog.warehouse={props['warehouse']}",
        "iceberg.catalog.jdbc.init-catalog-tables=false",
        "iceberg.catalog.cache-enabled=false",
        f"iceberg.control.commit.interval-ms={int(job['interval_s'] * 1000)}",
        # a cycle takes well under a second here: a missed StartCommit (a task joining late)
        # costs 10 s instead of the 30 s default
        "iceberg.control.commit.timeout-ms=10000",
        f"iceberg.control.topic={control}",
        "iceberg.tables.auto-create-enabled=false",
        "transforms=meta",
        "transforms.meta.type=org.apache.iceberg.connect.transforms.KafkaMetadataTransform",
        "transforms.meta.field_name=_kafka",
    ]) + "\n")
    java = shutil.which("java")
    if java is None:
        raise SystemExit("java is needed for the Kafka Connect worker")
    sys.stdout.flush()
    os.execv(java, [java, "-Xmx2g", f"-Dlog4j2.configurationFile={work / 'log4j2.xml'}", "-cp", f"{jars}/*",
                    "org.apache.kafka.connect.cli.ConnectStandalone", str(work / "worker.properties"),
                    str(work / "sink.properties")])


if __name__ == "__main__":
    main()
