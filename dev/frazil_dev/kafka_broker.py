"""A real Apache Kafka broker (KRaft) for tests, the demo and benchmarks; a cluster of three for
the tests of a broker's loss.

The broker is assembled from Maven Central jars by Maven (``copy-dependencies`` of
``org.apache.kafka:kafka_2.13`` plus a log4j2 backend) into a cache outside git,
``$FRAZIL_CACHE`` or ``~/.cache/frazil``. Each broker gets a fresh data directory and free
ports on 127.0.0.1, with the single-node settings that make transactions and consumer groups
work on one node.

Library use::

    with KafkaBroker.start(workdir) as broker:
        print(broker.bootstrap)

Command line (``dev`` on ``PYTHONPATH``; ``make kafka-fetch`` runs ``fetch``)::

    python -m frazil_dev.kafka_broker fetch                      # the jars into the cache
    python -m frazil_dev.kafka_broker start --dir .run/kafka   # prints the bootstrap
    python -m frazil_dev.kafka_broker stop --dir .run/kafka
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from frazil.spark import maven

log = logging.getLogger(__name__)

KAFKA_VERSION = os.environ.get("FRAZIL_KAFKA_VERSION", "4.1.2")
LOG4J_VERSION = "2.24.3"
START_TIMEOUT_S = 120.0

_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{path}">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.coordinator" level="WARN"/>
  </Loggers>
</Configuration>
"""


class BrokerError(RuntimeError):
    """The local broker could not be fetched, formatted or started."""


def ensure_jars(version: str = KAFKA_VERSION) -> Path:
    """Fetch the broker's jars into the cache (once) and return the lib directory."""
    log4j = [maven.Artifact("org.apache.logging.log4j", name, LOG4J_VERSION)
             for name in ("log4j-api", "log4j-core", "log4j-slf4j-impl")]
    try:
        return maven.fetch(f"kafka-{version}", [maven.Artifact("org.apache.kafka", "kafka_2.13", version), *log4j])
    except maven.FetchError as exc:
        raise BrokerError(str(exc)) from exc


def new_cluster_id() -> str:
    """A random KRaft cluster id. Like Kafka's own generator, never one that starts with '-',
    which the storage tool would read as an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# The secure listeners' one user (tests only: a throwaway broker on 127.0.0.1).
SASL_USER = "frazil-test"
SASL_PASSWORD = "frazil-test-secret"
CLIENT_KEY_PASSWORD = "frazil-test-client-key"
_STORE_PASSWORD = "frazil-test-store"


@dataclass(frozen=True)
class SecurePorts:
    """The extra listeners of a broker started with ``secure=True``: SASL (PLAIN, SCRAM-SHA-256 and
    SCRAM-SHA-512 for ``SASL_USER``) without and with TLS, and TLS requiring a client certificate;
    the TLS ones with a self-signed certificate for 127.0.0.1 and localhost whose PEM is
    ``ca_file``."""

    sasl_plaintext: int
    sasl_ssl: int
    ca_file: Path
    oauth: int = 0   # the OAUTHBEARER listener (SASL_PLAINTEXT), when started with ``oauth``
    mtls: int = 0    # the mutual-TLS listener (SSL, a client certificate signed by ``client_ca`` required)
    client_cert: Path = Path()   # a client certificate the mTLS listener accepts (PEM) ...
    client_key: Path = Path()    # ... and its key (PEM, encrypted with CLIENT_KEY_PASSWORD)


@dataclass(frozen=True)
class OAuthValidation:
    """How the OAUTHBEARER listener checks tokens: their signature against the identity provider's
    keys (``jwks_url``), their issuer and audience, and a session lifetime (``reauth_ms``) after which a
    connection must authenticate again; a client that cannot re-authenticate on an open connection
    (aiokafka) is disconnected then, and connects again with a token it holds by then."""

    jwks_url: str
    issuer: str
    audience: str
    reauth_ms: int = 0


def _make_certificate(workdir: Path) -> Path:
    """A self-signed certificate for the TLS listener (keytool comes with the JDK that runs the
    broker): the PKCS12 keystore for the broker, its certificate as PEM for the clients."""
    store, pem = workdir / "broker.p12", workdir / "ca.pem"
    for args in (["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "30",
                  "-dname", "CN=localhost", "-ext", "SAN=IP:127.0.0.1,DNS:localhost", "-storetype", "PKCS12",
                  "-keystore", str(store), "-storepass", _STORE_PASSWORD],
                 ["-exportcert", "-rfc", "-alias", "broker", "-keystore", str(store), "-storepass", _STORE_PASSWORD,
                  "-file", str(pem)]):
        _tool("keytool", *args)
    return pem


def _tool(name: str, *args: str) -> None:
    """Run keytool or openssl; a failure is a ``BrokerError`` with what it printed."""
    done = subprocess.run([name, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise BrokerError(f"{name} {args[0]} failed: {done.stdout}{done.stderr}")


def _openssl(*args: str) -> None:
    _tool("openssl", *args)


def client_certificate(workdir: Path, name: str) -> tuple[Path, Path, Path]:
    """A client CA, and a client certificate ``CN=<name>`` it signed with its key encrypted with
    CLIENT_KEY_PASSWORD, all PEM: (ca, certificate, key)."""
    ca_key, ca, key, request, cert = (workdir / f"{name}-{part}" for part in
                                      ("ca.key", "ca.pem", "client.key", "client.csr", "client.pem"))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", f"/CN={name}-ca",
             "-keyout", str(ca_key), "-out", str(ca))
    _openssl("req", "-newkey", "rsa:2048", "-subj", f"/CN={name}", "-passout", f"pass:{CLIENT_KEY_PASSWORD}",
             "-keyout", str(key), "-out", str(request))
    _openssl("x509", "-req", "-days", "30", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", str(cert))
    return ca, cert, key


def _trust_store(workdir: Path, ca: Path) -> Path:
    """The mTLS listener's truststore: the client CA alone."""
    store = workdir / "clients.p12"
    _tool("keytool", "-importcert", "-noprompt", "-alias", "clients", "-file", str(ca), "-storetype", "PKCS12",
          "-keystore", str(store), "-storepass", _STORE_PASSWORD)
    return store


