"""The ingest loop, the worker and the in-process coordinator together, in single mode, fed by a
fake Kafka source (batches built by aiokafka's batch builder, read natively) into a SQLite catalog
in a temporary folder: no broker. What a user depends on: every record lands once, bad records
stop the pipeline naming them, routed tables take what routing gives them, and a restart reads
each partition from where the tables need it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import support
from fakes import FakeSource, json_records
from frazil import daemon
from frazil.config import Config
from frazil.errors import RecordDecodeError
from frazil.iceberg import catalog as iceberg_catalog

pytestmark = pytest.mark.asyncio


def config(tmp_path: Path, extra: str = "", *, table: str = "db.events", topics: tuple[str, ...] = ("t",)) -> Config:
    return support.load(support.write_config(tmp_path, "127.0.0.1:1", list(topics), table=table, interval=0.2,
                                             extra=extra))


async def run_until(cfg: Config, source: FakeSource, done: Callable[[], bool], timeout: float = 60) -> None:
    """Serve ``cfg`` from ``source`` until ``done`` (then drain and stop)."""
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.serve(cfg, stop, source=source))
    deadline = asyncio.get_running_loop().time() + timeout
    while not done() and not task.done():
        assert asyncio.get_running_loop().time() < deadline, "the loop did not get there in time"
        await asyncio.sleep(0.05)
    stop.set()
    await task


def counts(cfg: Config, table: str) -> dict[tuple[str, int, int], int]:
    catalog = iceberg_catalog.load(cfg.catalog)
    try:
        return dict(support.count_offsets(catalog, table))
    finally:
        support.close_catalog(catalog)


def rows(n: int, first: int = 0) -> list[dict[str, object] | None]:
    return [{"id": i, "name": f"n{i}", "amount": i * 0.5, "at": "2026-11-01T10:00:00Z"}
            for i in range(first, first + n)]


async def test_every_record_of_every_partition_lands_once_and_a_restart_takes_only_new_ones(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    logs = {("t", 0): json_records(rows(230)), ("t", 1): json_records(rows(170, 1000))}
    source = FakeSource(logs, per_fetch=40)
    await run_until(cfg, source, source.read_to_end)
    assert counts(cfg, "db.events") == {("t", p, r[0]): 1 for (_, p), records in logs.items() for r in records}
    # more records arrive; the next run starts where the table is and fetches nothing twice
    logs[("t", 0)] += json_records(rows(60, 5000), first=230)
    again = FakeSource(logs, per_fetch=40)
    await run_until(cfg, again, again.read_to_end)
    assert [f for f in again.fetched if f[0] == ("t", 0)][0][1] == 230
    assert [f for f in again.fetched if f[0] == ("t", 1)] == []
    assert sum(counts(cfg, "db.events").values()) == 460 and set(counts(cfg, "db.events").values()) == {1}


async def test_a_bad_record_stops_the_pipeline_naming_it_and_nothing_after_it_lands(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    values = rows(20)
    values[7] = {"id": "seven", "name": "x", "amount": 1.0, "at": "2026-11-01T10:00:00Z"}
    source = FakeSource({("t", 0): json_records(values)}, per_fetch=50)
    with pytest.raises(RecordDecodeError) as caught:
        await run_until(cfg, source, lambda: False, timeout=30)
    assert (caught.value.topic, caught.value.partition, caught.value.offset, caught.value.field) == ("t", 0, 7, "id")
    assert counts(cfg, "db.events") == {}


def routed_config(tmp_path: Path, routes: dict[str, str]) -> Config:
    """One topic ``t`` into tables routed by the field ``region``, each by its regex."""
    tables = "".join(f"""
