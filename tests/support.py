"""Helpers shared by the integration and chaos tests: topics, producing, configs, and an
independent reader that counts every (topic, partition, offset) in a table."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from pyiceberg.catalog import Catalog

from frazil import config as config_mod
from frazil import daemon
from frazil.config import Config
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import offsets
from frazil.status import end_offsets
from frazil_dev import workload
from frazil_dev.workload import create_topic

__all__ = ["create_topic", "end_offsets"]

# The session's OAuth server issues tokens that live OAUTH_TOKEN_S; the broker makes an OAUTHBEARER
# connection authenticate again after OAUTH_REAUTH_MS (or when its token expires, if sooner), so a
# run of a minute sees several tokens (conftest.py)
OAUTH_TOKEN_S = 20
OAUTH_REAUTH_MS = 8000
# the scope the session's OAuth-protected REST catalog asks of a token (pyiceberg's and Iceberg's default)
CATALOG_SCOPE = "catalog"

def oauth_catalog(proxy_uri: str, token_url: str) -> str:
    """``[catalog] properties`` for the session's OAuth-protected REST catalog (``rest_catalog_oauth``):
    the client's id and secret as ``credential`` (from the environment variable
    FRAZIL_TEST_CATALOG_CREDENTIAL), Keycloak's token endpoint, the scope the catalog wants."""
    return (f'{{ type = "rest", uri = "{proxy_uri}", credential_env = "FRAZIL_TEST_CATALOG_CREDENTIAL", '
            f'"oauth2-server-uri" = "{token_url}", scope = "{CATALOG_SCOPE}" }}')


SIGV4_REGION = "eu-west-3"   # not the S3 server's region: the signer must take rest.signing-region


def sigv4_catalog(proxy_uri: str) -> str:
    """``[catalog] properties`` for the session's SigV4-protected REST catalog (``rest_catalog_sigv4``):
    requests signed for its region and service, the keys from the AWS default chain (environment)."""
    return (f'{{ type = "rest", uri = "{proxy_uri}", "rest.sigv4-enabled" = "true", '
            f'"rest.signing-region" = "{SIGV4_REGION}", "rest.signing-name" = "execute-api" }}')


SQLITE_CATALOG = '{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }'

CONFIG = """\
[pipeline]
name = "{pipeline}"
commit_interval_s = {interval}
outage_timeout_s = {outage_timeout}
memory_budget_mb = {budget_mb}

[kafka]
bootstrap_servers = "{bootstrap}"
topics = {topics}
session_timeout_ms = 2000
heartbeat_interval_ms = 500

[catalog]
properties = {catalog}

[metrics]
port = {metrics_port}

[table]
name = "{table}"
columns = [
  {{ name = "id", type = "long", required = true }},
  {{ name = "name", type = "string" }},
  {{ name = "amount", type = "double" }},
  {{ name = "at", type = "timestamptz" }},
]

[maintenance]
enabled = {maintenance}
{extra}"""


