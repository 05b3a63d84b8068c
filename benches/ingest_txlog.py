"""What the transaction log costs on ingest: the same pre-filled topic landed by ``frazil run``
with the log fsynced on every append (the default) and with fsync off, side by side in one run.

Each configuration gets its own table and pipeline name over the same records. A short commit
interval (0.2 s) makes commits, and so log appends, as frequent as a busy pipeline's. Records/s
is counted from process start to the table holding every record (start-up included, the same
for both). Writes ``benches/results/ingest_txlog.json``.

    python benches/ingest_txlog.py [--records N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import _dev  # noqa: F401 - dev/ on the path, for frazil_dev
import _results
from frazil import config as config_mod
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import offsets
from frazil.status import end_offsets
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.workload import CLICKSTREAM_COLUMNS, create_topic, produce, sample_events

CONFIG = """\
[pipeline]
name = "{name}"
commit_interval_s = {interval}
txlog_fsync = "{fsync}"
[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["bench"]
[catalog]
properties = {{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }}
[table]
name = "bench.{name}"
{columns}
"""


def land(workdir: Path, bootstrap: str, name: str, fsync: str, interval: float, ends: dict, records: int) -> dict:
    path = workdir / f"{name}.toml"
    path.write_text(CONFIG.format(name=name, fsync=fsync, interval=interval, bootstrap=bootstrap,
                                   columns=CLICKSTREAM_COLUMNS))
    cfg = config_mod.load(path)
    catalog = iceberg_catalog.load(cfg.catalog)
    started = time.perf_counter()
    with open(workdir / f"{name}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(path)], stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"frazil run exited with {proc.returncode}; see {workdir / (name + '.log')}")
            try:
                stored = offsets.stored_offsets(catalog.load_table(cfg.table.name).properties, cfg.pipeline)
            except Exception:  # noqa: BLE001 - not created yet
                stored = {}
            if all(stored.get(tp, 0) >= end for tp, end in ends.items()):
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    commits = sum(1 for _ in catalog.load_table(cfg.table.name).snapshots())
    return {"txlog_fsync": fsync, "commit_interval_s": interval, "records": records, "seconds": round(elapsed, 2),
            "records_per_s": round(records / elapsed), "commits": commits}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_500_000)
    args = parser.parse_args()
    workdir = Path(".run/bench-ingest-txlog").resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rows = []
    with KafkaBroker.start(workdir / "kafka") as broker:
        asyncio.run(create_topic(broker.bootstrap, "bench", 6))
        asyncio.run(produce(broker.bootstrap, "bench", sample_events(args.records), partitions=6))
        ends = asyncio.run(end_offsets(broker.bootstrap, ["bench"]))
        runs = [("fsync_always", "always", 0.2), ("fsync_never", "never", 0.2), ("fsync_always_b", "always", 0.2),
                ("fsync_never_b", "never", 0.2), ("many_commits_always", "always", 0.1),
                ("many_commits_never", "never", 0.1)]
        print(f"{'run':<22}{'fsync':>8}{'interval':>10}{'seconds':>9}{'records/s':>12}{'commits':>9}")
        for name, fsync, interval in runs:
            row = {"run": name, **land(workdir, broker.bootstrap, name, fsync, interval, ends, args.records)}
            rows.append(row)
            print(f"{name:<22}{fsync:>8}{interval:>10}{row['seconds']:>9}{row['records_per_s']:>12,}{row['commits']:>9}",
                  flush=True)
    _results.write("ingest_txlog", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