[[tables]]
name = "{name}"
route_field = "region"
route = "{route}"
columns = [{{name = "id", type = "long", required = true}}, {{name = "region", type = "string"}}]
""" for name, route in routes.items())
    path = tmp_path / "frazil.toml"
    support.write_config(tmp_path, "127.0.0.1:1", ["t"], interval=0.2)
    text = path.read_text()
    path.write_text(text[:text.index("[table]")] + tables + text[text.index("[maintenance]"):])
    return support.load(path)


async def test_routed_tables_take_what_routing_gives_them_and_the_rest_is_counted_as_read(tmp_path: Path) -> None:
    cfg = routed_config(tmp_path, {"db.eu": "eu-.*", "db.us": "us"})
    regions = ["eu-west", "us", "ap", "eu-north", "us"] * 20
    source = FakeSource({("t", 0): json_records([{"id": i, "region": r} for i, r in enumerate(regions)])}, per_fetch=33)
    await run_until(cfg, source, source.read_to_end)
    eu, us = counts(cfg, "db.eu"), counts(cfg, "db.us")
    assert sorted(o for _, _, o in eu) == [i for i, r in enumerate(regions) if r.startswith("eu-")]
    assert sorted(o for _, _, o in us) == [i for i, r in enumerate(regions) if r == "us"]
    assert set(eu.values()) == set(us.values()) == {1}


def count_one_by_one(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The partitions whose fetches take the record-by-record path, in order, from now on."""
    from frazil.ingest import intake
    one_by_one = intake.Intake._one_by_one
    calls: list[object] = []

    async def counted(self: intake.Intake, *args: object) -> bool:
        calls.append(args[0])
        return await one_by_one(self, *args)   # type: ignore[arg-type]

    monkeypatch.setattr(intake.Intake, "_one_by_one", counted)
    return calls


@pytest.mark.parametrize("path", ["straight from the fetch", "record by record"])
async def test_records_routed_by_value_land_in_every_table_that_takes_them_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Fetches routed by a field go straight from the fetched bytes to their open tables (a
    record to two tables, or to none); the record-by-record path lands exactly the same rows."""
    from frazil.ingest import intake
    calls = count_one_by_one(monkeypatch)
    if path == "record by record":
        monkeypatch.setattr(intake.Intake, "_routed", lambda *_: None)
    cfg = routed_config(tmp_path, {"db.eu": "eu-.*", "db.west": ".*-west"})
    regions = {0: ["eu-west", "eu-north", "us-west", "ap", "eu-west"] * 23, 1: ["ap", "us-west", "eu-north"] * 31}
    logs = {("t", p): json_records([{"id": p * 1000 + i, "region": r} for i, r in enumerate(rs)])
            for p, rs in regions.items()}
    source = FakeSource(logs, per_fetch=29)
    await run_until(cfg, source, source.read_to_end)
    for table, takes in (("db.eu", lambda r: r.startswith("eu-")), ("db.west", lambda r: r.endswith("-west"))):
        landed = counts(cfg, table)
        assert set(landed.values()) == {1}
        assert sorted(landed) == sorted(("t", p, i) for p, rs in regions.items() for i, r in enumerate(rs) if takes(r))
    assert (calls == []) == (path == "straight from the fetch")


async def test_a_routed_table_holding_part_of_a_fetch_or_skipping_a_record_takes_only_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetches routed by a field leave the path straight from the fetch where a table must pick
    its records: one holds some of the fetch (the other table's commits failed until the process
    stopped: the partition is read again from where that one stopped), or an operator told one
    to skip a record. Record by record, each table takes only what it lacks, and the fetches past
    that go straight again."""
    from frazil import faults
    from frazil.iceberg import offsets

    calls = count_one_by_one(monkeypatch)
    regions = ["eu-west", "eu-north", "us-west"] * 40
    logs = {("t", 0): json_records([{"id": i, "region": r} for i, r in enumerate(regions)])}
    cfg = routed_config(tmp_path, {"db.eu": "eu-.*", "db.west": ".*-west"})
    faults.arm("commit.before_catalog[db.west]", "raise")
    try:
        source = FakeSource(logs, per_fetch=30)
        await run_until(cfg, source, lambda: source.read_to_end() and len(counts(cfg, "db.eu")) == 80)
    finally:
        faults.disarm()
    assert counts(cfg, "db.west") == {}
    logs[("t", 0)] += json_records([{"id": i, "region": r} for i, r in enumerate(regions, 120)], first=120)
    catalog = iceberg_catalog.load(cfg.catalog)
    try:   # an operator says db.eu skips offset 130 (eu-north), not read yet
        with catalog.load_table("db.eu").transaction() as tx:
            tx.set_properties({offsets.skip_key(cfg.pipeline): offsets.encode_skips(
                {("t", 0): {130: {"reason": "test", "by": "test", "at": "now"}}})})
    finally:
        support.close_catalog(catalog)
    calls.clear()
    source = FakeSource(logs, per_fetch=30)
    await run_until(cfg, source, source.read_to_end)
    everything = regions * 2
    for table, takes in (("db.eu", lambda o, r: r.startswith("eu-") and o != 130),
                         ("db.west", lambda o, r: r.endswith("-west"))):
        landed = counts(cfg, table)
        assert set(landed.values()) == {1}, table
        assert sorted(landed) == [("t", 0, o) for o, r in enumerate(everything) if takes(o, r)], table
    assert source.fetched[0][1] == 0   # read again from where db.west stopped
    assert 0 < len(calls) < len(source.fetched), calls   # the rest went straight from the fetch