def write_config(workdir: Path, bootstrap: str, topics: list[str], *, pipeline: str = "p", table: str = "db.events",
                 interval: float = 0.5, outage_timeout: float = 300, budget_mb: int = 256,
                 metrics_port: int = 0, maintenance: bool = False, extra: str = "", catalog: str = "") -> Path:
    """A pipeline config in ``workdir``. ``extra``: more TOML, appended (after ``[maintenance]``:
    keys of that section, then further sections). ``catalog``: the ``[catalog] properties`` as an
    inline TOML table (default: SQLite in ``workdir``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "frazil.toml"
    path.write_text(CONFIG.format(pipeline=pipeline, interval=interval, bootstrap=bootstrap,
                                  topics=json.dumps(topics), table=table, outage_timeout=outage_timeout,
                                  budget_mb=budget_mb, metrics_port=metrics_port,
                                  maintenance=str(maintenance).lower(), extra=extra,
                                  catalog=catalog or SQLITE_CATALOG))
    return path


def record(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i % 97}", "amount": i * 0.5,
                       "at": f"2026-11-{1 + i % 28:02d}T10:00:00Z"}).encode()


async def produce(bootstrap: str, topic: str, values: Iterable[bytes], partitions: int) -> int:
    """Round-robin ``values`` over the partitions (the demo's producer, without progress output)."""
    return await workload.produce(bootstrap, topic, values, partitions=partitions, label=None)


def toml_table(props: Mapping[str, str]) -> str:
    """``props`` as a TOML inline table, every key quoted (catalog properties have dots: s3.endpoint)."""
    return "{ " + ", ".join(f'"{k}" = "{v}"' for k, v in props.items()) + " }"


def catalog_of(cfg: Config) -> Catalog:
    return iceberg_catalog.load(cfg.catalog)


def close_catalog(catalog: Catalog) -> None:
    """Close a SQL catalog's pooled connections (a PostgreSQL connection left to the garbage
    collector is a ResourceWarning, an error in this test suite)."""
    engine = getattr(catalog, "engine", None)
    if engine is not None:
        engine.dispose()


def load(path: Path) -> Config:
    return config_mod.load(path)


def count_offsets(catalog: Catalog, table_name: str) -> Counter[tuple[str, int, int]]:
    """Independent reader: scans the table itself (not frazil's counters or offsets)."""
    data = catalog.load_table(table_name).scan(
        selected_fields=("_kafka_topic", "_kafka_partition", "_kafka_offset")).to_arrow()
    return Counter(zip(data.column("_kafka_topic").to_pylist(), data.column("_kafka_partition").to_pylist(),
                       data.column("_kafka_offset").to_pylist(), strict=True))


def assert_exactly_once(counts: Counter[tuple[str, int, int]], ends: Mapping[tuple[str, int], int],
                        starts: Mapping[tuple[str, int], int] | None = None) -> None:
    """Every offset in ``[start, end)`` of every partition is in the table once; nothing else is."""
    expected = {(t, p, o) for (t, p), end in ends.items() for o in range((starts or {}).get((t, p), 0), end)}
    duplicates = {k: n for k, n in counts.items() if n > 1}
    lost = expected - set(counts)
    extra = set(counts) - expected
    assert not duplicates and not lost and not extra, (
        f"{len(duplicates)} duplicated (e.g. {sorted(duplicates)[:5]}), {len(lost)} lost (e.g. {sorted(lost)[:5]}), "
        f"{len(extra)} unexpected (e.g. {sorted(extra)[:5]})")


def assert_exactly_once_by_partition(catalog: Catalog, table_name: str, ends: Mapping[tuple[str, int], int]) -> None:
    """``assert_exactly_once`` for millions of rows, in Arrow: per partition, as many rows as distinct
    offsets as ``end``, from 0 to ``end - 1``, means each offset of ``[0, end)`` once and nothing else."""
    data = catalog.load_table(table_name).scan(
        selected_fields=("_kafka_topic", "_kafka_partition", "_kafka_offset")).to_arrow()
    agg = data.group_by(["_kafka_topic", "_kafka_partition"]).aggregate([
        ("_kafka_offset", "count"), ("_kafka_offset", "count_distinct"), ("_kafka_offset", "min"),
        ("_kafka_offset", "max")])
    found = {(r["_kafka_topic"], r["_kafka_partition"]): (r["_kafka_offset_count"], r["_kafka_offset_count_distinct"],
                                                         r["_kafka_offset_min"], r["_kafka_offset_max"])
             for r in agg.to_pylist()}
    expected = {tp: (end, end, 0, end - 1) for tp, end in ends.items() if end > 0}
    wrong = {tp: (found.get(tp), want) for tp, want in expected.items() if found.get(tp) != want}
    extra = set(found) - set(expected)
    assert not wrong and not extra, (f"(rows, distinct, min, max) found vs expected: {wrong}; "
                                     f"unexpected partitions {extra}")


def stored(catalog: Catalog, cfg: Config, tables: Sequence[str] = ()) -> dict[tuple[str, int], int]:
    """The stored offsets of the pipeline's table (or of each of ``tables``, together)."""
    have: dict[tuple[str, int], int] = {}
    for name in tables or [cfg.table.name]:
        try:
            table = catalog.load_table(name)
        except Exception:  # noqa: BLE001 - not created yet
            continue
        have.update(offsets.stored_offsets(table.properties, cfg.pipeline))
    return have


def wait_until_committed(catalog: Catalog, cfg: Config, ends: Mapping[tuple[str, int], int], *,
                         timeout: float = 120.0, alive: object = None, tables: Sequence[str] = ()) -> None:
    """Poll the table (or ``tables``) until its stored offsets reach ``ends``; fail with where it
    got to."""
    deadline = time.monotonic() + timeout
    have: dict[tuple[str, int], int] = {}
    while time.monotonic() < deadline:
        have = stored(catalog, cfg, tables)
        if all(have.get(tp, 0) >= end for tp, end in ends.items()):
            return
        if callable(alive) and not alive():
            raise AssertionError(f"the pipeline stopped before committing everything: have {have}, want {dict(ends)}")
        time.sleep(0.2)
    raise AssertionError(f"not committed within {timeout}s: have {have}, want {dict(ends)}")


async def run_until_committed(cfg: Config, ends: dict[tuple[str, int], int], timeout: float = 90) -> None:
    """Run the pipeline in process until the table's offsets reach ``ends``, then drain it."""
    catalog = catalog_of(cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.serve(cfg, stop))
    try:
        for _ in range(int(timeout / 0.2)):
            if task.done():
                task.result()
                raise AssertionError("the pipeline stopped on its own")
            have = await asyncio.to_thread(stored, catalog, cfg)
            if all(have.get(tp, 0) >= end for tp, end in ends.items()):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"not committed within {timeout}s: {have} vs {ends}")
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


