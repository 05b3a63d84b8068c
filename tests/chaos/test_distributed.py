"""Distributed mode under fire: worker processes SIGKILLed at random, and the coordinator killed at
each of its named fault points. An independent read of the table must find every produced
(topic, partition, offset) exactly once, and no commit id in more than one snapshot."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pytest

from frazil.devtools import eos
from frazil.devtools.kafka_broker import KafkaBroker
from frazil.status import end_offsets

pytestmark = [pytest.mark.chaos]

RECORDS = int(os.environ.get("FRAZIL_EOS_RECORDS", "150000"))
KILLS = int(os.environ.get("FRAZIL_EOS_KILLS", "10"))


def _assert_exact(result: dict[str, object]) -> None:
    assert result["lost"] == 0 and result["duplicates"] == 0 and result.get("unexpected", 0) == 0, result
    assert result["snapshots_per_cycle_max"] == 1, result


def test_three_workers_killed_at_random_lose_and_duplicate_nothing(kafka: KafkaBroker, tmp_path: Path) -> None:
    seed = int(os.environ.get("FRAZIL_CHAOS_SEED", str(random.randrange(1 << 30))))
    print(f"seed {seed}")
    result = eos.kill_run(tmp_path, kafka.bootstrap, records=RECORDS, workers=3, kills=KILLS, seed=seed, progress=False,
                          topic="eos-random")
    print(result)
    assert result["kills"] >= KILLS and result["records_produced"] == RECORDS
    assert result["rows"] == result["distinct_offsets"] == RECORDS and result["stored_equals_end"]
    _assert_exact(result)


@pytest.mark.parametrize("point", [
    "coordinator.after_start_commit", "commit.before_catalog", "commit.after_catalog",
    "coordinator.after_catalog_commits", "coordinator.after_commit_complete",
    "worker.after_files_written", "worker.before_reply", "worker.after_reply",
])
def test_a_process_killed_at_each_fault_point_loses_and_duplicates_nothing(kafka: KafkaBroker, tmp_path: Path,
                                                                             point: str) -> None:
    """Both workers carry the armed point; whichever process reaches it first dies there (SIGKILL)
    and comes back without it, while the records of the cycle it was in are still to land."""
    topic = f"eos-{point.replace('.', '-').replace('_', '-')}"
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=0.5, timeout=5.0, partitions=4, topic=topic)
    records = 20_000
    try:
        for name in ("w0", "w1"):
            group.start(name, {"FRAZIL_FAULTS": f"{point}=kill"})
        asyncio.run(eos.produce(kafka.bootstrap, topic, (eos.record(i) for i in range(records // 2)),
                                partitions=4, label=None))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and -9 not in group.exited().values():
            time.sleep(0.2)
        assert -9 in group.exited().values(), f"nobody reached {point}; tail:\n{group.tail('w0')}"
        asyncio.run(eos.produce(kafka.bootstrap, topic, (eos.record(i) for i in range(records // 2, records)),
                                partitions=4, label=None))
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        eos.wait_committed(tmp_path, ends, group, timeout=120, restart_killed=True)
    finally:
        group.stop_all()
    found = eos.count(tmp_path)
    result = {**eos.verdict(found["counts"], ends), "snapshots_per_cycle_max": found["snapshots_per_cycle_max"]}
    assert result["rows"] == records, result
    _assert_exact(result)
