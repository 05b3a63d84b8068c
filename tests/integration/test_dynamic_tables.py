"""Tables named by the records ([dynamic]), with the real broker and catalog: 50 tables created
while streaming, with schemas inferred from their first records; every (topic, partition,
offset) exactly once in the table its record names and nowhere else, also across a restart;
records that name no table, a missing table with create off, and a field an inferred table does
not have stop the pipeline with an error naming the record and the field."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path

import pytest
from pyiceberg.types import DoubleType, ListType, LongType, StringType, StructType

import support
from frazil.iceberg.offsets import COMMIT_ID_KEY
from frazil_dev.kafka_broker import KafkaBroker
from routed import run_frazil
from support import wait_for

pytestmark = [pytest.mark.integration]

KINDS = 50


def config(tmp_path: Path, bootstrap: str, topic: str, pipeline: str, dynamic: str, extra: str = "") -> Path:
    """A pipeline on ``topic`` with a [dynamic] section of ``dynamic``; or, when ``dynamic`` starts
    with a section header, those sections instead."""
    path = tmp_path / "frazil.toml"
    tables = dynamic if dynamic.lstrip().startswith("[") else f"[dynamic]\n{dynamic}"
    path.write_text(f"""[pipeline]
name = "{pipeline}"
commit_interval_s = 0.5