def wait_for(check, proc, log: Path, timeout: float = 180):  # type: ignore[no-untyped-def]
    """Until ``check()`` returns (its value) while ``proc`` runs; fail with the last reason and
    the end of ``log``."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-4000:]
        try:
            return check()
        except Exception as exc:  # noqa: BLE001 - not there yet (or the table not created yet)
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout}s: {last}; log: {log.read_text()[-3000:]}")


async def dead_letters(bootstrap: str, topic: str) -> list:  # type: ignore[type-arg]
    """Everything committed in the dead-letter topic."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        if topic not in await consumer.topics():
            return []
        tps = [TopicPartition(topic, 0)]   # frazil creates it with one partition
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        out = []
        idle = 0
        while idle < 5 and await consumer.position(tps[0]) < ends[tps[0]]:
            batches = await consumer.getmany(timeout_ms=1000)
            idle = 0 if batches else idle + 1
            for records in batches.values():
                out.extend(records)
        return out
    finally:
        with contextlib.suppress(asyncio.CancelledError):   # aiokafka's no-group coordinator task, on stop
            await consumer.stop()


async def expire_groups(bootstrap: str, containing: str, *, timeout: float = 30) -> list[str]:
    """Delete every consumer group whose name contains ``containing`` (as the broker's
    ``offsets.retention.minutes`` expiry would drop their offsets, without waiting days for it);
    the groups deleted. A group with a member left (a killed process's session still open) is asked
    again until its session ends."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.protocol.admin import DeleteGroupsRequest

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = sorted(g[0] for g in await admin.list_consumer_groups() if containing in g[0])
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                node = await admin.find_coordinator(name)
                response = await admin._send_request_to_node(node, DeleteGroupsRequest([name]))
                ((_, error),) = response.results
                if error in (0, 69):   # deleted, or gone already (GROUP_ID_NOT_FOUND)
                    break
                assert error == 68 and time.monotonic() < deadline, f"cannot delete group {name}: error {error}"
                await asyncio.sleep(0.5)   # NON_EMPTY_GROUP: a member's session is still open
        for name in names:
            assert not await admin.list_consumer_group_offsets(name), f"{name} still has offsets"
        return names
    finally:
        await admin.close()


def source_of(letter) -> tuple[tuple[str, int, int], dict[str, str]]:  # type: ignore[no-untyped-def]
    """A dead letter's source (topic, partition, offset), and frazil's headers as text."""
    h = {k: v.decode() for k, v in letter.headers if k.startswith("frazil.")}
    return (h["frazil.source.topic"], int(h["frazil.source.partition"]), int(h["frazil.source.offset"])), h