async def test_a_table_named_by_the_records_takes_them_straight_from_the_fetch_once_it_is_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """[dynamic] tables by a field: a fetch naming a table not open yet goes record by record
    (the table is opened, its schema inferred); later fetches go straight to the open tables."""
    calls = count_one_by_one(monkeypatch)
    path = tmp_path / "frazil.toml"
    path.write_text(SEVERAL.format(dir=tmp_path))
    cfg = support.load(path)
    logs = {("d", 0): json_records([{"id": i, "kind": "xy"[i % 2]} for i in range(200)])}
    source = FakeSource(logs, per_fetch=20)
    await run_until(cfg, source, source.read_to_end)
    landed = {name: counts(cfg, name) for name in ("db.kind_x", "db.kind_y")}
    assert sorted(o for table in landed.values() for _, _, o in table) == list(range(200))
    assert {n for table in landed.values() for n in table.values()} == {1}
    assert len(source.fetched) == 10 and 1 <= len(calls) <= 2, calls


@pytest.mark.parametrize("columns", ["declared", "inferred"])
async def test_tables_named_by_their_topic_take_even_their_first_fetch_straight_from_the_fetch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    """[dynamic] tables by topic: each is opened (created, its schema inferred from its first
    fetch when not declared) before the poll that names it is taken, so no fetch goes record by
    record, and every record lands once in its topic's table."""
    calls = count_one_by_one(monkeypatch)
    declared = 'columns = [{name = "id", type = "long", required = true}, {name = "kind", type = "string"}]'
    path = tmp_path / "frazil.toml"
    path.write_text(BY_TOPIC.format(dir=tmp_path, columns=declared if columns == "declared" else ""))
    cfg = support.load(path)
    logs = {(topic, p): json_records([{"id": i, "kind": topic} for i in range(60)])
            for topic in ("t1", "t2", "t3") for p in (0, 1)}
    source = FakeSource(logs, per_fetch=25)
    await run_until(cfg, source, source.read_to_end)
    for topic in ("t1", "t2", "t3"):
        landed = counts(cfg, f"db.by_{topic}")
        assert sorted(landed) == sorted((topic, p, o) for p in (0, 1) for o in range(60))
        assert set(landed.values()) == {1}
    assert calls == []


