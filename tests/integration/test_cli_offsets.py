"""``frazil offsets`` and ``frazil status`` against what real runs committed: a routed pipeline (3
topics, 5 tables) shows under each table only the partitions routing may send it and, per
partition, a restart resuming at the end; a ``[dynamic]``-only pipeline shows its tables once
the records named them (and the watermark before); a keyed table counts the rows a reader sees."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import test_dynamic_tables

import changes
import support
from frazil import daemon
from frazil.config import Config
from frazil_dev.kafka_broker import KafkaBroker
from routed import TABLES, check_every_table, config, produce

pytestmark = [pytest.mark.integration]


def frazil(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "frazil.cli", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def serve_until(cfg: Config, ends: dict[tuple[str, int], int]) -> None:
    """Run the pipeline in process until it read every partition up to ``ends``, then drain."""
    asyncio.run(daemon.serve(cfg, asyncio.Event(), until=ends))


def sections(text: str) -> dict[str, list[list[str]]]:
    """``frazil offsets`` output: the rows (split on blanks) under each heading line."""
    out: dict[str, list[list[str]]] = {}
    heading = ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            heading = line.split(":")[0]
            out[heading] = []
        elif line.startswith("  ") and not line.startswith("  topic") and re.match(r"  \S+ +\d+ ", line):
            out[heading].append(line.split())
    return out


def test_offsets_and_status_of_a_routed_pipeline_show_what_each_table_takes_and_where_a_restart_resumes(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    topics = ["shop-orders-view", "shop-payments-view", "web-clicks-view"]
    for topic in topics:
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(produce(kafka.bootstrap, topics, 0, 400))
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, topics))
    path = config(tmp_path, kafka.bootstrap, topics, "views")
    cfg = support.load(path)
    before = sections(frazil("offsets", "--config", str(path), cwd=tmp_path))
    assert {row[0] for row in before["pipeline views"]} == set(topics)
    assert all(row[3] == "earliest" for row in before["pipeline views"]), before   # no table knows anything yet

    serve_until(cfg, ends)
    check_every_table(cfg, ends)
    text = frazil("offsets", "--config", str(path), cwd=tmp_path)
    found = sections(text)
    for name, topic_regex, _, _ in TABLES:
        # under each table, exactly the partitions of the topics it may take (all of them for route fields)
        want = {tp for tp in ends if not topic_regex or re.fullmatch(topic_regex, tp[0])}
        assert {(row[0], int(row[1])) for row in found[name]} == want, (name, text)
    for row in found["db.orders"] + found["db.shop"] + found["db.everything"]:
        assert row[2] == row[3] and row[4] == "0", text   # every record of its topics: at the end
    assert "* db.refunds takes only some records" in text
    # the watermark and where a restart resumes: the end, for every partition
    assert {(row[0], int(row[1])): (int(row[2]), int(row[3]), int(row[4]), int(row[5]))
            for row in found["pipeline views"]} == {tp: (end, end, end, 0) for tp, end in ends.items()}, text

    status = json.loads(frazil("status", "--json", "--config", str(path), cwd=tmp_path))
    by_name = {t["name"]: t for t in status["tables"]}
    assert {(r["topic"], r["partition"]) for r in by_name["db.web_eu"]["partitions"]} == {
        tp for tp in ends if tp[0].startswith("web-")}
    assert {r["takes"] for r in by_name["db.web_eu"]["partitions"]} == {"some records"}
    assert by_name["db.everything"]["rows"] == sum(ends.values()) and by_name["db.everything"]["rows_exact"]


def test_offsets_of_a_dynamic_only_pipeline_show_its_tables_once_the_records_name_them(kafka: KafkaBroker,
                                                                                        tmp_path: Path) -> None:
    topic = "dynamic-view"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    values = [test_dynamic_tables.event(i, 3) for i in range(300)]
    asyncio.run(support.produce(kafka.bootstrap, topic, values, 2))
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    path = test_dynamic_tables.config(tmp_path, kafka.bootstrap, topic, "dynview", 'table = "dv.{kind}"')
    text = frazil("offsets", "--config", str(path), cwd=tmp_path)
    assert text.startswith("no table yet"), text
    assert len(sections(text)["pipeline dynview"]) == 2, text

    serve_until(support.load(path), ends)
    text = frazil("offsets", "--config", str(path), cwd=tmp_path)
    found = sections(text)
    assert {name for name in found if name.startswith("dv.")} == {"dv.k0", "dv.k1", "dv.k2"}, text
    for name in ("dv.k0", "dv.k1", "dv.k2"):
        assert {(row[0], int(row[1])) for row in found[name]} == set(ends), text
    assert {(row[0], int(row[1])): (int(row[3]), int(row[5])) for row in found["pipeline dynview"]} == {
        tp: (end, 0) for tp, end in ends.items()}, text


def test_status_counts_the_rows_a_reader_sees_in_a_keyed_table(kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "keyed-view"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    path = changes.config(tmp_path, kafka.bootstrap, topic, "keyedview", mode="upsert",
                          extra_table='tombstones = "delete"')
    cfg = support.load(path)
    for seed in (7, 8):   # the second run's changes replace rows the first one committed: position deletes
        ends = asyncio.run(changes.produce(kafka.bootstrap, topic, changes.upsert_stream(200, 2000, seed), 2))
        asyncio.run(support.run_until_committed(cfg, ends))
    live = len(changes.table_rows(support.catalog_of(cfg), cfg.table.name))
    summary = support.catalog_of(cfg).load_table(cfg.table.name).current_snapshot().summary.additional_properties
    assert int(summary["total-records"]) > live, "the stream replaced rows: the data files hold more than the table"
    status = json.loads(frazil("status", "--json", "--config", str(path), cwd=tmp_path))
    (table,) = status["tables"]
    assert (table["rows"], table["rows_exact"]) == (live, True), (table, summary)
