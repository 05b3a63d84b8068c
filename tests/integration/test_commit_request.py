"""Distributed mode's record-count trigger: a full buffer asks the coordinator for a cycle."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from frazil.status import end_offsets
from frazil_dev.kafka_broker import KafkaBroker, free_port
from harness import eos
from harness.outage import scrape

pytestmark = pytest.mark.integration


def steady(ports: dict[str, int], group: eos.Workers, timeout: float = 60.0) -> dict[str, dict[str, float]]:
    """The workers' metrics once every worker serves them and exactly one holds the coordinator role.
    A worker serves its metrics only once it has opened its table and its control channel, which
    on a loaded machine can come after the other worker has committed every record; a worker that
    joins late moves partitions and restarts the role, and in that window no process is the
    coordinator, so a single scrape taken then would count none. A worker that exits fails the
    wait with its log."""
    deadline = time.monotonic() + timeout
    while True:
        dead = group.exited()
        assert not dead, f"worker(s) exited: {dead}; tail of {next(iter(dead))}:\n{group.tail(next(iter(dead)))}"
        try:
            scraped = {name: scrape(port) for name, port in ports.items()}
        except OSError as exc:   # not serving yet (connection refused): the worker is still starting
            if time.monotonic() > deadline:
                raise AssertionError(f"a worker served no metrics within {timeout:.0f}s ({exc}); tails:\n"
                                     + "\n".join(f"{n}: {group.tail(n)}" for n in ports)) from exc
        else:
            if sum(m.get("frazil_coordinator", 0) for m in scraped.values()) == 1 or time.monotonic() > deadline:
                return scraped
        time.sleep(0.5)


def test_a_full_worker_buffer_starts_a_cycle_long_before_the_interval(kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "eos-trigger"
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=600.0, timeout=5.0, partitions=4, topic=topic)
    ports = {name: free_port() for name in ("w0", "w1")}
    for name in ("w0", "w1"):
        cfg = group.config(name)
        cfg.write_text(cfg.read_text().replace('commit_interval_s = 600.0',
                                               'commit_interval_s = 600.0\nmax_buffer_records = 2000')
                       + f"\n[metrics]\nport = {ports[name]}\n")
    try:
        for name in ("w0", "w1"):
            group.start(name)
        asyncio.run(eos.produce(kafka.bootstrap, topic, (eos.record(i) for i in range(20_000)), partitions=4,
                                label=None))
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        # the interval is 10 minutes: only the workers' requests can land this within the wait
        eos.wait_committed(tmp_path, ends, group, timeout=90)
        scraped = steady(ports, group)
    finally:
        group.stop_all()
    logs = group.tail("w0", 500_000) + group.tail("w1", 500_000)
    assert "starting a cycle early, requested" in logs
    found = eos.count(tmp_path)
    verdict = eos.verdict(found["counts"], ends)
    assert verdict["rows"] == 20_000 and verdict["lost"] == verdict["duplicates"] == 0, verdict
    # the metrics tell the same story: one coordinator, one counted table commit per snapshot
    assert sum(m.get("frazil_coordinator", 0) for m in scraped.values()) == 1, scraped
    committed = sum(m.get("frazil_coordinator_table_commits_total{result=committed}", 0) for m in scraped.values())
    assert committed == found["cycles"] > 0, (committed, found["cycles"])

