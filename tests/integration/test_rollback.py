"""A table rolled back under frazil (with the real broker and catalog, in both modes). A rollback
moves the current snapshot and leaves table properties alone, so the offsets property still says
the rolled-back records are in the table: frazil must believe the data (the current snapshot's
summary) and read those records again, while running and at start. The independent read: every
(topic, partition, offset) in the table exactly once."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest
from pyiceberg.exceptions import CommitFailedException

import support
from frazil.config import Config
from frazil_dev.kafka_broker import KafkaBroker
from routed import running

pytestmark = [pytest.mark.integration]


def _exactly_once(cfg: Config, ends: dict[tuple[str, int], int], proc: subprocess.Popen[bytes], log: Path) -> None:
    catalog = support.catalog_of(cfg)
    support.wait_for(lambda: support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends),
                     proc, log, timeout=120)


def _roll_back(cfg: Config, snapshot_id: int) -> None:
    for _ in range(20):   # frazil may be committing at the same moment
        try:
            support.catalog_of(cfg).load_table(cfg.table.name).manage_snapshots().rollback_to_snapshot(snapshot_id).commit()
            return
        except CommitFailedException:
            time.sleep(0.2)
    raise AssertionError("could not roll the table back")


@pytest.mark.parametrize("mode", ["single", "distributed"])
def test_a_rolled_back_table_gets_the_rolled_back_records_again_running_and_at_start(
        kafka: KafkaBroker, tmp_path: Path, mode: str) -> None:
    topic = f"rollback-{mode}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    extra = '\n[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n' if mode == "distributed" else ""
    path = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, extra=extra)
    cfg = support.load(path)
    log = tmp_path / "frazil.log"

    def wave(start: int) -> dict[tuple[str, int], int]:
        asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(start, start + 600)), 2))
        return asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))

    with running(path, log) as proc:
        _exactly_once(cfg, wave(0), proc, log)
        first = support.catalog_of(cfg).load_table(cfg.table.name).current_snapshot()
        assert first is not None
        _exactly_once(cfg, wave(600), proc, log)
        _roll_back(cfg, first.snapshot_id)   # wave 2 leaves the table; the offsets property still counts it
        _exactly_once(cfg, wave(1200), proc, log)
    assert "the table was rolled back" in log.read_text()

    _roll_back(cfg, first.snapshot_id)   # and while frazil is stopped: the restart starts from the data
    ends = wave(1800)
    with running(path, log) as proc:
        _exactly_once(cfg, ends, proc, log)
    assert log.read_text().count("the table was rolled back") >= 2