[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
session_timeout_ms = 2000
heartbeat_interval_ms = 500

[catalog]
properties = {{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }}

[maintenance]
enabled = false
{extra}
{tables}
""")
    return path


def event(i: int, kinds: int) -> bytes:
    return json.dumps({"id": i, "kind": f"K{i % kinds}", "v": i * 0.5, "tags": [f"t{i % 3}"],
                       "geo": {"lat": i % 90, "city": "X"}}).encode()


def landed_by_kind(catalog, namespace: str) -> dict[str, list[tuple[str, int, int]]]:  # type: ignore[no-untyped-def]
    out = {}
    for identifier in catalog.list_tables(namespace):
        name = ".".join(identifier)
        data = catalog.load_table(name).scan(selected_fields=("kind", "_kafka_topic", "_kafka_partition",
                                                              "_kafka_offset")).to_arrow()
        kinds = set(data.column("kind").to_pylist())
        assert len(kinds) <= 1, f"{name} holds records of several kinds: {sorted(kinds)[:5]}"
        out[name] = list(zip(data.column("_kafka_topic").to_pylist(), data.column("_kafka_partition").to_pylist(),
                             data.column("_kafka_offset").to_pylist(), strict=True))
    return out


@pytest.mark.parametrize("mode", [pytest.param("single", marks=pytest.mark.matrix), "distributed"])
def test_fifty_tables_created_while_streaming_each_with_its_records_once(kafka: KafkaBroker, tmp_path: Path,
                                                                        mode: str) -> None:
    topic = f"dyn-events-{mode}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 3))
    asyncio.run(support.produce(kafka.bootstrap, topic, (event(i, 20) for i in range(600)), 3))   # 20 kinds first
    path = config(tmp_path, kafka.bootstrap, topic, f"dyn-{mode}", 'table = "dyn.{topic}_{kind}"',
                  '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n' if mode == "distributed" else "")
    cfg = support.load(path)
    catalog = support.catalog_of(cfg)
    log = tmp_path / "frazil.log"

    def everything_landed(ends: dict[tuple[str, int], int]) -> dict[str, list[tuple[str, int, int]]]:
        got = {n: o for n, o in landed_by_kind(catalog, "dyn").items() if n.startswith(f"dyn.dyn_events_{mode}_")}
        support.assert_exactly_once(support.Counter(o for offsets in got.values() for o in offsets), ends)
        return got

    proc = run_frazil(path, log)
    try:
        wait_for(lambda: everything_landed(asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))), proc, log)
        # 30 more kinds while it runs: their tables are created on the fly
        asyncio.run(support.produce(kafka.bootstrap, topic, (event(i, KINDS) for i in range(600, 2600)), 3))
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        got = wait_for(lambda: everything_landed(ends), proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert sorted(got) == sorted(f"dyn.dyn_events_{mode}_k{k}" for k in range(KINDS))
    fields = {f.name: f.field_type for f in catalog.load_table(f"dyn.dyn_events_{mode}_k7").schema().fields}
    assert fields["id"] == LongType() and fields["kind"] == StringType() and fields["v"] == DoubleType()
    assert isinstance(fields["tags"], ListType) and isinstance(fields["geo"], StructType)

    # a restart resumes from the watermark; each table skips what it holds
    asyncio.run(support.produce(kafka.bootstrap, topic, (event(i, KINDS) for i in range(2600, 3100)), 3))
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    proc = run_frazil(path, log)
    try:
        wait_for(lambda: everything_landed(ends), proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert "50 table(s) named by the records already exist" in log.read_text()  # their watermark counts


@pytest.mark.parametrize(("dynamic", "bad", "message"), [
    ('table = "bad.{kind}"', {"id": 1}, "field 'kind': it names no table"),
    ('table = "bad.{kind}"\ncreate = false', {"id": 1, "kind": "nope"},
     "table bad.nope does not exist and create is false"),
    ('table = "bad.{kind}"', {"id": 1, "kind": "a", "extra": True}, "field 'extra': bad.a has no such column"),
])
def test_a_record_that_cannot_go_to_its_table_stops_the_pipeline_naming_it(
        kafka: KafkaBroker, tmp_path: Path, dynamic: str, bad: dict, message: str) -> None:
    topic = "dyn-bad-" + "".join(c for c in message.split(":")[0] if c.isalnum())[:30]
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
    values = [json.dumps({"id": 0, "kind": "a"}).encode()] if "extra" in bad else []
    asyncio.run(support.produce(kafka.bootstrap, topic, values, 1))
    path = config(tmp_path, kafka.bootstrap, topic, topic, dynamic)
    log = tmp_path / "frazil.log"
    proc = run_frazil(path, log)
    try:
        if values:   # the table's first record, its schema inferred from it
            cfg = support.load(path)
            wait_for(lambda: support.catalog_of(cfg).load_table("bad.a").current_snapshot().snapshot_id, proc, log)
        asyncio.run(support.produce(kafka.bootstrap, topic, [json.dumps(bad).encode()], 1))
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert message in text and f"record topic={topic} partition=0 offset={len(values)}" in text, text[-3000:]


def test_a_configured_table_without_columns_is_created_on_its_first_records(kafka: KafkaBroker, tmp_path: Path) -> None:
    """[[tables]] entries may leave columns out: the table is created from its first records
    (inferred), the other table as declared; each gets its records once, and a restart keeps both."""
    topic = "static-inferred"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(support.produce(kafka.bootstrap, topic, (event(i, 4) for i in range(400)), 2))
    path = config(tmp_path, kafka.bootstrap, topic, "static-inferred", """
[[tables]]
name = "inf.k1"
route_field = "kind"
route = "K1"
partition_by = ["bucket[4](id)"]

[[tables]]
name = "inf.declared"
columns = [{ name = "id", type = "long", required = true }]
unknown_fields = "ignore"
identifier_columns = ["id"]
""")
    cfg = support.load(path)
    catalog = support.catalog_of(cfg)
    log = tmp_path / "frazil.log"

    def landed() -> int:
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        support.assert_exactly_once(support.count_offsets(catalog, "inf.declared"), ends)
        got = catalog.load_table("inf.k1").scan(selected_fields=("kind",)).to_arrow().column("kind").to_pylist()
        assert got and set(got) == {"K1"} and len(got) == sum(ends.values()) // 4, len(got)
        return len(got)

    for start in (400, 800):
        proc = run_frazil(path, log)
        try:
            wait_for(landed, proc, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        asyncio.run(support.produce(kafka.bootstrap, topic, (event(i, 4) for i in range(start, start + 400)), 2))
    table = catalog.load_table("inf.k1")
    assert {f.name for f in table.schema().fields} >= {"id", "kind", "v", "tags", "geo", "_kafka_offset"}
    assert str(table.spec().fields[0].transform) == "bucket[4]"
    assert catalog.load_table("inf.declared").schema().identifier_field_names() == {"id"}


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


@pytest.mark.parametrize("mode", [pytest.param("single", marks=pytest.mark.matrix), "distributed"])
def test_a_hundred_tables_commit_in_one_cycle_without_a_thread_per_table(kafka: KafkaBroker, tmp_path: Path,
                                                                          mode: str) -> None:
    """A first run creates 100 tables (one per kind). Then 2,000 records for all of them wait in
    the topic and a second run starts with a 3 s commit interval, so its first cycle finds them
    all buffered: that one cycle lands all 100 tables (every table's newest snapshot carries the
    same commit id), and the process never runs anywhere near a thread per table."""
    kinds, topic = 100, f"dyn-hundred-{mode}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(support.produce(kafka.bootstrap, topic, (event(i, kinds) for i in range(300)), 2))
    extra = '[coordination]\nmode = "distributed"\ncommit_timeout_s = 10\n' if mode == "distributed" else ""
    path = config(tmp_path, kafka.bootstrap, topic, f"hundred-{mode}", 'table = "hund.{topic}_{kind}"', extra)
    cfg = support.load(path)
    catalog = support.catalog_of(cfg)
    log = tmp_path / "frazil.log"
    names = [f"hund.dyn_hundred_{mode}_k{i}" for i in range(kinds)]

    def everything_landed(ends: dict[tuple[str, int], int]) -> None:
        counts = support.Counter(o for name in names for o in support.count_offsets(catalog, name))
        support.assert_exactly_once(counts, ends)

    threads = []
    for interval, start, count in ((0.5, 300, 2000), (3.0, 0, 0)):
        path.write_text(re.sub(r"commit_interval_s = \S+", f"commit_interval_s = {interval}", path.read_text()))
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        proc = run_frazil(path, log)
        try:
            wait_for(lambda: everything_landed(ends), proc, log)   # noqa: B023 - used at once
            threads.append(_threads(proc.pid))
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=90) == 0, log.read_text()[-3000:]
        asyncio.run(support.produce(kafka.bootstrap, topic, (event(i, kinds) for i in range(start, start + count)), 2))
    newest = {name: catalog.load_table(name).current_snapshot() for name in names}
    commit_ids = {s.summary.additional_properties[COMMIT_ID_KEY] for s in newest.values() if s and s.summary}
    assert len(commit_ids) == 1, f"the last 2,000 records landed over {len(commit_ids)} cycles"
    summary = next(line for line in log.read_text().splitlines()
                   if f"commit {next(iter(commit_ids))}: " in line and "table(s) committed" in line)
    assert "100 of 100 table(s) committed" in summary, summary
    assert max(threads) < 40, f"{max(threads)} threads for 100 tables"
    print(summary, f"threads={threads}")
