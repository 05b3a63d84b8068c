"""A real Kafka Connect worker running Debezium's PostgreSQL connector, for the end-to-end CDC
tests: the broker's own Connect runtime (``connect-runtime`` of the broker's version),
``debezium-connector-postgres`` and Apicurio's Connect converters, all from Maven Central into
the cache outside git (``$FRAZIL_CACHE`` or ``~/.cache/frazil``).

The worker runs standalone (offsets in a file of its work folder) with its REST API on a free
port of 127.0.0.1; connectors are added through that API. Apicurio's Avro converter writes the
Confluent wire format (magic byte and 4-byte id) through Apicurio's own API of the same
registry whose Confluent-compatible API frazil reads.

    with KafkaConnect.start(workdir, broker.bootstrap) as connect:
        connect.add("shop", debezium_postgres(pg, "shop", converter=avro_converter(registry)))
        connect.wait_running("shop")
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import requests

from frazil.spark import maven
from frazil_dev.kafka_broker import KAFKA_VERSION, LOG4J_VERSION, free_port
from frazil_dev.postgres import DATABASE, PASSWORD, USER, PostgresServer
from frazil_dev.schema_registry import SchemaRegistry
from frazil_dev.server import ServerProcess

DEBEZIUM_VERSION = "3.6.1.Final"
APICURIO_CONVERTER_VERSION = "2.6.13.Final"
START_TIMEOUT_S = 120.0
_A = maven.Artifact
ARTIFACTS = [
    _A("org.apache.kafka", "connect-runtime", KAFKA_VERSION),
    _A("org.apache.kafka", "connect-json", KAFKA_VERSION),
    _A("io.debezium", "debezium-connector-postgres", DEBEZIUM_VERSION),
    _A("io.apicurio", "apicurio-registry-utils-converter", APICURIO_CONVERTER_VERSION),
    *(_A("org.apache.logging.log4j", name, LOG4J_VERSION) for name in ("log4j-api", "log4j-core", "log4j-slf4j-impl")),
]
_LOG4J2 = """<Configuration status="WARN"><Appenders><File name="f" fileName="{path}">
<PatternLayout pattern="[%d] %p %m (%c)%n"/></File></Appenders><Loggers><Root level="INFO">
<AppenderRef ref="f"/></Root><Logger name="org.apache.kafka.clients" level="WARN"/>
<Logger name="org.apache.kafka.common" level="WARN"/></Loggers></Configuration>
"""


class ConnectError(RuntimeError):
    """The Kafka Connect worker could not be fetched or started, or a connector failed."""


def lib() -> Path:
    try:
        return maven.fetch(f"debezium-connect-{KAFKA_VERSION}-{DEBEZIUM_VERSION}", ARTIFACTS)
    except maven.FetchError as exc:
        raise ConnectError(str(exc)) from exc


def avro_converter(registry: SchemaRegistry) -> dict[str, str]:
    """Key and value converter settings for Avro through the registry, in the Confluent wire
    format (a 4-byte content id after the magic byte, no headers), registering on first use."""
    api = registry.url.replace("/apis/ccompat/v7", "/apis/registry/v2")
    settings = {"converter": "io.apicurio.registry.utils.converter.AvroConverter",
                "converter.apicurio.registry.url": api,
                "converter.apicurio.registry.auto-register": "true",
                "converter.apicurio.registry.find-latest": "true",
                "converter.apicurio.registry.as-confluent": "true",
                "converter.apicurio.registry.use-id": "contentId",
                "converter.apicurio.registry.headers.enabled": "false"}
    return {f"{side}.{k}": v for side in ("key", "value") for k, v in settings.items()}


def json_converter(*, schemas: bool) -> dict[str, str]:
    """Kafka's JSON converter for keys and values, with or without its schema envelope."""
    settings = {"converter": "org.apache.kafka.connect.json.JsonConverter",
                "converter.schemas.enable": str(schemas).lower()}
    return {f"{side}.{k}": v for side in ("key", "value") for k, v in settings.items()}


