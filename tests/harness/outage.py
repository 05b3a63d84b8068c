"""A catalog outage under steady load, measured: ``make outage`` and the outage test run this.

``frazil run`` ingests a steady stream while, for ``outage_s`` seconds, another connection holds
an exclusive lock on the SQLite catalog (every pyiceberg read and write fails with "database is
locked"). The run records the process's peak RSS, counts rebalances (assignments after the first)
and pauses from its log, waits until the table holds everything, and counts every
(partition, offset) in the table with an independent scan. In either coordination mode: single
(worker and coordinator in process) or distributed (the same roles over the control topic).

    PYTHONPATH=tests:dev python -m harness.outage [--mode both] [--outage-s 60] [--budget-mb 32] \\
        [--out benches/results/outage.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from frazil import config as config_mod
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import offsets
from frazil.status import end_offsets
from frazil_dev.kafka_broker import free_port
from frazil_dev.workload import CLICKSTREAM_COLUMNS, create_topic, sample_events

PARTITIONS = 4
MODES = ("single", "distributed")

CONFIG = """\
[pipeline]
name = "{topic}"
commit_interval_s = 1.0
memory_budget_mb = {budget_mb}
outage_timeout_s = 600

[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]

[metrics]
port = {metrics_port}

[catalog]
properties = {{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }}

[coordination]
mode = "{mode}"

[table]
name = "ops.{topic_ident}"
{columns}
"""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _produce_steadily(bootstrap: str, topic: str, values: list[bytes], seconds: float) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        ticks = max(1, int(seconds / 0.25))
        per_tick = len(values) // ticks + 1
        started = time.monotonic()
        for t in range(ticks):
            chunk = values[t * per_tick:(t + 1) * per_tick]
            await asyncio.gather(*[await producer.send(topic, v, partition=(t * per_tick + i) % PARTITIONS)
                                   for i, v in enumerate(chunk)])
            await asyncio.sleep(max(0.0, started + (t + 1) * 0.25 - time.monotonic()))
    finally:
        await producer.stop()


def scrape(port: int) -> dict[str, float]:
    """The pipeline's metrics as ``{"name{label=value,...}": value}`` (labels other than pipeline and table)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            extra = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k not in ("pipeline", "table"))
            out[sample.name + (f"{{{extra}}}" if extra else "")] = sample.value
    return out


def _hold_catalog_lock(db: Path, seconds: float, held: threading.Event) -> None:
    conn = sqlite3.connect(db, timeout=60, isolation_level=None)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


