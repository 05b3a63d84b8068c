"""``frazil run`` with maintenance on: Spark compacts and expires while records stream in."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import support
from frazil.spark import session
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.oauth_server import CLIENT_ID, CLIENT_SECRET
from frazil_dev.s3 import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PER_CHUNK = 1_000
MIN_CHUNKS = 80      # one every 0.25 s: at least 20 s of steady ingestion
AFTER_COMPACTION = 12   # chunks sent after the first compaction is logged: commits land after it too
MAX_PRODUCE_S = 300
PARTITIONS = 4
MAX_SNAPSHOTS = 20
MIN_COMMITS = 2 * MAX_SNAPSHOTS + 5   # expiry must have had work to do
COMPACTED = re.compile(r"maintenance rewrite_data_files on \S+ took .*rewritten_data_files_count=([1-9]\d*)")
LANDED = re.compile(r"coordinator: commit \S+ landed in \S+ as snapshot \d+ with \d+ rows")
# The commit interval: back-to-back commits on the in-memory S3 server (0.3-0.7 s each on a loaded
# machine) leave Spark's compaction commit no gap to win its compare-and-swap in, and it retried
# until the stream ended; a real deployment commits every few seconds or more.
INTERVAL_S = {"s3": 1.0, "glue": 1.0}


def _produce(bootstrap: str, topic: str, log: Path, errors: list[BaseException]) -> None:
    """Steady chunks until a compaction has been logged, a few more chunks have gone after it and
    ``MIN_COMMITS`` commits have landed: the first maintenance turn starts Spark, which on a loaded
    machine takes anywhere from 15 s to a minute, and the test needs commits before, during and after
    a compaction."""
    try:
        deadline = time.monotonic() + MAX_PRODUCE_S
        c, after, commits = 0, None, 0
        while (c < MIN_CHUNKS or after is None or c < after + AFTER_COMPACTION or commits < MIN_COMMITS) \
                and time.monotonic() < deadline:
            asyncio.run(support.produce(bootstrap, topic, (support.record(i) for i in range(c * PER_CHUNK,
                                                                                             (c + 1) * PER_CHUNK)),
                                        PARTITIONS))
            c += 1
            text = log.read_text(errors="replace")
            commits = len(LANDED.findall(text))
            if after is None and COMPACTED.search(text):
                after = c
            time.sleep(0.25)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def catalog_properties(kind: str, request: pytest.FixtureRequest) -> str:
    """The ``[catalog] properties`` of each catalog the daemon is tested on (warehouse per test)."""
    if kind == "sqlite":
        return support.SQLITE_CATALOG
    if kind == "postgresql":
        return f'{{ uri = "{request.getfixturevalue("postgres").uri()}", warehouse = "file://warehouse" }}'
    if kind == "s3":   # the SQLite catalog, its warehouse in an S3-compatible store
        props = request.getfixturevalue("s3").catalog_properties("frazil-maintained")
        props["uri"] = "sqlite:///warehouse/catalog.db"
        return support.toml_table(props)
    if kind == "glue":   # AWS Glue (moto's), its warehouse in the same server's S3
        props = request.getfixturevalue("s3").glue_catalog_properties("frazil-glue")
        return support.toml_table(props)
    if kind == "hive":   # a Hive Metastore; it places the database's tables in its own warehouse
        uri = request.getfixturevalue("hive_metastore").uri
        return f'{{ type = "hive", uri = "{uri}", warehouse = "file://warehouse" }}'
    if kind == "rest-oauth":   # the REST fixture behind OAuth 2.0, tokens from Keycloak that expire during the run;
        # the server places the tables in its own warehouse
        return support.oauth_catalog(request.getfixturevalue("rest_catalog_oauth").uri,
                                     request.getfixturevalue("oauth_server").token_url)
    raise AssertionError(kind)


# "rest-oauth" is the REST variant: the same fixture server, behind OAuth 2.0 (a plain one would add
# nothing but a minute of the suite). make test runs the object-storage kind ("s3" is the SQLite
# catalog, its warehouse on S3); SQLite and PostgreSQL on local files, REST behind OAuth (frazil's
# commits through it: tests/integration/test_catalog_oauth.py in make test), Glue (an S3 warehouse
# again; Spark on Glue is tested by the backfill too) and the Hive Metastore (Spark and frazil on it:
# the Hive backfill in make test) are `make test-matrix`'s.
@pytest.mark.parametrize("kind", [pytest.param("sqlite", marks=pytest.mark.matrix),
                                  pytest.param("postgresql", marks=pytest.mark.matrix),
                                  pytest.param("rest-oauth", marks=pytest.mark.matrix), "s3",
                                  pytest.param("glue", marks=pytest.mark.matrix),
                                  pytest.param("hive", marks=pytest.mark.matrix)])
def test_compaction_and_expiry_run_while_frazil_ingests_and_lose_nothing(
        kafka: KafkaBroker, tmp_path: Path, kind: str, request: pytest.FixtureRequest, spark: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same ingest on each catalog Spark shares with pyiceberg, maintenance on; read back by
    pyiceberg and by Spark SQL."""
    if kind == "glue":   # AWS credentials come from the SDKs' own chain, never from the config file
        for name, value in S3Server.credentials_env().items():
            monkeypatch.setenv(name, value)   # this process's boto3 and frazil's (and its Spark's) environment
        system = spark.sparkContext._jvm.java.lang.System   # the shared Spark's JVM, started before: its properties
        for name, value in (("aws.accessKeyId", os.environ["AWS_ACCESS_KEY_ID"]),
                            ("aws.secretAccessKey", os.environ["AWS_SECRET_ACCESS_KEY"])):
            system.setProperty(name, value)
            request.addfinalizer(lambda name=name: system.clearProperty(name))
    if kind == "rest-oauth":   # the client's id and secret, as `credential_env` names them
        monkeypatch.setenv("FRAZIL_TEST_CATALOG_CREDENTIAL", f"{CLIENT_ID}:{CLIENT_SECRET}")
    topic, name = f"maintained-{kind}", kind.replace("-", "_")
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    config = support.write_config(
        tmp_path, kafka.bootstrap, [topic], interval=INTERVAL_S.get(kind, 0.3), maintenance=True,
        table=f"db.maintained_{name}",
        catalog=catalog_properties(kind, request),
        extra=f"interval_s = 5\nmax_snapshots = {MAX_SNAPSHOTS}\nmin_input_files = 2\n"
              "[spark]\nmaster = \"local[2]\"\nconf = { \"spark.driver.memory\" = \"1g\" }\n")
    config.write_text(config.read_text().replace("[catalog]\n", f'[catalog]\nname = "frazil_{name}"\n', 1))
    cfg = support.load(config)
    catalog = support.catalog_of(cfg)
    request.addfinalizer(lambda: support.close_catalog(catalog))
    log = tmp_path / "frazil.log"
    errors: list[BaseException] = []
    producer = threading.Thread(target=_produce, args=(kafka.bootstrap, topic, log, errors), daemon=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        producer.start()
        producer.join(timeout=MAX_PRODUCE_S + 60)
        assert not errors and not producer.is_alive(), errors
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        assert sum(ends.values()) % PER_CHUNK == 0 and sum(ends.values()) >= MIN_CHUNKS * PER_CHUNK, ends
        support.wait_until_committed(catalog, cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
        # once commits stop, any count over max_snapshots makes expiry due; wait for it to settle
        deadline = time.monotonic() + 90
        while len(catalog.load_table(cfg.table.name).snapshots()) > MAX_SNAPSHOTS and time.monotonic() < deadline:
            time.sleep(0.5)
        # and for the jobs asserted below to have run once: a turn runs its jobs one after another, and
        # on a loaded machine the last of them (orphan removal) can still be running at this point
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None and not (
                "maintenance expire_snapshots" in (seen := log.read_text(errors="replace"))
                and re.search(r"maintenance remove_orphan_files on \S+ took", seen)):
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    text = log.read_text()
    assert code == 0, text[-3000:]

    # nothing lost or duplicated, offsets exactly at the end of the topic
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    assert support.stored(catalog, cfg) == ends
    # a second engine: Spark SQL on the same catalog counts every offset once too
    for key, value in session.catalog_conf(cfg.catalog.name, cfg.catalog.properties).items():
        spark.conf.set(key, value)
    by_partition = {(r[0], r[1]): (r[2], r[3], r[4], r[5]) for r in spark.sql(
        f"SELECT _kafka_topic, _kafka_partition, count(*), count(DISTINCT _kafka_offset), min(_kafka_offset), "
        f"max(_kafka_offset) FROM {cfg.catalog.name}.{cfg.table.name} GROUP BY 1, 2").collect()}
    assert by_partition == {tp: (end, end, 0, end - 1) for tp, end in ends.items()}, by_partition

    lines = text.splitlines()
    # one line per commit that landed data, logged by the coordinator role (in process in single mode)
    commits = [i for i, line in enumerate(lines)
               if re.search(r"coordinator: commit \S+ landed in \S+ as snapshot \d+ with \d+ rows", line)]
    compactions = [(i, int(m.group(1)), int(m.group(2))) for i, line in enumerate(lines)
                   if (m := re.search(r"maintenance rewrite_data_files on \S+ took .*rewritten_data_files_count=(\d+), "
                                      r"added_data_files_count=(\d+)", line))]
    starts = [i for i, line in enumerate(lines) if "maintenance: running rewrite_data_files" in line]
    assert compactions and starts, text[-3000:]
    # a compaction made fewer files while commits were landing around it: before, during and after
    def around(i: int) -> bool:
        start = max(s for s in starts if s < i)
        return any(c < start for c in commits) and any(start < c < i for c in commits) and any(c > i for c in commits)

    retried = [line[:300] for line in lines if re.search(r"Retrying task after failure|attempt \d+/\d+ failed", line)]
    assert any(rewritten > added >= 1 and around(i) for i, rewritten, added in compactions), (
        f"no compaction ran while commits landed: compactions (line, rewritten, added) {compactions}, "
        f"turns started at lines {starts}, {len(commits)} commits at lines {commits[:3]}...{commits[-3:]}, "
        f"retries: {retried[-10:]}")

    table = catalog.load_table(cfg.table.name)
    live_files = table.inspect.files().num_rows
    # each commit added one file; each compaction replaced `rewritten` files by `added`
    assert live_files == len(commits) - sum(r - a for _, r, a in compactions) < len(commits)
    # bounded: however many commits landed, expiry brought the count back under max_snapshots (plus
    # the compaction and manifest-rewrite snapshots of a full run that may have landed after the wait)
    assert len(table.snapshots()) <= MAX_SNAPSHOTS + 2 < 2 * MAX_SNAPSHOTS < len(commits), (len(table.snapshots()),
                                                                                             len(commits))
    assert "maintenance expire_snapshots" in text and "Traceback" not in text
    # orphan removal lists the table's files through its FileIO (prefix listing on object storage)
    assert re.search(r"maintenance remove_orphan_files on \S+ took \S+: orphan_files_count=\d+", text), text[-3000:]