def debezium_postgres(pg: PostgresServer, name: str, *, schemas: str, converter: dict[str, str], partitions: int = 1,
                      **extra: str) -> dict[str, str]:
    """Debezium's PostgreSQL connector over ``pgoutput`` for the given schemas: topics
    ``<name>.<schema>.<table>`` (created by Connect with ``partitions`` each: the test broker does
    not create topics on first use), its own replication slot and publication, an initial
    snapshot."""
    return {"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1", "database.port": str(pg.port), "database.user": USER,
            "database.password": PASSWORD, "database.dbname": DATABASE, "topic.prefix": name,
            "plugin.name": "pgoutput", "slot.name": f"{name}_slot", "publication.name": f"{name}_pub",
            "publication.autocreate.mode": "filtered", "schema.include.list": schemas,
            "snapshot.mode": "initial", "tasks.max": "1", "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": str(partitions), **converter, **extra}


class KafkaConnect(ServerProcess):
    """A running standalone Connect worker; ``stop`` is idempotent."""

    LOG = "connect.log"
    WHAT = "the Kafka Connect worker"
    Error = ConnectError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, workdir: Path, bootstrap: str, *, heap: str = "512m") -> KafkaConnect:
        jars = lib()
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        (workdir / "log4j2.xml").write_text(_LOG4J2.format(path=workdir / "worker.log"))
        (workdir / "worker.properties").write_text("\n".join([
            f"bootstrap.servers={bootstrap}",
            "key.converter=org.apache.kafka.connect.json.JsonConverter",
            "value.converter=org.apache.kafka.connect.json.JsonConverter",
            f"offset.storage.file.filename={workdir / 'connect.offsets'}",
            "offset.flush.interval.ms=1000",
            f"listeners=http://127.0.0.1:{port}",
            f"plugin.path={workdir}",
        ]) + "\n")
        logging = f"-Dlog4j2.configurationFile={workdir / 'log4j2.xml'}"
        worker = cls.spawn(["java", f"-Xmx{heap}", "-XX:+UseSerialGC", logging, "-cp", f"{jars}/*",
                            "org.apache.kafka.connect.cli.ConnectStandalone", str(workdir / "worker.properties")],
                           workdir, port)
        return worker.ready(f"{worker.url}/connectors", START_TIMEOUT_S, every_s=0.5)

    def add(self, name: str, config: dict[str, str]) -> None:
        answer = requests.put(f"{self.url}/connectors/{name}/config", json=config, timeout=30)
        if answer.status_code not in (200, 201):
            raise ConnectError(f"adding connector {name} failed: HTTP {answer.status_code} {answer.text[:1000]}")

    def tasks(self, name: str) -> list[dict[str, Any]]:
        """The connector's tasks' states (none yet: an empty list); a failed task is an error
        with its trace."""
        answer = requests.get(f"{self.url}/connectors/{name}/status", timeout=10)
        if answer.status_code != 200:
            return []
        tasks: list[dict[str, Any]] = answer.json().get("tasks") or []
        for task in tasks:
            if task.get("state") == "FAILED":
                raise ConnectError(f"connector {name}'s task failed:\n{str(task.get('trace', ''))[:3000]}")
        return tasks

    def wait_running(self, name: str, timeout_s: float = 120.0) -> None:
        """Until the connector's tasks run."""
        deadline = time.monotonic() + timeout_s
        tasks: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            tasks = self.tasks(name)
            if tasks and all(task.get("state") == "RUNNING" for task in tasks):
                return
            time.sleep(0.5)
        raise ConnectError(f"connector {name} did not run within {timeout_s:.0f}s: {tasks}\n{self.log_tail()}")

    def remove(self, name: str) -> None:
        """Stop and delete the connector (its replication slot stays in PostgreSQL)."""
        answer = requests.delete(f"{self.url}/connectors/{name}", timeout=30)
        if answer.status_code not in (204, 404):
            raise ConnectError(f"removing connector {name} failed: HTTP {answer.status_code} {answer.text[:1000]}")

    def log_tail(self, chars: int = 3000) -> str:
        path = self.workdir / "worker.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else super().log_tail(chars)


if __name__ == "__main__":   # make fetch: download ahead of the tests
    print(lib())