def _tail(path: Path, lines: int = 40) -> str:
    """The last lines of frazil's log, so a failure in CI shows its cause, not a path gone with the machine."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run(bootstrap: str, workdir: Path, *, mode: str = "single", outage_s: float = 60.0, budget_mb: int = 64,
        rate: int = 4000, before_s: float = 20.0, after_s: float = 20.0, say: Any = print) -> dict[str, Any]:
    assert mode in MODES, mode
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "frazil.toml"
    metrics_port = free_port()
    topic = f"outage-{mode}"
    config_path.write_text(CONFIG.format(bootstrap=bootstrap, topic=topic, topic_ident=topic.replace("-", "_"),
                                         mode=mode, budget_mb=budget_mb, metrics_port=metrics_port,
                                         columns=CLICKSTREAM_COLUMNS))
    cfg = config_mod.load(config_path)
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
    produce_s = before_s + outage_s + after_s
    values = sample_events(int(rate * produce_s), seed=5)
    log_path = workdir / "frazil.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config_path)],
                                stdout=log_file, stderr=subprocess.STDOUT)
    peak = [0.0]
    sampling = threading.Event()
    seen: dict[str, float] = {}   # the largest value each metric showed
    last: dict[str, float] = {}

    def sample() -> None:
        ticks = 0
        while not sampling.is_set() and proc.poll() is None:
            peak[0] = max(peak[0], _rss_mb(proc.pid))
            ticks += 1
            if ticks % 5 == 0:
                try:
                    last.update(scrape(metrics_port))
                except OSError:
                    pass  # not listening yet
                for name, value in last.items():
                    seen[name] = max(seen.get(name, value), value)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    producer = threading.Thread(target=lambda: asyncio.run(_produce_steadily(bootstrap, topic, values, produce_s)),
                                daemon=True)
    try:
        producer.start()
        say(f"{mode} mode: producing {len(values):,} records over {produce_s:.0f}s; catalog outage of "
            f"{outage_s:.0f}s after {before_s:.0f}s")
        time.sleep(before_s)
        held = threading.Event()
        locker = threading.Thread(target=_hold_catalog_lock, args=(Path(cfg.catalog.properties["uri"][len("sqlite:///"):]),
                                                                    outage_s, held), daemon=True)
        locker.start()
        if not held.wait(60):
            raise RuntimeError("could not lock the catalog to start the outage")
        say(f"catalog locked at {time.strftime('%X')}; peak RSS so far {peak[0]:.0f} MB")
        locker.join()
        say(f"catalog unlocked; peak RSS {peak[0]:.0f} MB")
        producer.join()
        ends = asyncio.run(end_offsets(bootstrap, [topic]))
        catalog = iceberg_catalog.load(cfg.catalog)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"frazil run exited with {proc.returncode}; the end of {log_path}:\n"
                                   f"{_tail(log_path)}")
            stored = offsets.stored_offsets(catalog.load_table(cfg.table.name).properties, cfg.pipeline)
            if all(stored.get(tp, 0) >= end for tp, end in ends.items()):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"not everything committed within 300s after the outage; the end of {log_path}:\n"
                               f"{_tail(log_path)}")
        # The table is the truth and holds everything; the worker counts a commit when it settles
        # its reply on CommitComplete, a moment later. Give it 30 s to catch up (the test then
        # checks that the counters match the table).
        settle_deadline = time.monotonic() + 30
        final_metrics = scrape(metrics_port)
        while (final_metrics.get("frazil_rows_committed_total", 0.0) < sum(ends.values())
               and time.monotonic() < settle_deadline):
            time.sleep(0.2)
            final_metrics = scrape(metrics_port)
    finally:
        sampling.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    data = catalog.load_table(cfg.table.name).scan(selected_fields=("_kafka_partition", "_kafka_offset")).to_arrow()
    counts = Counter(zip(data.column("_kafka_partition").to_pylist(), data.column("_kafka_offset").to_pylist(),
                         strict=True))
    expected = {(p, o) for (_, p), end in ends.items() for o in range(end)}
    log_text = log_path.read_text(errors="replace")
    result = {
        "mode": mode,
        "outage_s": outage_s,
        "rss_peak_mb": round(peak[0], 1),
        "budget_mb": budget_mb,
        "rebalances": max(0, log_text.count("positioned ") - 1),
        "records_produced": sum(ends.values()),
        "lost": len(expected - set(counts)),
        "duplicates": sum(n - 1 for n in counts.values() if n > 1),
        "pauses": log_text.count("pausing all partitions"),
        "failed_commit_cycles": log_text.count("did not land:"),
        "rows": data.num_rows,
        "metrics": {
            "paused_seen": seen.get("frazil_paused", 0.0),
            "commit_failing_seconds_max": round(seen.get("frazil_commit_failing_seconds", 0.0), 1),
            "memory_bytes_max": seen.get("frazil_memory_bytes", 0.0),
            "pauses_total": final_metrics.get("frazil_pauses_total", 0.0),
            "failed_commits_total": final_metrics.get("frazil_commits_total{result=failed}", 0.0),
            "rows_committed_total": final_metrics.get("frazil_rows_committed_total", 0.0),
            "partition_assignments_total": final_metrics.get("frazil_partition_assignments_total", 0.0),
        },
    }
    say(json.dumps(result))
    return result


def main() -> int:
    from frazil_dev.kafka_broker import KafkaBroker

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--budget-mb", type=int, default=32)
    parser.add_argument("--workdir", type=Path, default=Path(".run/outage"))
    parser.add_argument("--out", type=Path, default=Path("benches/results/outage.json"))
    args = parser.parse_args()
    import shutil

    shutil.rmtree(args.workdir, ignore_errors=True)
    modes = MODES if args.mode == "both" else (args.mode,)
    results = {}
    with KafkaBroker.start(args.workdir / "kafka") as broker:
        for mode in modes:
            results[mode] = run(broker.bootstrap, args.workdir / mode, mode=mode, outage_s=args.outage_s,
                                budget_mb=args.budget_mb)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    ok = all(r["lost"] == 0 and r["duplicates"] == 0 and r["rebalances"] == 0 and r["rows"] == r["records_produced"]
             for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
