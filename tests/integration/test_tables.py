"""Several tables on one pipeline, with the real broker and catalog: 3 topics fanned out to 5
tables by topic regex and route field. Each table is read back on its own, and every (topic,
partition, offset) must be exactly once in every table that takes it and in no other; after a
restart each table resumes from its own offsets; a process killed between two tables' catalog
commits of one cycle loses and doubles nothing."""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

import support
from frazil.iceberg import offsets
from frazil_dev.kafka_broker import KafkaBroker
from routed import (
    KINDS,
    TABLES,
    check_every_table,
    config,
    produce,
    run_frazil,
    value,
    wait_until_every_table_holds_its_records,
)

pytestmark = [pytest.mark.integration]


def test_three_topics_fan_out_to_five_tables_and_each_resumes_from_its_own_offsets(kafka: KafkaBroker,
                                                                                 tmp_path: Path) -> None:
    topics = ["shop-orders-fan", "shop-payments-fan", "web-clicks-fan"]
    for topic in topics:
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(produce(kafka.bootstrap, topics, 0, 1200))
    path = config(tmp_path, kafka.bootstrap, topics, "fan")
    cfg = support.load(path)
    log = tmp_path / "frazil.log"

    proc = run_frazil(path, log)
    try:
        wait_until_every_table_holds_its_records(cfg, asyncio.run(support.end_offsets(kafka.bootstrap, topics)), proc,
                                                 log)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
    first = check_every_table(cfg, asyncio.run(support.end_offsets(kafka.bootstrap, topics)))
    assert all(first.values()), first

    asyncio.run(produce(kafka.bootstrap, topics, 50_000, 800))   # a second run resumes, table by table
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, topics))
    proc = run_frazil(path, log)
    try:
        wait_until_every_table_holds_its_records(cfg, ends, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
    rows = check_every_table(cfg, ends)
    assert rows["db.everything"] == 3 * 2000 and rows["db.orders"] == 2000 and rows["db.shop"] == 4000, rows
    assert rows["db.refunds"] == 3 * 500, rows
    catalog = support.catalog_of(cfg)
    for name, *_ in TABLES:   # the watermark is kept with every table's offsets
        assert offsets.stored_progress(catalog.load_table(name).properties, cfg.pipeline), name


@pytest.mark.parametrize("mode", ["single", "distributed"])
def test_killed_between_two_tables_commits_of_one_cycle_nothing_is_lost_or_doubled(kafka: KafkaBroker, tmp_path: Path,
                                                                                   mode: str) -> None:
    """``commit.after_catalog=kill@3``: the process dies right after the third table's catalog
    commit of a cycle; two tables have this cycle's rows, three do not. The restart must land the
    rest once, in every table, without the landed tables taking their records again."""
    topics = [f"shop-orders-kill-{mode}", f"shop-payments-kill-{mode}", f"web-clicks-kill-{mode}"]
    for topic in topics:
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(produce(kafka.bootstrap, topics, 0, 1500))
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, topics))
    extra = '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n' if mode == "distributed" else ""
    path = config(tmp_path, kafka.bootstrap, topics, f"kill-{mode}", extra)
    cfg = support.load(path)
    log = tmp_path / "frazil.log"

    proc = run_frazil(path, log, faults="commit.after_catalog=kill@3")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-4000:]
    catalog = support.catalog_of(cfg)
    landed = Counter(bool(catalog.load_table(name).snapshots()) for name, *_ in TABLES)
    assert landed[True] >= 1, "the kill came after at least one table's commit"

    proc = run_frazil(path, log)
    try:
        wait_until_every_table_holds_its_records(cfg, ends, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    check_every_table(cfg, ends)


@pytest.mark.parametrize("mode", ["single", "distributed"])
def test_a_topic_created_mid_run_that_matches_the_pattern_is_picked_up_without_a_restart(
        kafka: KafkaBroker, tmp_path: Path, mode: str) -> None:
    first, later, other = f"shop-orders-pat{mode}", f"web-clicks-pat{mode}", f"shop-payments-nopat{mode}"
    for topic in (first, other):
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(produce(kafka.bootstrap, [first, other], 0, 600))
    extra = '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n' if mode == "distributed" else ""
    path = config(tmp_path, kafka.bootstrap, f"(shop|web)-.*-pat{mode}", f"pat-{mode}", extra)
    cfg = support.load(path)
    log = tmp_path / "frazil.log"
    proc = run_frazil(path, log)
    try:
        wait_until_every_table_holds_its_records(cfg, asyncio.run(support.end_offsets(kafka.bootstrap, [first])), proc,
                                                 log)
        asyncio.run(support.create_topic(kafka.bootstrap, later, 2))
        asyncio.run(produce(kafka.bootstrap, [first, later], 1000, 400))
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [first, later]))
        rows = wait_until_every_table_holds_its_records(cfg, ends, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert rows["db.everything"] == 1000 + 400 and rows["db.orders"] == 1000, rows
    assert other not in log.read_text(), "a topic the pattern does not match is never consumed"


@pytest.mark.parametrize("mode", [pytest.param("single", marks=pytest.mark.matrix), "distributed"])
def test_a_table_whose_commits_keep_failing_holds_back_no_other_table(kafka: KafkaBroker, tmp_path: Path,
                                                                      mode: str) -> None:
    """The first 40 catalog commits of db.refunds fail (``commit.before_catalog[db.refunds]=raise*40``,
    about 20 s at one cycle per 0.5 s), as a table whose storage is gone would. db.refunds takes
    records of one topic at first, of all three later. Meanwhile the other four tables take two
    waves of records, the second produced after the first landed: the failing table's files and
    its new rows wait without holding anyone back. Then its outage ends and, in the same process,
    its held files land, then the rows that waited, written once: every table holds its records
    once, and db.refunds has a handful of data files, not one per failed cycle."""
    topics = [f"shop-orders-indep-{mode}", f"shop-payments-indep-{mode}", f"web-clicks-indep-{mode}"]
    for topic in topics:
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(produce(kafka.bootstrap, topics[:1], 0, 800))
    for n, topic in enumerate(topics[1:], start=1):   # no refunds in these yet
        ids = range(n * 10_000, n * 10_000 + 1100)
        asyncio.run(support.produce(kafka.bootstrap, topic,
                                    [value(i) for i in ids if KINDS[i % 4] != "refund"][:800], 2))
    extra = '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n' if mode == "distributed" else ""
    path = config(tmp_path, kafka.bootstrap, topics, f"indep-{mode}", extra, pipeline_extra="max_commit_attempts = 1")
    cfg = support.load(path)
    log = tmp_path / "frazil.log"
    catalog = support.catalog_of(cfg)

    proc = run_frazil(path, log, faults="commit.before_catalog[db.refunds]=raise*40")
    try:
        wait_until_every_table_holds_its_records(cfg, asyncio.run(support.end_offsets(kafka.bootstrap, topics)), proc,
                                                 log, but="db.refunds")
        asyncio.run(produce(kafka.bootstrap, topics, 50_000, 600))
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, topics))
        held_back = wait_until_every_table_holds_its_records(cfg, ends, proc, log, but="db.refunds")
        assert not catalog.load_table("db.refunds").snapshots(), "the first 40 commits of db.refunds fail"
        rows = wait_until_every_table_holds_its_records(cfg, ends, proc, log)   # the outage is over
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
    text = log.read_text()
    assert held_back["db.everything"] == rows["db.everything"] == 3 * 1400, (held_back, rows)
    assert rows["db.refunds"] == 200 + 3 * 150, rows
    failed = re.findall(r"frazil\.coordination\.coordinator: commit \S+ to db\.refunds failed", text)
    assert len(failed) == 40, (len(failed), text[-3000:])
    refunds = catalog.load_table("db.refunds")
    files = {task.file.file_path for task in refunds.scan().plan_files()}
    assert len(files) <= 6, f"db.refunds has {len(files)} data files: one per failed cycle would be about 40"
