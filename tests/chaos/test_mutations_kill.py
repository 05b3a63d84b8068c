"""A Debezium-shaped CDC stream into a keyed table while ``frazil run`` (distributed mode) is
SIGKILLed at every point of a keyed commit (position deletes written and not committed, the catalog commit about to go
out, landed and not yet known, the worker's files written) and at random moments; restarted
every time (its key index rebuilt from the table). The final table must equal the reference
computed from the topic itself: the latest change per key by offset, nothing stale, no deleted
key back, no key twice."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import changes
import support
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.chaos]

KEYS = 400
CHANGES = int(os.environ.get("FRAZIL_CHAOS_CHANGES", "6000"))   # make chaos-tests: 12000
ROUNDS = int(os.environ.get("FRAZIL_CHAOS_ROUNDS", "1"))          # kills per fault point; make chaos-tests: 2
PARTITIONS = 3
CHUNKS = 30
FAULTS = ("commit.after_deletes_written", "commit.before_catalog", "commit.after_catalog",
          "worker.after_files_written", None)


def _produce_slowly(bootstrap: str, topic: str, stream: list, done: threading.Event,  # type: ignore[type-arg]
                    errors: list[BaseException]) -> None:
    try:
        per = len(stream) // CHUNKS + 1
        for c in range(0, len(stream), per):
            asyncio.run(changes.produce(bootstrap, topic, iter(stream[c:c + per]), PARTITIONS))
            time.sleep(0.4)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)
    finally:
        done.set()


def _start(config: Path, log: Path, fault: str | None) -> subprocess.Popen[bytes]:
    env = ({**os.environ, "FRAZIL_FAULTS": fault} if fault
           else {k: v for k, v in os.environ.items() if k != "FRAZIL_FAULTS"})
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)


MODES = {"single": "", "distributed": '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n'}


# Single mode, and an upsert stream with tombstones, are killed the same way (fewer times, read back by
# Spark SQL too) in tests/spark/test_mutations_spark.py; `make chaos-tests` runs this longer
# (FRAZIL_CHAOS_CHANGES, FRAZIL_CHAOS_ROUNDS).
@pytest.mark.parametrize(("kind", "mode"), [("cdc", "distributed")])
def test_a_change_stream_killed_at_every_commit_point_ends_equal_to_the_reference(kafka: KafkaBroker, tmp_path: Path,
                                                                                  kind: str, mode: str) -> None:
    seed = int(os.environ.get("FRAZIL_CHAOS_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"chaos seed {seed} (FRAZIL_CHAOS_SEED={seed} repeats the stream and the kill plan)")
    topic = f"{kind}-kill-{mode}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    config = changes.config(tmp_path, kafka.bootstrap, topic, topic, mode=kind, interval=0.3, extra=MODES[mode],
                            extra_table='tombstones = "delete"' if kind == "upsert" else "")
    cfg = support.load(config)
    catalog = support.catalog_of(cfg)
    log = tmp_path / "frazil.log"
    stream = list(changes.debezium_stream(KEYS, CHANGES, seed) if kind == "cdc" else
                  changes.upsert_stream(KEYS, CHANGES, seed))
    done, errors = threading.Event(), []
    producer = threading.Thread(target=_produce_slowly, args=(kafka.bootstrap, topic, stream, done, errors),
                                daemon=True)
    producer.start()

    kills: dict[str, int] = {}
    rounds = 0
    while not done.is_set() or rounds < ROUNDS * len(FAULTS):
        fault = FAULTS[rounds % len(FAULTS)]
        spec = f"{fault}=kill@{rng.randint(1, 3)}" if fault else None
        proc = _start(config, log, spec)
        try:
            proc.wait(timeout=rng.uniform(2.0, 6.0) if fault is None else 30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert proc.returncode in (-signal.SIGKILL, 137), (
            f"frazil run ended with {proc.returncode} under {spec}; log tail:\n{log.read_text()[-3000:]}")
        kills[fault or "random"] = kills.get(fault or "random", 0) + 1
        rounds += 1
    producer.join(timeout=120)
    assert done.is_set() and not errors, errors
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))

    proc = _start(config, log, None)
    try:
        support.wait_until_committed(catalog, cfg, ends, timeout=180, alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)

    expected = asyncio.run(changes.reference(kafka.bootstrap, topic, PARTITIONS, mode=kind))
    found = changes.table_rows(catalog, cfg.table.name)
    text = log.read_text()
    print(f"{sum(kills.values())} kills {kills}; {len(stream)} records; {len(expected)} live keys; "
          f"{len(catalog.load_table(cfg.table.name).snapshots())} snapshots; index rebuilds: "
          f"{text.count('key index built')}; recovered intents: {text.count('txlog: commit')}")
    changes.assert_same(found, expected, "pyiceberg")
    assert all(kills.get(f or "random", 0) >= ROUNDS for f in FAULTS), kills
