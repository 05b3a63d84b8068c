"""Kafka's own performance tools (``org.apache.kafka:kafka-tools`` from Maven Central), run
against a broker: the Java producer writing real record batches with any codec (tests), and the
Java consumer's fetch rate, the ceiling a consumer on this machine can reach (``make bench``)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from frazil.spark import maven
from frazil_dev.kafka_broker import KAFKA_VERSION, BrokerError
from frazil_dev.kafka_broker import ensure_jars as broker_jars


def classpath(version: str = KAFKA_VERSION) -> str:
    """The tools' jar (fetched into the cache once) on the broker's classpath, which has the rest
    of what the tools need (the Java client with its codecs, argparse4j, jopt-simple)."""
    try:
        tools = maven.fetch(f"kafka-tools-{version}", [maven.Artifact("org.apache.kafka", "kafka-tools", version)],
                            transitive=False)
    except maven.FetchError as exc:
        raise BrokerError(str(exc)) from exc
    return f"{broker_jars(version)}/*:{tools}/*"


def _java(main: str, args: list[str], *, timeout_s: float) -> str:
    java = shutil.which("java")
    if java is None:
        raise BrokerError("java is needed to run Kafka's tools; install a JDK 17 or newer")
    cmd = [java, "-Xmx1g", "-cp", classpath(), main, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise BrokerError(f"{main.rsplit('.', 1)[-1]} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def produce(bootstrap: str, topic: str, payload_file: Path, records: int, *, props: dict[str, str] | None = None,
            transactional_id: str | None = None, timeout_s: float = 300.0) -> None:
    """``records`` values from ``payload_file`` (one per line, picked at random by the tool) with
    the Java producer; ``props`` are producer settings (``compression.type``, ``linger.ms``...)."""
    settings = {"bootstrap.servers": bootstrap, "acks": "all", **(props or {})}
    args = ["--topic", topic, "--num-records", str(records), "--throughput", "-1",
            "--payload-file", str(payload_file), "--payload-delimiter", "\n",
            "--producer-props", *(f"{k}={v}" for k, v in settings.items())]
    if transactional_id is not None:
        args += ["--transactional-id", transactional_id, "--transaction-duration-ms", "200"]
    _java("org.apache.kafka.tools.ProducerPerformance", args, timeout_s=timeout_s)


@dataclass(frozen=True)
class ConsumeRate:
    """What the Java consumer performance tool reports: records and MB fetched, and the rate of
    its fetch phase (after the group rebalance)."""

    records: int
    mb: float
    fetch_s: float
    records_per_s: float
    mb_per_s: float


def consume_rate(bootstrap: str, topic: str, records: int, *, group: str, workdir: Path,
                 fetch_bytes: int = 4 * 1024 * 1024, timeout_s: float = 600.0) -> ConsumeRate:
    """Read ``records`` records of ``topic`` with Kafka's ``ConsumerPerformance`` (read_committed
    and the partition fetch size frazil uses) and return its figures."""
    config = workdir / f"{group}.properties"
    config.write_text("isolation.level=read_committed\nauto.offset.reset=earliest\n")
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records), "--group", group,
            "--timeout", "60000", "--fetch-size", str(fetch_bytes), "--consumer.config", str(config)]
    out = _java("org.apache.kafka.tools.ConsumerPerformance", args, timeout_s=timeout_s)
    lines = out.strip().splitlines()
    if len(lines) < 2:
        raise BrokerError(f"ConsumerPerformance printed no result: {out.strip()[-1000:]}")
    try:
        # the header and the figures: a row of another length is a format this does not read
        row = dict(zip((c.strip() for c in lines[-2].split(",")), (c.strip() for c in lines[-1].split(",")),
                       strict=True))
        fetch_s = float(row["fetch.time.ms"]) / 1000
        return ConsumeRate(records=int(row["data.consumed.in.nMsg"]), mb=float(row["data.consumed.in.MB"]),
                           fetch_s=fetch_s, records_per_s=float(row["fetch.nMsg.sec"]),
                           mb_per_s=float(row["fetch.MB.sec"]))
    except (KeyError, ValueError) as exc:
        raise BrokerError(f"ConsumerPerformance's result is not as expected ({exc}): {out.strip()[-1000:]}") from exc
