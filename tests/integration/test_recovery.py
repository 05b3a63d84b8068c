"""Recovery through the transaction log: a process killed between writing its data files and
learning the commit's fate. The restart must settle the logged intent by its commit id: commit
the logged files once (not read their records again from Kafka), or see that they already
landed. In both coordination modes: the coordinator role logs its intents in the process's log
either way (in distributed mode the restarted process also finds the open cycle on the control
topic, and takes it over without landing it twice)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import support
from frazil.config import Config
from frazil.iceberg import offsets
from frazil.txlog import recover
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration]


def run_frazil(config: Path, log: Path, faults: str = "") -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "FRAZIL_FAULTS": faults})


MODES = {"single": "", "distributed": '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n'}


def pipeline_on(kafka: KafkaBroker, tmp_path: Path, topic: str, mode: str) -> tuple[Path, Config, Path]:
    """A 2-partition topic holding 2,000 records, and a pipeline of its own on it: config file,
    config, log path."""
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(2000)), 2))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, interval=0.5, extra=MODES[mode])
    return config, support.load(config), tmp_path / "frazil.log"


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("point", ["commit.before_catalog", "commit.after_catalog"])
def test_a_commit_cut_short_is_settled_from_the_log(kafka: KafkaBroker, tmp_path: Path, point: str, mode: str) -> None:
    topic = f"recovery-{point.split('.')[1]}-{mode}"
    config, cfg, log = pipeline_on(kafka, tmp_path, topic, mode)

    proc = run_frazil(config, log, faults=f"{point}=kill")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    state = recover(cfg.txlog_dir, read_only=True).state
    (intent,) = state.unresolved().values()
    commit_id = intent["commit_id"]
    catalog = support.catalog_of(cfg)
    landed_before = {s.summary.additional_properties.get(offsets.COMMIT_ID_KEY)
                     for s in catalog.load_table(cfg.table.name).snapshots()}
    assert (commit_id in landed_before) == (point == "commit.after_catalog")

    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    proc = run_frazil(config, log)
    try:
        support.wait_until_committed(catalog, cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
        deadline = time.monotonic() + 60  # the table may have been complete already: wait for the log
        while recover(cfg.txlog_dir, read_only=True).state.unresolved() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)

    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    table = catalog.load_table(cfg.table.name)
    carrying = [s for s in table.snapshots() if s.summary.additional_properties.get(offsets.COMMIT_ID_KEY) == commit_id]
    assert len(carrying) == 1, "the logged commit must land exactly once, under its own commit id"
    table_files = set(table.inspect.files().column("file_path").to_pylist())
    assert set(intent["files"]) <= table_files, "the logged data files themselves are in the table"
    after = recover(cfg.txlog_dir, read_only=True).state
    assert after.unresolved() == {}, log.read_text()[-6000:]
    assert after.outcomes[0]["commit_id"] == commit_id
    assert after.outcomes[0]["status"] == "committed"
    text = log.read_text()
    if point == "commit.before_catalog":
        assert "recovered:" in text and "not read again from Kafka" in text


@pytest.mark.parametrize("mode", list(MODES))
def test_a_catalog_lost_between_commit_and_settle_holds_the_batch_and_lands_it_once(kafka: KafkaBroker, tmp_path: Path,
                                                                                     mode: str) -> None:
    """The coordinator commits, then the catalog cannot be read when the worker checks whether its
    reply landed (an outage that starts in that gap). The worker must not stop or guess: it holds
    the files, reports them again, the coordinator refuses the overlap, and the next check finds
    them in the table: every offset once, and the process still running."""
    topic = f"settle-unread-{mode}"
    config, cfg, log = pipeline_on(kafka, tmp_path, topic, mode)
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    catalog = support.catalog_of(cfg)

    proc = run_frazil(config, log, faults="worker.before_settle=raise-once")
    try:
        support.wait_until_committed(catalog, cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
        deadline = time.monotonic() + 60   # the held batch is settled at a later cycle
        while "settled:" not in log.read_text().split("could not read", 1)[-1] and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    text = log.read_text()
    assert "could not read" in text and "checked again at the next cycle" in text, text[-3000:]
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    assert recover(cfg.txlog_dir, read_only=True).state.unresolved() == {}
