"""A REST catalog that needs OAuth 2.0: client credentials against a real token endpoint
(Keycloak), a scope, and tokens that expire while frazil runs."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

import support
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.oauth_server import CLIENT_ID, CLIENT_SECRET, OAuthServer
from frazil_dev.rest_auth import RestAuthProxy

pytestmark = [pytest.mark.integration]

PARTITIONS = 3


def test_commits_land_through_an_oauth_protected_rest_catalog_while_its_tokens_expire(
        kafka: KafkaBroker, oauth_server: OAuthServer, rest_catalog_oauth: RestAuthProxy, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest for more than two token lifetimes: the catalog refuses an expired token (401), frazil's
    catalog client gets a new one from the token endpoint and the commit goes through; every record
    lands once, no commit fails, and more than one token was used."""
    topic = "rest-oauth-events"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    monkeypatch.setenv("FRAZIL_TEST_CATALOG_CREDENTIAL", f"{CLIENT_ID}:{CLIENT_SECRET}")
    properties = support.oauth_catalog(rest_catalog_oauth.uri, oauth_server.token_url)
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="rest-oauth", interval=1.0,
                                  table="db.rest_oauth", catalog=properties)
    cfg = support.load(config)
    assert CLIENT_SECRET not in repr(cfg)
    before = rest_catalog_oauth.stats()
    log = tmp_path / "frazil.log"
    chunks, per = 20, 500   # one chunk every 2.5 s: 50 s, more than two token lifetimes
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        for c in range(chunks):
            asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in
                                                                 range(c * per, (c + 1) * per)), PARTITIONS))
            time.sleep(2.5)
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        catalog = support.catalog_of(cfg)
        support.wait_until_committed(catalog, cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    assert support.stored(catalog, cfg) == ends
    # commits landed across more than a token's lifetime, none failed, and the catalog saw new tokens
    landed = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in text.splitlines()
              if re.search(r"commit \S+ landed in \S+ as snapshot", line)]
    assert (landed[-1] - landed[0]).total_seconds() > 2 * support.OAUTH_TOKEN_S, landed
    assert re.search(r"committed in \d+ commits \(0 failed\)", text), text[-3000:]
    after = rest_catalog_oauth.stats()
    assert after["tokens"] - before["tokens"] >= 2, (before, after)
    assert CLIENT_SECRET not in text and "Traceback" not in text


def test_a_rest_catalog_that_refuses_the_client_is_a_clear_error(
        kafka: KafkaBroker, oauth_server: OAuthServer, rest_catalog_oauth: RestAuthProxy, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong client secret: the token endpoint refuses it, and frazil says so at start as a
    configuration error (exit 2) naming the endpoint and the properties to check, without the secret."""
    monkeypatch.setenv("FRAZIL_TEST_CATALOG_CREDENTIAL", f"{CLIENT_ID}:not-the-secret")
    properties = support.oauth_catalog(rest_catalog_oauth.uri, oauth_server.token_url)
    asyncio.run(support.create_topic(kafka.bootstrap, "rest-oauth-refused", 1))
    config = support.write_config(tmp_path, kafka.bootstrap, ["rest-oauth-refused"], pipeline="rest-oauth-wrong",
                                  table="db.rest_oauth_wrong", catalog=properties)
    done = subprocess.run([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)], capture_output=True,
                          text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert (f"the token endpoint {oauth_server.token_url} refused frazil's client credentials: unauthorized_client"
            in out), out[-3000:]
    assert "check catalog.properties credential" in out
    assert "not-the-secret" not in out and "Traceback" not in out, out[-3000:]
