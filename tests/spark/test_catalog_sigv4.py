"""A REST catalog that wants AWS Signature Version 4 (as one behind AWS's API gateway, or Glue's
Iceberg endpoint): frazil's pyiceberg client and Spark's Iceberg client both sign every request
with the AWS default chain's keys for the configured region and service."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import support
from frazil.config import MaintenanceConfig
from frazil.spark import session
from frazil.spark.jobs import TableJobs
from frazil.spark.schedule import Job
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.rest_auth import RestAuthProxy
from frazil_dev.s3 import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 3


def _aws_keys(monkeypatch: pytest.MonkeyPatch, spark: Any, request: pytest.FixtureRequest, secret: str) -> None:
    """The keys in the AWS default chain of this process, frazil's and the shared Spark's JVM."""
    env = {**S3Server.credentials_env(), "AWS_SECRET_ACCESS_KEY": secret}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    system = spark.sparkContext._jvm.java.lang.System
    for name, value in (("aws.accessKeyId", env["AWS_ACCESS_KEY_ID"]), ("aws.secretAccessKey", secret),
                        ("aws.region", env["AWS_REGION"])):
        system.setProperty(name, value)
        request.addfinalizer(lambda name=name: system.clearProperty(name))


def test_both_engines_sign_their_requests_and_every_record_lands_once(
        kafka: KafkaBroker, rest_catalog_sigv4: RestAuthProxy, tmp_path: Path, spark: Any,
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    _aws_keys(monkeypatch, spark, request, S3Server.credentials_env()["AWS_SECRET_ACCESS_KEY"])
    topic = "rest-sigv4-events"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="rest-sigv4", interval=0.5,
                                  table="db.rest_sigv4", catalog=support.sigv4_catalog(rest_catalog_sigv4.uri))
    config.write_text(config.read_text().replace("[catalog]\n", '[catalog]\nname = "sigv4"\n', 1))
    cfg = support.load(config)
    before = rest_catalog_sigv4.stats()
    log = tmp_path / "frazil.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        for c in range(4):   # a few commits
            asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in
                                                                 range(c * 2000, (c + 1) * 2000)), PARTITIONS))
            time.sleep(1.5)
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        catalog = support.catalog_of(cfg)
        support.wait_until_committed(catalog, cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    ingested = rest_catalog_sigv4.stats()
    assert ingested["authorized"] > before["authorized"] and ingested["refused"] == before["refused"], ingested

    assert catalog.load_table(cfg.table.name).inspect.files().num_rows > 1
    # Spark signs too: it compacts the table (reads and a commit through the catalog), then reads it
    for key, value in session.catalog_conf(cfg.catalog.name, cfg.catalog.properties).items():
        spark.conf.set(key, value)
    compacted = TableJobs(spark, cfg.catalog.name, cfg.table.name, MaintenanceConfig(min_input_files=1)).one(
        Job.COMPACT)
    assert compacted.counts.get("rewritten_data_files_count", 0) > 1, compacted
    by_partition = {(r[0], r[1]): (r[2], r[3]) for r in spark.sql(
        f"SELECT _kafka_topic, _kafka_partition, count(*), count(DISTINCT _kafka_offset) "
        f"FROM {cfg.catalog.name}.{cfg.table.name} GROUP BY 1, 2").collect()}
    assert by_partition == {tp: (end, end) for tp, end in ends.items()}, by_partition
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    after = rest_catalog_sigv4.stats()
    assert after["authorized"] > ingested["authorized"] and after["refused"] == before["refused"], after


def test_a_request_signed_with_the_wrong_key_is_a_clear_error(
        kafka: KafkaBroker, rest_catalog_sigv4: RestAuthProxy, tmp_path: Path, spark: Any,
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    _aws_keys(monkeypatch, spark, request, "not-the-secret")
    asyncio.run(support.create_topic(kafka.bootstrap, "rest-sigv4-refused", 1))
    config = support.write_config(tmp_path, kafka.bootstrap, ["rest-sigv4-refused"], pipeline="rest-sigv4-wrong",
                                  table="db.rest_sigv4_wrong", catalog=support.sigv4_catalog(rest_catalog_sigv4.uri))
    before = rest_catalog_sigv4.stats()
    done = subprocess.run([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)], capture_output=True,
                          text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert "refused frazil's SigV4-signed request" in out and "rest.signing-region" in out, out[-3000:]
    assert "not-the-secret" not in out and "Traceback" not in out, out[-3000:]
    assert rest_catalog_sigv4.stats()["refused"] > before["refused"]
