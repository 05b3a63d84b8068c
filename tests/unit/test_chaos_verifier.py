"""The chaos run's verifier finds what it must: a lost, a duplicated, an unexpected or a changed
row; a stale or doubled key of the upsert table; a missing column after a schema change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from frazil import config
from harness import chaos


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _events() -> list[Rec]:
    out = []
    for i in range(6):
        v: dict[str, Any] = {"id": i, "name": f"n{i}", "kind": "big" if i % 3 == 0 else "small"}
        if i >= 4:
            v["x1"] = f"x1-{i}"
        out.append(Rec(chaos.EVENTS, 0, i, None, json.dumps(v).encode()))
    out.append(Rec(chaos.EVENTS, 0, 6, None, b"not json 1"))
    out.append(Rec(chaos.EVENTS, 0, 7, None, json.dumps({"id": "bad-2"}).encode()))
    return out


def _changes() -> list[Rec]:
    rows = [(1, 0, {"id": 1, "name": "a", "amount": 1.5, "version": 1}),
            (2, 1, {"id": 2, "name": "b", "amount": 2.0, "version": 2}),
            (1, 2, {"id": 1, "name": "c", "amount": 3.25, "version": 3}),
            (2, 3, None)]
    return [Rec(chaos.CHANGES, 1, off, str(k).encode(), None if v is None else json.dumps(v).encode())
            for k, off, v in rows]


def _table(rows: list[tuple[int, dict[str, Any]]]) -> pa.Table:
    cols: dict[str, list[Any]] = {"_kafka_topic": [], "_kafka_partition": [], "_kafka_offset": [], "id": [],
                                  "name": [], "kind": [], "x1": []}
    for offset, v in rows:
        cols["_kafka_topic"].append(chaos.EVENTS)
        cols["_kafka_partition"].append(0)
        cols["_kafka_offset"].append(offset)
        for c in ("id", "name", "kind", "x1"):
            cols[c].append(v.get(c))
    return pa.table(cols)


def test_the_expected_tables_are_computed_from_the_records_themselves() -> None:
    want = chaos.expected(_events(), _changes())
    assert len(want["chaos.events"]) == 6 and sorted(k[2] for k in want["chaos.big"]) == [0, 3]
    assert want["bad"] == {(chaos.EVENTS, 0, 6), (chaos.EVENTS, 0, 7)}
    assert want["state"] == {1: ("c", 3.25, 3)}   # key 2 deleted by its tombstone
    assert want["fields"] == ["x1"]


def test_a_faithful_table_passes_and_each_kind_of_damage_is_counted() -> None:
    want = chaos.expected(_events(), _changes())
    good = [(k[2], v) for k, v in sorted(want["chaos.events"].items())]
    assert (chaos.compare_append(_table(good), want["chaos.events"], ["x1"])
            | {"wrong_examples": [], "lost_examples": []}) \
        == {"rows": 6, "lost": 0, "duplicates": 0, "unexpected": 0, "wrong_values": 0, "wrong_examples": [],
            "missing_columns": [], "lost_examples": []}
    damaged = good[1:] + [good[2]] + [(6, {"id": 6})]
    damaged[3] = (damaged[3][0], {**damaged[3][1], "x1": None})   # the evolved column lost its value
    r = chaos.compare_append(_table(damaged), want["chaos.events"], ["x1"])
    assert (r["lost"], r["duplicates"], r["unexpected"], r["wrong_values"]) == (1, 1, 1, 1), r
    no_column = _table(good).drop(["x1"])
    assert chaos.compare_append(no_column, want["chaos.events"], ["x1"])["missing_columns"] == ["x1"]


def test_the_upsert_table_must_hold_the_latest_row_of_every_live_key_once() -> None:
    want = chaos.expected(_events(), _changes())["state"]

    def state(rows: list[tuple[int, str, float, int]]) -> pa.Table:
        return pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "amount": [r[2] for r in rows],
                         "version": [r[3] for r in rows]})

    assert chaos.compare_state(state([(1, "c", 3.25, 3)]), want) | {"stale_examples": []} == {
        "rows": 1, "keys_twice": 0, "lost": 0, "unexpected": 0, "stale": 0, "stale_examples": []}
    r = chaos.compare_state(state([(1, "a", 1.5, 1), (1, "c", 3.25, 3), (2, "b", 2.0, 2)]), want)
    assert (r["keys_twice"], r["unexpected"], r["stale"]) == (1, 1, 1), r


def test_summarize_counts_every_engine_and_the_dead_letters() -> None:
    clean = {"rows": 1, "lost": 0, "duplicates": 0, "unexpected": 0, "wrong_values": 0}
    report = {"engines": {"pyiceberg": {"t": clean}, "spark": {"t": {**clean, "duplicates": 2}}},
              "dead_letters": {"lost": 1, "duplicates": 1, "unexpected": 0}}
    assert chaos.summarize(report) == (1, 3)


def _exited(tmp_path: Any, last_line: str, sig: int) -> chaos.Proc:
    """A process that writes ``last_line`` to its log and dies of ``sig``, as a frazil process
    whose event loop has ended dies of a signal that arrives on its way out."""
    import subprocess
    import sys
    import time

    log = tmp_path / f"p{sig}.log"
    script = f"import os, sys; print({last_line!r}, flush=True); os.kill(os.getpid(), {sig})"
    with open(log, "wb") as out:
        popen = subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT)
    popen.wait(timeout=30)
    return chaos.Proc("x1", popen, log, time.monotonic())


def test_a_process_on_its_way_out_after_a_start_failure_is_a_start_failure_whatever_signal_raced_it(
        tmp_path: Any) -> None:
    """The chaos run (seed 215986939, fault ~250): a rebalance storm's SIGTERM reached a process
    that could not reach Kafka and was exiting 3; it died of the signal's default action (-15)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        assert chaos.start_failed(_exited(tmp_path, "frazil: KafkaUnavailable: cannot reach Kafka", sig))
        assert chaos.start_failed(_exited(tmp_path, "frazil: CatalogUnavailable: cannot reach the catalog", sig))
        # killed by the signal for no reason it printed: a failure of the run, not a start failure
        assert not chaos.start_failed(_exited(tmp_path, "frazil pipeline chaos", sig))
    assert not chaos.start_failed(_exited(tmp_path, "frazil: KafkaUnavailable: cannot reach Kafka", signal.SIGINT))