def _secure_settings(workdir: Path, ports: SecurePorts) -> dict[str, str]:
    plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
             f'username="{SASL_USER}" password="{SASL_PASSWORD}" user_{SASL_USER}="{SASL_PASSWORD}";')
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    settings = {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(workdir / "broker.p12"),
        "ssl.keystore.password": _STORE_PASSWORD,
        "ssl.key.password": _STORE_PASSWORD,
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        settings[f"listener.name.{listener}.plain.sasl.jaas.config"] = plain
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            settings[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = scram
    settings.update({"listener.name.mtls.ssl.client.auth": "required",
                     "listener.name.mtls.ssl.truststore.type": "PKCS12",
                     "listener.name.mtls.ssl.truststore.location": str(workdir / "clients.p12"),
                     "listener.name.mtls.ssl.truststore.password": _STORE_PASSWORD})
    return settings


def _oauth_settings(oauth: OAuthValidation) -> dict[str, str]:
    prefix = "listener.name.oauth"
    return {
        f"{prefix}.sasl.enabled.mechanisms": "OAUTHBEARER",
        f"{prefix}.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        f"{prefix}.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": oauth.jwks_url,
        "sasl.oauthbearer.expected.issuer": oauth.issuer,
        "sasl.oauthbearer.expected.audience": oauth.audience,
        **({f"{prefix}.oauthbearer.connections.max.reauth.ms": str(oauth.reauth_ms)} if oauth.reauth_ms else {}),
    }


def _server_properties(data: Path, port: int, controller_port: int, secure: SecurePorts | None = None,
                       oauth: OAuthValidation | None = None, *, node_id: int = 1, voters: str = "",
                       replicas: int = 1) -> str:
    """One node's settings. ``voters`` (a cluster's ``controller.quorum.voters``; empty: this node
    alone) and ``replicas``: how many copies of each internal topic, and of topics created without
    a count; with more than one, writes need all but one of them (``min.insync.replicas``)."""
    listeners = f"PLAINTEXT://127.0.0.1:{port}"
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if secure is not None:
        listeners += (f",SASL_PLAINTEXT://127.0.0.1:{secure.sasl_plaintext},SASL_SSL://127.0.0.1:{secure.sasl_ssl}"
                      f",MTLS://127.0.0.1:{secure.mtls}")
        protocols += ",SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL"
        if oauth is not None:
            listeners += f",OAUTH://127.0.0.1:{secure.oauth}"
            protocols += ",OAUTH:SASL_PLAINTEXT"
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"{listeners},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": listeners,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": protocols,
        "log.dirs": str(data / "logs"),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        # every internal topic with as many replicas as nodes (one alone), so groups and transactions
        # work on one node and survive a node's loss on three
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(max(1, replicas - 1)),
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(max(1, replicas - 1)),
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(max(1, replicas - 1)),
        "group.initial.rebalance.delay.ms": "0",
        # lets tests use short session timeouts, so a SIGKILLed member leaves the group quickly
        "group.min.session.timeout.ms": "500",
        "log.cleaner.dedupe.buffer.size": "33554432",
        **(_secure_settings(data, secure) if secure is not None else {}),
        **(_oauth_settings(oauth) if oauth is not None else {}),
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


async def _serves_requests(bootstrap: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await admin.start()
        await admin.list_topics()
        return True
    except Exception:  # noqa: BLE001 - not serving yet, whatever the reason: the caller polls until its deadline
        return False
    finally:
        await admin.close()


@dataclass
class KafkaBroker:
    """A running broker process; ``stop`` is idempotent."""

    workdir: Path
    port: int
    controller_port: int
    pid: int
    _proc: subprocess.Popen[bytes] | None = None
    secure: SecurePorts | None = None
    heap: str = "512m"
    lib: Path | None = None   # the broker's jars (None: this version's, fetched if missing)
    # Java system properties: the URLs the OAUTHBEARER validator may fetch (Kafka 4 allows none by default)
    system: tuple[str, ...] = ()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, workdir: Path, *, version: str = KAFKA_VERSION, heap: str = "512m",
              secure: bool = False, oauth: OAuthValidation | None = None) -> KafkaBroker:
        """``secure``: also listen with SASL, with SASL over TLS, and with TLS requiring a client
        certificate (``SecurePorts``); with
        ``oauth`` (and ``secure``), also with SASL OAUTHBEARER, tokens checked as it says."""
        lib = ensure_jars(version)
        workdir = Path(workdir).resolve()
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        port, controller_port = free_port(), free_port()
        ports = None
        if secure:
            client_ca, client_cert, client_key = client_certificate(workdir, "frazil-client")
            _trust_store(workdir, client_ca)
            ports = SecurePorts(free_port(), free_port(), _make_certificate(workdir), free_port() if oauth else 0,
                                free_port(), client_cert, client_key)
        props = workdir / "server.properties"
        props.write_text(_server_properties(workdir, port, controller_port, ports, oauth))
        (workdir / "log4j2.xml").write_text(_LOG4J2.format(path=workdir / "server.log"))
        java = ["java", f"-Dlog4j2.configurationFile={workdir / 'log4j2.xml'}", "-cp", f"{lib}/*"]
        cluster_id = new_cluster_id()
        scram = ([arg for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
                  for arg in ("--add-scram", f"{mechanism}=[name={SASL_USER},password={SASL_PASSWORD}]")]
                 if secure else [])
        fmt = subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props), *scram],
                             capture_output=True, text=True)
        if fmt.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed:\n{fmt.stdout}{fmt.stderr}")
        system = (f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={oauth.jwks_url}",) if oauth else ()
        broker = cls(workdir, port, controller_port, 0, None, ports, heap, lib, system)
        broker._launch()
        return broker

    def _spawn(self) -> None:
        """Start the broker process on the formatted data directory."""
        java = ["java", f"-Xmx{self.heap}", "-XX:+UseSerialGC", *self.system,
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.xml'}", "-cp", f"{self.lib or ensure_jars()}/*"]
        with open(self.workdir / "stdout.log", "ab") as out:  # the child keeps its own handle
            self._proc = subprocess.Popen([*java, "kafka.Kafka", str(self.workdir / "server.properties")],
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self._proc.pid

    def _launch(self, *, spawned: bool = False) -> None:
        """Start the broker process (``spawned``: it is started already) and wait until it serves."""
        if not spawned:
            self._spawn()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        (self.workdir / "broker.json").write_text(json.dumps({"pid": self.pid, "port": self.port,
                                                              "controller_port": self.controller_port}))

    def restart(self, down_s: float = 0.0, *, kill: bool = False) -> None:
        """Stop the broker (SIGTERM, a controlled shutdown; ``kill``: SIGKILL, a crash), stay down
        ``down_s`` seconds, and start it again on the same data directory and ports: what a
        rolling restart or a crashed broker looks like to clients."""
        if kill and self._alive():
            os.kill(self.pid, signal.SIGKILL)
            if self._proc is not None:
                self._proc.wait()
        self.stop()
        time.sleep(down_s)
        self._launch()

    def _alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        try:
            os.kill(self.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self._alive():
                tail = (self.workdir / "stdout.log").read_text(errors="replace")[-3000:]
                raise BrokerError(f"the Kafka broker exited during start-up; see {self.workdir}:\n{tail}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError:
                time.sleep(0.3)
                continue
            if asyncio.run(_serves_requests(self.bootstrap)):
                return
            time.sleep(0.3)
        raise BrokerError(f"the Kafka broker did not serve requests within {START_TIMEOUT_S:.0f}s; see {self.workdir}")

    @classmethod
    def attach(cls, workdir: Path) -> KafkaBroker:
        state = json.loads((Path(workdir) / "broker.json").read_text())
        return cls(Path(workdir), state["port"], state["controller_port"], state["pid"])

    def stop(self, timeout: float = 30.0) -> None:
        if not self._alive():
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self._alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self._alive():
            log.warning("Kafka broker %d did not stop in %.0fs; killing it", self.pid, timeout)
            os.kill(self.pid, signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait()

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


@dataclass
class KafkaCluster:
    """Three (or ``size``) KRaft nodes, each a broker and a controller, on 127.0.0.1: every topic
    created without a count has a replica on each node and takes writes with one node down
    (``min.insync.replicas`` = size - 1). ``restart`` takes one node down and up again, the next
    one each time: the partitions it led move to another node meanwhile. Plain listeners only."""

    nodes: list[KafkaBroker]
    _next: int = 0

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @classmethod
    def start(cls, workdir: Path, *, size: int = 3, version: str = KAFKA_VERSION, heap: str = "384m") -> KafkaCluster:
        lib = ensure_jars(version)
        workdir = Path(workdir).resolve()
        shutil.rmtree(workdir, ignore_errors=True)
        ports = [(free_port(), free_port()) for _ in range(size)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{controller}" for i, (_, controller) in enumerate(ports))
        cluster_id = new_cluster_id()
        nodes = []
        for i, (port, controller) in enumerate(ports):
            home = workdir / f"node{i + 1}"
            home.mkdir(parents=True)
            props = home / "server.properties"
            props.write_text(_server_properties(home, port, controller, node_id=i + 1, voters=voters, replicas=size))
            (home / "log4j2.xml").write_text(_LOG4J2.format(path=home / "server.log"))
            fmt = subprocess.run(["java", f"-Dlog4j2.configurationFile={home / 'log4j2.xml'}", "-cp", f"{lib}/*",
                                  "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
                                 capture_output=True, text=True)
            if fmt.returncode != 0:
                raise BrokerError(f"formatting Kafka storage of node {i + 1} failed:\n{fmt.stdout}{fmt.stderr}")
            nodes.append(KafkaBroker(home, port, controller, 0, None, None, heap, lib))
        cluster = cls(nodes)
        try:
            for node in nodes:   # all at once: none serves before a quorum of controllers is up
                node._spawn()
            for node in nodes:
                node._launch(spawned=True)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def restart(self, down_s: float = 0.0, *, kill: bool = False) -> None:
        """Stop one node (SIGTERM; ``kill``: SIGKILL), ``down_s`` seconds, then start it again."""
        node = self.nodes[self._next % len(self.nodes)]
        self._next += 1
        log.info("restarting Kafka node %s (%s)", node.bootstrap, "SIGKILL" if kill else "SIGTERM")
        node.restart(down_s, kill=kill)

    def stop(self, timeout: float = 30.0) -> None:
        for node in self.nodes:
            node.stop(timeout)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m frazil_dev.kafka_broker", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("start", "stop", "fetch"):
        p = sub.add_parser(name)
        p.add_argument("--dir", type=Path, default=Path(".run/kafka"))
    args = parser.parse_args(argv)
    try:
        if args.cmd == "fetch":
            print(ensure_jars())
        elif args.cmd == "start":
            if (args.dir / "broker.json").exists():
                KafkaBroker.attach(args.dir).stop()
            broker = KafkaBroker.start(args.dir)
            broker._proc = None  # leave it running after this command exits
            print(broker.bootstrap)
        else:
            if (args.dir / "broker.json").exists():
                KafkaBroker.attach(args.dir).stop()
                (args.dir / "broker.json").unlink()
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
