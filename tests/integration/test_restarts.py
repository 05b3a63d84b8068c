"""A pipeline whose tables take different topics, and whose other tables are named by the records
(``[dynamic]``), stopped (SIGTERM) and started again several times while records keep coming: after
each restart it fetches no record that every table taking it already holds. Each partition is
positioned where ``frazil offsets`` says a restart resumes, which is where the tables are: a
static table's own offset, and for the tables named by the records the pipeline's watermark, kept
with the data of the last cycle. At the end every record is in its table exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import support
from frazil import daemon
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import offsets
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration]

TOPICS = {"rs-a": 2, "rs-b": 2, "rs-d": 2}
STATIC = {"rs-a": "db.rs_a", "rs-b": "db.rs_b"}
KINDS = ("x", "y", "z")

CONFIG = """
[pipeline]
name = "rs"
commit_interval_s = 0.5

[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["rs-a", "rs-b", "rs-d"]
session_timeout_ms = 6000
heartbeat_interval_ms = 1000

[catalog]
properties = {{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }}

[maintenance]
enabled = false

[[tables]]
name = "db.rs_a"
topics = "rs-a"
columns = [{{name = "id", type = "long", required = true}}, {{name = "kind", type = "string"}}]

[[tables]]
name = "db.rs_b"
topics = "rs-b"
columns = [{{name = "id", type = "long", required = true}}, {{name = "kind", type = "string"}}]

[dynamic]
table = "db.rs_kind_{{kind}}"
topics = "rs-d"
"""


class Producer(threading.Thread):
    """Produces to every topic in small rounds until stopped: the load the restarts happen under."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.stop, self.sent = bootstrap, threading.Event(), 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc

    async def _run(self) -> None:
        while not self.stop.is_set():
            for topic, partitions in TOPICS.items():
                values = [json.dumps({"id": self.sent + i, "kind": KINDS[(self.sent + i) % len(KINDS)]}).encode()
                          for i in range(60)]
                await support.produce(self.bootstrap, topic, values, partitions)
            self.sent += 60
            await asyncio.sleep(0.1)


def frazil(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "frazil.cli", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def resumes(text: str) -> dict[tuple[str, int], tuple[int, int]]:
    """``frazil offsets``: per partition the watermark and where a restart resumes."""
    out = {}
    section = False
    for line in text.splitlines():
        if line.startswith("pipeline rs"):
            section = True
        elif section and (m := re.match(r"  (\S+) +(\d+) +(\d+) +(\d+) ", line)):
            out[(m.group(1), int(m.group(2)))] = (int(m.group(3)), int(m.group(4)))
    return out


def positioned(log: str) -> dict[tuple[str, int], int]:
    """Where the run's source positioned each partition, from its log."""
    out: dict[tuple[str, int], int] = {}
    for m in re.finditer(r"positioned \d+ partition\(s\): (.*?) from the table, (\d+) new", log):
        for t, p, o in re.findall(r"(\S+)\[(\d+)\]@(\d+)", m.group(1)):
            out[(t, int(p))] = int(o)
    return out


def stored_by_table(path: Path) -> dict[str, dict[tuple[str, int], int]]:
    cfg = support.load(path)
    catalog = iceberg_catalog.load(cfg.catalog)
    try:
        names = [n for _, n in catalog.list_tables("db")]
        return {f"db.{n}": offsets.stored_offsets(catalog.load_table(f"db.{n}").properties, cfg.pipeline)
                for n in names}
    finally:
        support.close_catalog(catalog)


def test_restarts_under_load_fetch_nothing_every_table_taking_it_holds(kafka: KafkaBroker, tmp_path: Path) -> None:
    for topic, partitions in TOPICS.items():
        asyncio.run(support.create_topic(kafka.bootstrap, topic, partitions))
    path = tmp_path / "frazil.toml"
    path.write_text(CONFIG.format(bootstrap=kafka.bootstrap))
    producer = Producer(kafka.bootstrap)
    producer.start()
    said: dict[tuple[str, int], tuple[int, int]] = {}
    try:
        for run in range(4):
            log_path = tmp_path / f"run{run}.log"
            with log_path.open("w") as log:
                proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(path)],
                                        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
            def committed(log_path: Path = log_path) -> None:
                assert log_path.read_text().count("settled:") >= 3, "not three cycles yet"

            try:
                support.wait_for(committed, proc, log_path, timeout=120)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(90)
            text = log_path.read_text()
            assert proc.returncode == 0, text[-4000:]
            at = positioned(text)
            if run:
                # positioned exactly where the last stop left every table, as frazil offsets said
                assert at == {tp: resume for tp, (_, resume) in said.items()}, (at, said)
            stored = stored_by_table(path)
            said = resumes(frazil("offsets", "--config", str(path), cwd=tmp_path))
            assert set(said) == {(t, p) for t, n in TOPICS.items() for p in range(n)}, said
            for (topic, partition), (watermark, resume) in said.items():
                tp = (topic, partition)
                if topic in STATIC:   # the one table that takes the topic decides
                    assert resume == stored[STATIC[topic]][tp], (tp, resume, stored)
                else:   # named by the records: the watermark, past everything any of them holds
                    held = [o[tp] for name, o in stored.items() if name.startswith("db.rs_kind_") and tp in o]
                    assert held and resume == watermark >= max(held), (tp, watermark, resume, stored)
    finally:
        producer.stop.set()
        producer.join(60)
    assert producer.error is None, producer.error
    # the last run lands the rest; every record is in its table once
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, list(TOPICS)))
    asyncio.run(daemon.serve(support.load(path), asyncio.Event(), until=ends))
    catalog = iceberg_catalog.load(support.load(path).catalog)
    try:
        seen: dict[tuple[str, int, int], int] = {}
        for name in stored_by_table(path):
            for key, n in support.count_offsets(catalog, name).items():
                seen[key] = seen.get(key, 0) + n
    finally:
        support.close_catalog(catalog)
    assert set(seen.values()) == {1}, {k: n for k, n in seen.items() if n != 1}
    assert set(seen) == {(t, p, o) for (t, p), end in ends.items() for o in range(end)}