def test_each_deployment_gets_the_faults_it_can_have() -> None:
    assert chaos.kinds_of("sqlite") == chaos.KINDS
    on_postgres = chaos.kinds_of("postgresql")
    assert set(on_postgres) - set(chaos.KINDS) == {"catalog_restart"} and "catalog_restart" in chaos.EXCLUSIVE
    single = chaos.kinds_of("postgresql", "single")
    assert set(on_postgres) - set(single) == {"kill_worker", "zombie_worker"}
    assert chaos.workers_of("single") == ("s0",) and len(chaos.workers_of("distributed")) == 3
    on_rest = chaos.kinds_of("rest")
    assert set(on_rest) - set(chaos.KINDS) == {"catalog_restart", "s3_errors", "s3_slow"}
    assert {"s3_errors", "s3_slow"} <= chaos.EXCLUSIVE


def test_the_pipeline_config_loads_for_every_catalog_and_mode(tmp_path: Path) -> None:
    sites = {"sqlite": chaos.Site.make("sqlite", tmp_path, 1, None),
             "postgresql": chaos.Site("postgresql", {"uri": "postgresql+psycopg://u:p@127.0.0.1:5432/chaos_1",
                                                     "warehouse": f"file://{tmp_path}/warehouse"}),
             "rest": chaos.Site("rest", {"type": "rest", "uri": "http://127.0.0.1:8181", "warehouse": "s3://chaos/wh",
                                         "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                                         "s3.endpoint": "http://127.0.0.1:9000", "s3.access-key-id": "k",
                                         "s3.secret-access-key": "s", "s3.path-style-access": "true",
                                         "client.region": "us-east-1"})}
    for kind, site in sites.items():
        for mode in chaos.MODES:
            workdir = tmp_path / f"{kind}-{mode}"
            workdir.mkdir()
            procs = chaos.Procs(workdir, "127.0.0.1:9092", site, maintenance=True, mode=mode)
            cfg = config.load(procs.config(procs.workers[0]))
            assert cfg.coordination.mode == mode
            assert cfg.catalog.properties["uri"] == site.properties["uri"]
            assert [t.name for t in cfg.tables] == list(chaos.TABLES)
