"""The multi-process kill run: several ``frazil run`` workers in distributed mode on one topic,
one SIGKILLed every few seconds and restarted, while records stream in; then an independent read
of the table counts every (topic, partition, offset).

    python -m harness.eos [--records 1000000] [--workers 3] [--kills 30]   # make eos

Writes ``benches/results/eos.json``: kills, records_produced, rows, distinct_offsets, lost,
duplicates, snapshots_per_cycle_max (snapshots carrying the same commit id, at most 1 when every
table is committed once per cycle).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frazil import config as config_mod
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import offsets
from frazil.status import end_offsets
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.workload import create_topic, produce

log = logging.getLogger(__name__)

TOPIC = "eos"
CONFIG = """\
[pipeline]
name = "{pipeline}"
commit_interval_s = {interval}
txlog_dir = "{workdir}/txlog/{worker}"
log_level = "INFO"
{pipeline_extra}
[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
client_id = "{pipeline}-{worker}"
session_timeout_ms = 3000
heartbeat_interval_ms = 500

[catalog]
properties = {{ uri = "sqlite:///{workdir}/warehouse/catalog.db", warehouse = "file://{workdir}/warehouse" }}

[coordination]
mode = "distributed"
commit_timeout_s = {timeout}

[maintenance]
enabled = false

[table]
name = "eos.events"
columns = [
  {{ name = "id", type = "long", required = true }},
  {{ name = "name", type = "string" }},
]
"""


def record(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i % 97}"}).encode()


@dataclass
class Workers:
    """The worker processes, each restartable under its own name."""

    workdir: Path
    env: dict[str, str]
    topic: str = TOPIC
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def config(self, name: str) -> Path:
        return self.workdir / f"{name}.toml"

    def start(self, name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.workdir / f"{name}.log", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(self.config(name))],
                                    stdout=out, stderr=subprocess.STDOUT, env={**self.env, **(extra_env or {})})
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()

    def exited(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def stop_all(self) -> dict[str, int]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes

    def tail(self, name: str, chars: int = 3000) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")[-chars:]


def setup(workdir: Path, bootstrap: str, workers: int, *, interval: float = 1.0, timeout: float = 5.0,
          partitions: int = 12, topic: str = TOPIC, pipeline_extra: str = "") -> Workers:
    """``pipeline_extra``: more ``[pipeline]`` keys, as TOML lines."""
    workdir.mkdir(parents=True, exist_ok=True)
    asyncio.run(create_topic(bootstrap, topic, partitions))
    env = dict(os.environ)
    group = Workers(workdir, env, topic)
    for i in range(workers):
        name = f"w{i}"
        # the pipeline is named after the topic: runs on one broker must not share a control topic,
        # a coordinator transactional id or a consumer group (a coordinator would finish another
        # run's open cycle into this run's table)
        group.config(name).write_text(CONFIG.format(interval=interval, workdir=workdir, worker=name,
                                                    bootstrap=bootstrap, topic=topic, timeout=timeout, pipeline=topic,
                                                    pipeline_extra=pipeline_extra))
    return group


def count(workdir: Path) -> dict[str, Any]:
    """The independent read: every (topic, partition, offset) in the table, and snapshots per commit id."""
    cfg = config_mod.load(workdir / "w0.toml")
    table = iceberg_catalog.load(cfg.catalog).load_table(cfg.table.name)
    data = table.scan(selected_fields=("_kafka_topic", "_kafka_partition", "_kafka_offset")).to_arrow()
    counts = Counter(zip(data.column("_kafka_topic").to_pylist(), data.column("_kafka_partition").to_pylist(),
                         data.column("_kafka_offset").to_pylist(), strict=True))
    per_commit = Counter(s.summary.additional_properties.get(offsets.COMMIT_ID_KEY) for s in table.snapshots()
                         if s.summary is not None and s.summary.operation.value == "append")
    return {"counts": counts, "snapshots_per_cycle_max": max(per_commit.values(), default=0),
            "stored": offsets.stored_offsets(table.properties, cfg.pipeline), "cycles": len(per_commit)}


def stored(workdir: Path) -> dict[tuple[str, int], int]:
    """The table's offsets now ({} before the table exists)."""
    cfg = config_mod.load(workdir / "w0.toml")
    try:
        return offsets.stored_offsets(iceberg_catalog.load(cfg.catalog).load_table(cfg.table.name).properties,
                                      cfg.pipeline)
    except Exception:  # noqa: BLE001 - not created yet
        return {}


def verdict(counts: Counter[tuple[str, int, int]], ends: dict[tuple[str, int], int]) -> dict[str, int]:
    expected = {(t, p, o) for (t, p), end in ends.items() for o in range(end)}
    return {"rows": sum(counts.values()), "distinct_offsets": len(counts), "lost": len(expected - set(counts)),
            "duplicates": sum(n - 1 for n in counts.values() if n > 1), "unexpected": len(set(counts) - expected)}


def wait_committed(workdir: Path, ends: dict[tuple[str, int], int], group: Workers, timeout: float, *,
                   restart_killed: bool = False) -> None:
    """Until the table's offsets reach ``ends``. A worker that exits fails the wait, unless it was
    SIGKILLed (by an armed fault point) and ``restart_killed``: then it comes back without faults."""
    deadline = time.monotonic() + timeout
    have: dict[tuple[str, int], int] = {}
    while time.monotonic() < deadline:
        have = stored(workdir)
        if all(have.get(tp, 0) >= end for tp, end in ends.items()):
            return
        dead = group.exited()
        for name in [n for n, code in dead.items() if code == -signal.SIGKILL and restart_killed]:
            group.start(name, {"FRAZIL_FAULTS": ""})
            del dead[name]
        if dead:
            raise RuntimeError(f"worker(s) exited by themselves: {dead}; tail of {next(iter(dead))}:\n"
                               f"{group.tail(next(iter(dead)))}")
        time.sleep(0.5)
    raise RuntimeError(f"not committed within {timeout:.0f}s: have {have}, want {ends}")


def kill_run(workdir: Path, bootstrap: str, *, records: int, workers: int, kills: int, seed: int,
             progress: bool = True, topic: str = TOPIC) -> dict[str, Any]:
    rng = random.Random(seed)
    group = setup(workdir, bootstrap, workers, topic=topic)
    for i in range(workers):
        group.start(f"w{i}")
    produced = threading.Event()
    errors: list[BaseException] = []
    chunks = max(kills, 20)

    def producer() -> None:   # production spans the kill phase: one chunk per kill interval or so
        try:
            per = records // chunks
            for c in range(chunks):
                n = per if c < chunks - 1 else records - per * (chunks - 1)
                asyncio.run(produce(bootstrap, topic, (record(i) for i in range(c * per, c * per + n)),
                                    partitions=12, label=None))
                time.sleep(2.5)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            produced.set()

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    done = 0
    started = time.monotonic()
    try:
        while done < kills or not produced.is_set():
            time.sleep(rng.uniform(2.0, 5.0))
            dead = group.exited()
            if dead:
                raise RuntimeError(f"worker(s) exited by themselves: {dead}; tail:\n{group.tail(next(iter(dead)))}")
            victim = f"w{rng.randrange(workers)}"
            group.kill(victim)
            group.start(victim)
            done += 1
            if progress:
                print(f"  kill {done}: SIGKILL {victim} at {time.monotonic() - started:.0f}s"
                      f"{'' if produced.is_set() else ' (still producing)'}", flush=True)
        kills_ended = time.monotonic()
        landed_during_kills = sum(stored(workdir).values())   # progress under fire
        thread.join()
        if errors:
            raise errors[0]
        ends = asyncio.run(end_offsets(bootstrap, [topic]))
        wait_committed(workdir, ends, group, timeout=300)
        catch_up_s = time.monotonic() - kills_ended
    finally:
        codes = group.stop_all()   # never leave workers behind, whatever failed
    found = count(workdir)
    result = {"kills": done, "records_produced": sum(ends.values()), **verdict(found["counts"], ends),
              "snapshots_per_cycle_max": found["snapshots_per_cycle_max"], "cycles": found["cycles"],
              "stored_equals_end": found["stored"] == ends, "exit_codes": codes, "seed": seed,
              "kill_phase_s": round(kills_ended - started, 1), "landed_during_kills": landed_during_kills,
              "catch_up_s": round(catch_up_s, 1)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.eos", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=Path(".run/eos"))
    parser.add_argument("--out", type=Path, default=Path("benches/results/eos.json"))
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    shutil.rmtree(args.dir, ignore_errors=True)
    print(f"eos: {args.workers} workers, {args.records:,} records, at least {args.kills} SIGKILLs (seed {seed})",
          flush=True)
    with KafkaBroker.start(args.dir / "kafka") as broker:
        result = kill_run(args.dir, broker.bootstrap, records=args.records, workers=args.workers, kills=args.kills,
                          seed=seed)
    keys = ("kills", "records_produced", "rows", "distinct_offsets", "lost", "duplicates", "snapshots_per_cycle_max")
    out = {k: result[k] for k in keys}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    ok = (result["lost"] == 0 and result["duplicates"] == 0 and result["unexpected"] == 0
          and result["snapshots_per_cycle_max"] <= 1 and result["stored_equals_end"])
    print(f"eos {'OK' if ok else 'FAILED'}: wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
