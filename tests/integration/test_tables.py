"""Several tables on one pipeline, with the real broker and catalog: 3 topics fanned out to 5
tables by topic regex and route field. Each table is read back on its own, and every (topic,
partition, offset) must be exactly once in every table that takes it and in no other; after a
restart each table resumes from its own offsets; a process killed between two tables' catalog
commits of one cycle loses and doubles nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import support
from frazil.config import Config
from frazil.iceberg import offsets
from frazil.local.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration]

KINDS = ("order", "refund", "click", "view")
REGIONS = ("eu", "us", "apac")
COLUMNS = '[{ name = "id", type = "long", required = true }, { name = "kind", type = "string" }]'
TABLES = [   # name, topics regex, route field, route regex
    ("db.orders", "shop-orders-.*", "", ""),
    ("db.shop", "shop-.*", "", ""),
    ("db.refunds", "", "kind", "refund"),
    ("db.web_eu", "web-.*", "meta.region", "eu"),
    ("db.everything", "", "", ""),
]


def takes(table: tuple[str, str, str, str], topic: str, kind: str, region: str) -> bool:
    """The routing rules, written out again independently of frazil's router."""
    _, topics, field, route = table
    value = {"kind": kind, "meta.region": region}.get(field)
    return (not topics or re.fullmatch(topics, topic) is not None) and (not field or re.fullmatch(route, value or "") is not None)


def config(tmp_path: Path, bootstrap: str, topics: list[str] | str, pipeline: str, extra: str = "") -> Path:
    """``topics``: a list, or a pattern (a string)."""
    tables = "\n".join(
        f'[[tables]]\nname = "{name}"\ncolumns = {COLUMNS}\n' + (f'topics = "{t}"\n' if t else "")
        + (f'route_field = "{f}"\nroute = "{r}"\n' if f else "") for name, t, f, r in TABLES)
    path = tmp_path / "frazil.toml"
    path.write_text(f"""[pipeline]
name = "{pipeline}"
commit_interval_s = 0.5
outage_timeout_s = 300

[kafka]
bootstrap_servers = "{bootstrap}"
{f"topic_pattern = {json.dumps(topics)}{chr(10)}metadata_max_age_ms = 1000" if isinstance(topics, str)
   else f"topics = {json.dumps(topics)}"}
session_timeout_ms = 2000
heartbeat_interval_ms = 500

[catalog]
properties = {{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }}

[maintenance]
enabled = false
{extra}
{tables}""")
    return path


def value(i: int) -> bytes:
    return json.dumps({"id": i, "kind": KINDS[i % 4], "meta": {"region": REGIONS[(i // 4) % 3]}}).encode()


async def produce(bootstrap: str, topics: list[str], start: int, count: int) -> None:
    for n, topic in enumerate(topics):
        await support.produce(bootstrap, topic, (value(i) for i in range(start + n * 10_000, start + n * 10_000 + count)), 2)


def run_frazil(config_path: Path, log: Path, faults: str = "") -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config_path)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "FRAZIL_FAULTS": faults})


def wait_until_every_table_holds_its_records(cfg: Config, ends: dict[tuple[str, int], int],
                                             proc: subprocess.Popen[bytes], log: Path) -> dict[str, int]:
    """Until :func:`check_every_table` passes (the process still running); then its row counts."""
    deadline = time.monotonic() + 120
    last: AssertionError | None = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-4000:]
        try:
            return check_every_table(cfg, ends)
        except AssertionError as exc:
            last = exc
        except Exception as exc:  # noqa: BLE001 - a table not created yet
            last = AssertionError(f"{type(exc).__name__}: {exc}")
        time.sleep(0.5)
    raise AssertionError(f"not every table holds its records within 120 s: {last}; log: {log.read_text()[-3000:]}")


def check_every_table(cfg: Config, ends: dict[tuple[str, int], int]) -> dict[str, int]:
    """db.everything holds every offset once (checked against Kafka's end offsets); every other
    table holds exactly the records its rules take, once each. Returns rows per table."""
    catalog = support.catalog_of(cfg)
    everything = catalog.load_table("db.everything").scan().to_arrow()
    support.assert_exactly_once(support.count_offsets(catalog, "db.everything"), ends)
    kind_of = {(t, p, o): k for t, p, o, k in zip(*(everything.column(c).to_pylist() for c in
                                                    ("_kafka_topic", "_kafka_partition", "_kafka_offset", "kind")))}
    id_of = dict(zip(kind_of, everything.column("id").to_pylist()))
    rows = {}
    for table in TABLES:
        want = {tpo for tpo, kind in kind_of.items()
                if takes(table, tpo[0], kind, REGIONS[(id_of[tpo] // 4) % 3])}
        got = support.count_offsets(catalog, table[0])
        doubled = {k: n for k, n in got.items() if n > 1}
        assert not doubled, f"{table[0]}: records landed twice: {list(doubled.items())[:5]}"
        assert set(got) == want, (f"{table[0]}: {len(set(got) - want)} record(s) that do not belong, "
                                  f"{len(want - set(got))} missing, e.g. {sorted(set(got) ^ want)[:5]}")
        rows[table[0]] = len(got)
    return rows


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