async def test_tombstones_are_counted_as_read_and_land_nowhere_in_an_append_table(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    values: list[dict[str, object] | None] = list(rows(10))
    values[3] = values[8] = None
    source = FakeSource({("t", 0): json_records(values)})
    await run_until(cfg, source, source.read_to_end)
    assert sorted(o for _, _, o in counts(cfg, "db.events")) == [0, 1, 2, 4, 5, 6, 7, 9]


async def test_a_keyed_upsert_table_takes_rows_and_tombstones_straight_from_the_fetch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upserts are decoded from the fetched bytes, their tombstones read natively: no record
    becomes a Python object (Chunk.records is the per-record path), and the table holds the
    latest row of every key, deleted keys gone, a tombstone below a row of its key not deleting it."""
    import changes
    from frazil.kafka.fetch import Chunk

    cfg = support.load(changes.config(tmp_path, "127.0.0.1:1", "t", "ups", mode="upsert", interval=0.2,
                                      extra_table='tombstones = "delete"'))
    log: list[tuple[int, int, bytes | None, bytes | None]] = []
    for i in range(300):   # keys 0..29, each changed ten times; every seventh change a tombstone
        key = i % 30
        row = {"id": key, "name": f"n{i}", "amount": i * 0.5, "version": i}
        log.append((i, 1_700_000_000_000 + i, str(key).encode(), None if i % 7 == 3 else json.dumps(row).encode()))

    def per_record(*_: object, **__: object) -> None:
        raise AssertionError("a record of a keyed upsert table became a Python object")

    monkeypatch.setattr(Chunk, "records", per_record)
    source = FakeSource({("t", 0): log}, per_fetch=45)
    await run_until(cfg, source, source.read_to_end)
    latest: dict[int, tuple[int, bytes | None]] = {}
    for offset, _, key, value in log:
        latest[int(key or b"")] = (offset, value)
    expected = {k: (json.loads(v)["name"], json.loads(v)["amount"], json.loads(v)["version"])
                for k, (_, v) in latest.items() if v is not None}
    catalog = iceberg_catalog.load(cfg.catalog)
    try:
        changes.assert_same(changes.table_rows(catalog, cfg.table.name), expected, "pyiceberg")
    finally:
        support.close_catalog(catalog)
    assert len(expected) < 30   # some keys end deleted


async def test_fetch_of_serves_the_bytes_a_broker_would() -> None:
    from fakes import fetch_of

    chunk = fetch_of("t", 3, json_records([{"a": 1}, None], first=40))
    assert [(r.offset, r.value) for r in chunk.records()] == [(40, json.dumps({"a": 1}).encode()), (41, None)]


# one pipeline over several topics (``TOPICS``) in a catalog in ``{dir}``, no maintenance
PIPELINE = """
[pipeline]
name = "p"
commit_interval_s = 0.2

[kafka]
bootstrap_servers = "127.0.0.1:1"
topics = TOPICS

[catalog]
properties = {{ uri = "sqlite:///{dir}/catalog.db", warehouse = "file://{dir}/warehouse" }}

[maintenance]
enabled = false
"""

BY_TOPIC = PIPELINE.replace("TOPICS", '["t1", "t2", "t3"]') + """
[dynamic]
table = "db.by_{{topic}}"
{columns}
"""

SEVERAL = PIPELINE.replace("TOPICS", '["a", "b", "d"]') + """
[[tables]]
name = "db.a"
topics = "a"
columns = [{{name = "id", type = "long", required = true}}, {{name = "kind", type = "string"}}]

[[tables]]
name = "db.b"
topics = "b"
columns = [{{name = "id", type = "long", required = true}}, {{name = "kind", type = "string"}}]

[dynamic]
table = "db.kind_{{kind}}"
topics = "d"
"""


async def test_a_restart_fetches_no_record_every_table_taking_it_already_holds(tmp_path: Path) -> None:
    """Tables taking different topics and tables named by the records: each restart reads each
    partition from the lowest offset a table that takes it still needs, which after a drained
    stop is where the last run ended, and the watermark it resumes from is kept with the data."""
    path = tmp_path / "frazil.toml"
    path.write_text(SEVERAL.format(dir=tmp_path))
    cfg = support.load(path)
    logs: dict[tuple[str, int], list[tuple[int, int, bytes | None, bytes | None]]] = {("a", 0): [], ("b", 0): [],
                                                                                      ("d", 0): []}
    previous: dict[tuple[str, int], int] = {}   # where the last run ended, by partition
    for run in range(4):
        for topic, n in (("a", 70), ("b", 30 if run % 2 else 0), ("d", 50)):
            first = len(logs[(topic, 0)])
            values = [{"id": first + i, "kind": "xy"[(first + i) % 2]} for i in range(n)]
            logs[(topic, 0)] += json_records(values, first=first)
        ends = {tp: len(records) for tp, records in logs.items()}
        source = FakeSource(logs, per_fetch=25)
        await run_until(cfg, source, source.read_to_end)
        if run:
            for tp, first_offset, _ in source.fetched:
                assert first_offset >= previous[tp], f"run {run} fetched {tp} from {first_offset}, below {previous[tp]}"
        previous = ends
    catalog = iceberg_catalog.load(cfg.catalog)
    try:
        landed = {name: support.count_offsets(catalog, name) for name in ("db.a", "db.b", "db.kind_x", "db.kind_y")}
    finally:
        support.close_catalog(catalog)
    assert sorted(o for (_, _, o) in landed["db.a"]) == list(range(len(logs[("a", 0)])))
    assert sorted(o for (_, _, o) in landed["db.b"]) == list(range(len(logs[("b", 0)])))
    assert sorted([o for (_, _, o) in landed["db.kind_x"]] + [o for (_, _, o) in landed["db.kind_y"]]) == list(
        range(len(logs[("d", 0)])))
    assert {n for counts_ in landed.values() for n in counts_.values()} == {1}


ROUTED = """
[pipeline]
name = "p"
commit_interval_s = 0.2

[kafka]
bootstrap_servers = "127.0.0.1:1"
topics = ["t"]

[catalog]
properties = {{ uri = "sqlite:///{dir}/catalog.db", warehouse = "file://{dir}/warehouse" }}

[maintenance]
enabled = false

[[tables]]
name = "db.eu"
route_field = "region"
route = "eu"
columns = [{{name = "id", type = "long", required = true}}, {{name = "region", type = "string"}}]
"""


async def test_records_no_table_takes_at_the_end_are_not_read_again_after_a_restart(tmp_path: Path) -> None:
    """A cycle whose records all went to no table lands no data, so no commit carried the
    watermark past them: it is kept in a table property on its own, and a restart starts after them."""
    path = tmp_path / "frazil.toml"
    path.write_text(ROUTED.format(dir=tmp_path))
    cfg = support.load(path)
    logs = {("t", 0): json_records([{"id": i, "region": "eu"} for i in range(40)])}
    source = FakeSource(logs, per_fetch=40)
    await run_until(cfg, source, source.read_to_end)
    # then only records no table takes: no cycle lands data
    logs[("t", 0)] += json_records([{"id": i, "region": "us"} for i in range(40, 100)], first=40)
    source = FakeSource(logs, per_fetch=25)
    await run_until(cfg, source, source.read_to_end)
    assert sorted(o for _, _, o in counts(cfg, "db.eu")) == list(range(40))
    again = FakeSource(logs, per_fetch=40)
    await run_until(cfg, again, lambda: again.joined, timeout=30)
    assert again.fetched == [], again.fetched


AVRO_V1 = {"type": "record", "name": "Event", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "count", "type": "int"}]}
AVRO_V2 = {**AVRO_V1, "fields": [{"name": "id", "type": "long"}, {"name": "count", "type": "long"},
                                 {"name": "geo", "type": ["null", {"type": "record", "name": "Geo", "fields": [
                                     {"name": "city", "type": "string"}]}], "default": None}]}


async def test_avro_fetches_of_one_poll_learn_their_writer_schemas_again_after_another_changed_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two partitions' fetches decoded at once: the first one's writer schema changes the table
    (a new buffer, which knows no writer schema), and the second, which named only the schema its
    old buffer lacked, learns every one it holds before its records go in."""
    import io

    import fastavro

    from frazil.ingest import registry

    schemas = {1: json.dumps(AVRO_V1), 2: json.dumps(AVRO_V2)}
    monkeypatch.setattr(registry.WriterSchemas, "_fetch", lambda _, schema_id: schemas[schema_id])

    def framed(schema_id: int, i: int) -> bytes:
        out = io.BytesIO()
        record = {"id": i, "count": i} if schema_id == 1 else {"id": i, "count": 3_000_000_000 + i, "geo": None}
        fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_V1 if schema_id == 1 else AVRO_V2), record)
        return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()

    extra = '[values]\nformat = "avro-confluent"\n\n[schema_registry]\nurl = "http://127.0.0.1:1"\n'
    path = support.write_config(tmp_path, "127.0.0.1:1", ["t"], interval=0.2, extra=extra)
    path.write_text(path.read_text().replace('name = "db.events"\n', 'name = "db.events"\nunknown_fields = "evolve"\n',
                                             1))
    cfg = support.load(path)
    # a first poll of id 1 everywhere; then partition 0 holds only id 2, partition 1 ids 1 and 2
    kinds = {0: [1] * 10 + [2] * 10, 1: [1] * 10 + [1] * 5 + [2] * 5}
    logs = {("t", p): [(i, 1_700_000_000_000 + i, None, framed(k, i)) for i, k in enumerate(ks)]
            for p, ks in kinds.items()}
    source = FakeSource(logs, per_fetch=10)
    await run_until(cfg, source, source.read_to_end)
    assert counts(cfg, "db.events") == {("t", p, i): 1 for p, ks in kinds.items() for i in range(len(ks))}
