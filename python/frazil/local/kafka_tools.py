"""Kafka's own performance tools (``org.apache.kafka:kafka-tools`` from Maven Central), run
against a broker: the Java producer writing real record batches with any codec (tests), and the
Java consumer's fetch rate, the ceiling a consumer on this machine can reach (``make bench``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from frazil.local import maven
from frazil.local.kafka_broker import KAFKA_VERSION, BrokerError


def ensure_jars(version: str = KAFKA_VERSION) -> Path:
    """Fetch the tools' jars (with the Java client) into the cache, once; the lib directory."""
    try:
        return maven.fetch(f"kafka-tools-{version}", [maven.Artifact("org.apache.kafka", "kafka-tools", version)])
    except maven.FetchError as exc:
        raise BrokerError(str(exc)) from exc


def _java(main: str, args: list[str], *, timeout_s: float) -> str:
    java = shutil.which("java")
    if java is None:
        raise BrokerError("java is needed to run Kafka's tools; install a JDK 17 or newer")
    cmd = [java, "-Xmx512m", "-cp", f"{ensure_jars()}/*", main, *args]
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
    # header then one CSV line: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
    # nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    rows = [line for line in out.splitlines() if re.match(r"^\d{4}-", line.strip())]
    if not rows:
        raise BrokerError(f"ConsumerPerformance printed no result line: {out.strip()[-1000:]}")
    cells = [c.strip() for c in rows[-1].split(",")]
    mb, n, fetch_ms, fetch_mb_s, fetch_n_s = float(cells[2]), int(cells[4]), float(cells[7]), float(cells[8]), float(cells[9])
    return ConsumeRate(records=n, mb=mb, fetch_s=fetch_ms / 1000, records_per_s=fetch_n_s, mb_per_s=fetch_mb_s)
