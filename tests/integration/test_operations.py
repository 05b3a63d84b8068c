"""Operating frazil: Kafka security (SASL with and without TLS, OAUTHBEARER with tokens from a real
OAuth server) on every client, the CLI's
one-line errors and exit codes, ``frazil status`` against what a run committed, and the systemd
notification protocol (READY, WATCHDOG, STOPPING) of a real ``frazil run`` drained by SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import support
from frazil.config import Config
from frazil_dev.kafka_broker import (
    CLIENT_KEY_PASSWORD,
    SASL_PASSWORD,
    SASL_USER,
    KafkaBroker,
    client_certificate,
    free_port,
)
from frazil_dev.oauth_server import CLIENT_ID, CLIENT_SECRET, OAuthServer

pytestmark = [pytest.mark.integration]

PARTITIONS = 2


def frazil(*args: str, cwd: Path, env: dict[str, str] | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frazil.cli", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL,
                          timeout=timeout, env={**os.environ, **(env or {})})


def one_line_error(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """The command failed with ``code`` and said why in one line naming ``needles`` (no traceback)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code and len(lines) == 1, (done.returncode, done.stderr[-3000:])
    assert lines[0].startswith("frazil: ") and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


async def read_all(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    """The (topic, partition, offset) sources of every committed dead letter."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        out = []
        while await consumer.position(tp) < end:
            for record in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                headers = {k: v.decode() for k, v in record.headers}
                out.append((headers["frazil.source.topic"], int(headers["frazil.source.partition"]),
                            int(headers["frazil.source.offset"])))
        return out
    finally:
        await consumer.stop()


def secure_kafka(kafka: KafkaBroker, *, tls: bool, mechanism: str, password: str = "env") -> str:
    """The ``[kafka]`` keys for the broker's SASL listener (over TLS when ``tls``); the password
    from the environment variable FRAZIL_TEST_SASL or from a file."""
    assert kafka.secure is not None, "the session broker is started with its secure listeners"
    port = kafka.secure.sasl_ssl if tls else kafka.secure.sasl_plaintext
    lines = [f'security_protocol = "{"SASL_SSL" if tls else "SASL_PLAINTEXT"}"', f'sasl_mechanism = "{mechanism}"',
             f'sasl_username = "{SASL_USER}"',
             'sasl_password_env = "FRAZIL_TEST_SASL"' if password == "env" else f'sasl_password_file = "{password}"']
    if tls:
        lines.append(f'ssl_cafile = "{kafka.secure.ca_file}"')
    return f'bootstrap_servers = "127.0.0.1:{port}"\n' + "\n".join(lines) + "\n"


def with_kafka(config: Path, kafka_keys: str) -> None:
    """Point ``config``'s [kafka] section at other servers/security."""
    lines = config.read_text().splitlines(keepends=True)
    out = [kafka_keys if line.startswith("bootstrap_servers") else line for line in lines]
    config.write_text("".join(out))


def assert_landed_or_dead_letters(kafka: KafkaBroker, cfg: Config, topic: str, count: int) -> None:
    """Every 50th record (from the 8th) of ``count`` is a dead letter, every other is in the table once."""
    bad = {(topic, i % PARTITIONS, i // PARTITIONS) for i in range(count) if i % 50 == 7}
    counts = support.count_offsets(support.catalog_of(cfg), cfg.table.name)
    expected = {(topic, i % PARTITIONS, i // PARTITIONS) for i in range(count)} - bad
    assert set(counts) == expected and max(counts.values()) == 1
    letters = asyncio.run(read_all(kafka.bootstrap, cfg.dead_letter_topic))
    assert sorted(letters) == sorted(bad), letters


@pytest.mark.parametrize("mode", ["single", "distributed"])
def test_a_pipeline_lands_everything_through_sasl_over_tls_and_never_prints_the_password(
        kafka: KafkaBroker, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    topic = f"sasl-{mode}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    values = [support.record(i) if i % 50 != 7 else b'{"id": "not a number"}' for i in range(600)]
    asyncio.run(support.produce(kafka.bootstrap, topic, values, PARTITIONS))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=f"sasl-{mode}",
                                  extra=f'\n[coordination]\nmode = "{mode}"\n')
    config.write_text(config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    with_kafka(config, secure_kafka(kafka, tls=True, mechanism="SCRAM-SHA-512"))
    monkeypatch.setenv("FRAZIL_TEST_SASL", SASL_PASSWORD)
    cfg = support.load(config)
    assert cfg.kafka.security.protocol == "SASL_SSL" and SASL_PASSWORD not in repr(cfg)
    # the plaintext listener is only for the test's own producer and reader
    ends = asyncio.run(support.end_offsets(cfg.kafka, [topic]))
    assert sum(ends.values()) == len(values)
    with caplog.at_level("DEBUG"):
        asyncio.run(support.run_until_committed(cfg, ends))
    # the dead letters went out through the secure listener (transactional producer and reader)
    assert_landed_or_dead_letters(kafka, cfg, topic, len(values))
    assert SASL_PASSWORD not in caplog.text
    checked = frazil("config", "check", "--config", str(config), "--connect", cwd=tmp_path,
                     env={"FRAZIL_TEST_SASL": SASL_PASSWORD})
    assert checked.returncode == 0, checked.stderr
    assert "SASL_SSL SCRAM-SHA-512" in checked.stdout and "reached    kafka: 1 source topic(s)" in checked.stdout
    assert SASL_PASSWORD not in checked.stdout + checked.stderr


def oauth_kafka(kafka: KafkaBroker, idp: OAuthServer) -> str:
    """The ``[kafka]`` keys for the broker's OAUTHBEARER listener, tokens from ``idp``; the client
    secret from the environment variable FRAZIL_TEST_OAUTH."""
    assert kafka.secure is not None and kafka.secure.oauth, "the session broker has its OAUTHBEARER listener"
    return (f'bootstrap_servers = "127.0.0.1:{kafka.secure.oauth}"\nsecurity_protocol = "SASL_PLAINTEXT"\n'
            f'sasl_mechanism = "OAUTHBEARER"\nsasl_oauthbearer_token_endpoint_url = "{idp.token_url}"\n'
            f'sasl_oauthbearer_client_id = "{CLIENT_ID}"\nsasl_oauthbearer_client_secret_env = "FRAZIL_TEST_OAUTH"\n')


@pytest.mark.parametrize("mode", [pytest.param("single", marks=pytest.mark.matrix), "distributed"])
def test_a_pipeline_lands_everything_through_oauthbearer_while_its_tokens_expire_and_are_renewed(
        kafka: KafkaBroker, oauth_server: OAuthServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        mode: str) -> None:
    """Both coordination modes (distributed: the coordinator's channel and the workers'
    transactional replies too; dead letters in both) through the OAUTHBEARER listener for longer
    than a token lives: the broker checks each token's signature against Keycloak's keys and ends
    each session when its token expires (or after OAUTH_REAUTH_MS); frazil asks Keycloak for a new
    token before the old one expires. Commits land before and after each renewal, and every record
    is in the table once or a dead letter."""
    topic = f"oauth-events-{mode}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=f"oauth-{mode}", interval=1.0,
                                  extra=f'\n[coordination]\nmode = "{mode}"\n')
    config.write_text(config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    with_kafka(config, oauth_kafka(kafka, oauth_server))
    monkeypatch.setenv("FRAZIL_TEST_OAUTH", CLIENT_SECRET)
    cfg = support.load(config)
    assert cfg.kafka.security.oauth and CLIENT_SECRET not in repr(cfg)
    log = tmp_path / "frazil.log"
    chunks, per = 18, 100   # one chunk every 2.5 s: 45 s, more than two token lifetimes
    values = [support.record(i) if i % 50 != 7 else b'{"id": "not a number"}' for i in range(chunks * per)]
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        for c in range(chunks):
            asyncio.run(support.produce(kafka.bootstrap, topic, values[c * per:(c + 1) * per], PARTITIONS))
            time.sleep(2.5)
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        support.wait_until_committed(support.catalog_of(cfg), cfg, ends, timeout=120,
                                     alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    # the dead letters went out through the secure listener (transactional producer and reader)
    assert_landed_or_dead_letters(kafka, cfg, topic, len(values))
    # tokens were renewed while the pipeline ran: commits landed before and after a renewal (one
    # near the end of the run may come after the last commit: those are not counted)
    lines = text.splitlines()
    tokens = [i for i, line in enumerate(lines) if f"OAuth token for client {CLIENT_ID} from" in line]
    commits = [i for i, line in enumerate(lines) if re.search(r"commit \S+ landed in \S+ as snapshot", line)]
    assert commits and len(tokens) >= 2, (len(tokens), text[-3000:])
    renewed_between_commits = [t for t in tokens[1:] if commits[0] < t < commits[-1]]
    assert renewed_between_commits, (tokens, commits)
    assert f"valid {support.OAUTH_TOKEN_S}s" in text
    assert CLIENT_SECRET not in text and "Traceback" not in text


def test_a_wrong_oauth_client_secret_is_one_line_naming_the_token_endpoint(
        kafka: KafkaBroker, oauth_server: OAuthServer, tmp_path: Path) -> None:
    config = support.write_config(tmp_path, kafka.bootstrap, ["oauth-events"], pipeline="oauth-wrong")
    with_kafka(config, oauth_kafka(kafka, oauth_server))
    done = frazil("offsets", "--config", str(config), cwd=tmp_path, env={"FRAZIL_TEST_OAUTH": "not-the-secret"})
    line = one_line_error(done, 3, "KafkaUnavailable", f"token endpoint {oauth_server.token_url} for client "
                          f"{CLIENT_ID} refused: HTTP 401 unauthorized_client")
    assert "not-the-secret" not in done.stdout + done.stderr, line


def mtls_kafka(kafka: KafkaBroker, cert: Path | None, key: Path | None) -> str:
    """The ``[kafka]`` keys for the broker's listener that requires a client certificate; the key's
    password from the environment variable FRAZIL_TEST_KEY."""
    assert kafka.secure is not None and kafka.secure.mtls
    lines = [f'bootstrap_servers = "127.0.0.1:{kafka.secure.mtls}"', 'security_protocol = "SSL"',
             f'ssl_cafile = "{kafka.secure.ca_file}"']
    if cert is not None and key is not None:
        lines += [f'ssl_certfile = "{cert}"', f'ssl_keyfile = "{key}"', 'ssl_key_password_env = "FRAZIL_TEST_KEY"']
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("mode", ["single", "distributed"])
def test_mutual_tls_lands_everything_with_the_client_certificate_and_refuses_in_one_line_without_it(
        kafka: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """The broker's listener with ``ssl.client.auth=required``: the consumer, the transactional
    dead-letter producer and the admin client all present the certificate (in distributed mode the
    coordinator's channel and the workers' transactional replies too); without one, or with one
    another CA signed, the broker ends the handshake and frazil says so in one line (exit 3)."""
    assert kafka.secure is not None
    topic = f"mtls-events-{mode}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    values = [support.record(i) if i % 50 != 7 else b'{"id": "not a number"}' for i in range(400)]
    asyncio.run(support.produce(kafka.bootstrap, topic, values, PARTITIONS))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=f"mtls-{mode}",
                                  extra=f'\n[coordination]\nmode = "{mode}"\n')
    config.write_text(config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    with_kafka(config, mtls_kafka(kafka, kafka.secure.client_cert, kafka.secure.client_key))
    monkeypatch.setenv("FRAZIL_TEST_KEY", CLIENT_KEY_PASSWORD)
    cfg = support.load(config)
    assert cfg.kafka.security.ssl_certfile == str(kafka.secure.client_cert) and CLIENT_KEY_PASSWORD not in repr(cfg)
    ends = asyncio.run(support.end_offsets(cfg.kafka, [topic]))   # through the mTLS listener too
    asyncio.run(support.run_until_committed(cfg, ends))
    assert_landed_or_dead_letters(kafka, cfg, topic, len(values))

    _, stranger_cert, stranger_key = client_certificate(tmp_path, "stranger")
    for cert, key, why in ((None, None, "no-certificate"), (stranger_cert, stranger_key, "another-ca")):
        (tmp_path / why).mkdir()
        refused = support.write_config(tmp_path / why, kafka.bootstrap, [topic], pipeline="mtls")
        with_kafka(refused, mtls_kafka(kafka, cert, key))
        done = frazil("offsets", "--config", str(refused), cwd=tmp_path)
        line = one_line_error(done, 3, "KafkaUnavailable", f"127.0.0.1:{kafka.secure.mtls}",
                              "if its listener requires a client certificate, kafka.ssl_certfile and ssl_keyfile "
                              "must name one its truststore's CA signed")
        assert CLIENT_KEY_PASSWORD not in done.stdout + done.stderr, (why, line)


def test_sasl_plain_with_a_password_file_reaches_the_broker_and_a_wrong_password_is_one_line(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "sasl-plain"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
    secret = tmp_path / "kafka.secret"
    secret.write_text(SASL_PASSWORD + "\n")
    config = support.write_config(tmp_path, kafka.bootstrap, [topic])
    with_kafka(config, secure_kafka(kafka, tls=False, mechanism="PLAIN", password=str(secret)))
    done = frazil("offsets", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "not created yet" in done.stdout
    secret.write_text("not-the-password")
    for args in (("offsets",), ("status",), ("config", "check", "--connect")):
        failed = frazil(*args, "--config", str(config), cwd=tmp_path)
        line = one_line_error(failed, 3, "KafkaUnavailable", f"127.0.0.1:{kafka.secure.sasl_plaintext}",  # type: ignore[union-attr]
                              "SASL_PLAINTEXT PLAIN", "Authentication failed")
        assert "not-the-password" not in line


def test_each_cli_error_is_one_line_with_its_exit_status(kafka: KafkaBroker, tmp_path: Path) -> None:
    assert frazil("--version", cwd=tmp_path).stdout.startswith("frazil ")
    topic = "cli-errors"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
    good = support.write_config(tmp_path / "good", kafka.bootstrap, [topic])
    # unreachable broker: 3
    dead = support.write_config(tmp_path / "dead", f"127.0.0.1:{free_port()}", [topic])
    for args in (("offsets",), ("status",), ("config", "check", "--connect")):
        one_line_error(frazil(*args, "--config", str(dead), cwd=tmp_path), 3, "cannot reach Kafka",
                       "Connect call failed")
    # a mistyped catalog URI is a configuration error: 2
    typo = support.write_config(tmp_path / "typo", kafka.bootstrap, [topic])
    typo.write_text(typo.read_text().replace('uri = "sqlite:///', 'uri = "sqlit:///'))
    one_line_error(frazil("offsets", "--config", str(typo), cwd=tmp_path), 2, "configuration error", "sqlit")
    # a missing source topic: 5
    missing = support.write_config(tmp_path / "missing", kafka.bootstrap, ["no-such-topic"])
    one_line_error(frazil("offsets", "--config", str(missing), cwd=tmp_path), 5, "no-such-topic", "does not exist")
    # a table that must exist and does not: 5
    fixed = support.write_config(tmp_path / "fixed", kafka.bootstrap, [topic])
    fixed.write_text(fixed.read_text().replace('name = "db.events"', 'name = "db.events"\ncreate = false'))
    one_line_error(frazil("config", "check", "--connect", "--config", str(fixed), cwd=tmp_path), 5, "db.events")
    # a locked catalog fails fast instead of waiting for the lock: 4
    assert frazil("offsets", "--config", str(good), cwd=tmp_path).returncode == 0   # creates the catalog's tables
    held, release = threading.Event(), threading.Event()

    def lock() -> None:
        conn = sqlite3.connect(tmp_path / "good" / "warehouse" / "catalog.db", isolation_level=None)
        # the catalog is in write-ahead-log mode, where readers pass a writer's lock: held
        # exclusively, it keeps everyone out, as another tool holding the file would
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        held.set()
        release.wait(120)
        conn.execute("COMMIT")
        conn.close()

    locker = threading.Thread(target=lock)
    locker.start()
    try:
        assert held.wait(30)
        started = time.monotonic()
        one_line_error(frazil("offsets", "--config", str(good), cwd=tmp_path, timeout=50), 4, "CatalogUnavailable",
                       "database is locked")
        assert time.monotonic() - started < 45, "offsets waited out the lock instead of failing"
    finally:
        release.set()
        locker.join()
    # the config check itself names the key (2), and the old spelling still works
    bad = support.write_config(tmp_path / "bad", kafka.bootstrap, [topic])
    bad.write_text(bad.read_text().replace("[kafka]", '[kafka]\nsecurity_protocol = "SASL_SSL"', 1))
    one_line_error(frazil("check-config", "--config", str(bad), cwd=tmp_path), 2, "kafka.sasl_mechanism")
    # a CA file that is not a certificate: the config check names the key (2), no traceback
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    tls = support.write_config(tmp_path / "tls", kafka.bootstrap, [topic])
    tls.write_text(tls.read_text().replace("[kafka]",
                                           f'[kafka]\nsecurity_protocol = "SSL"\nssl_cafile = "{not_pem}"', 1))
    for args in (("config", "check"), ("config", "check", "--connect"), ("status",)):
        one_line_error(frazil(*args, "--config", str(tls), cwd=tmp_path), 2, "kafka.ssl_cafile")
    # a config file frazil may not read (0640 root:frazil, read by another operator): 2
    unreadable = tmp_path / "unreadable.toml"
    unreadable.write_text(good.read_text())
    unreadable.chmod(0)
    if os.geteuid() == 0:   # root reads it anyway: a folder stands in for what cannot be read
        unreadable.unlink()
        unreadable.mkdir()
    one_line_error(frazil("status", "--config", str(unreadable), cwd=tmp_path), 2, "cannot be read")


def _receive(sock: socket.socket, seen: list[tuple[float, str]], done: threading.Event) -> None:
    sock.settimeout(0.2)
    while not done.is_set():
        try:
            seen.append((time.monotonic(), sock.recv(4096).decode()))
        except TimeoutError:
            continue
    sock.setblocking(False)   # what the process sent before it exited (STOPPING) may still be queued
    while True:
        try:
            seen.append((time.monotonic(), sock.recv(4096).decode()))
        except BlockingIOError:
            return


def test_run_under_systemd_notify_reports_status_and_drains_on_sigterm(kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "ops-status"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    first = 400
    asyncio.run(support.produce(kafka.bootstrap, topic, [support.record(i) for i in range(first)], PARTITIONS))
    metrics_port = free_port()
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="ops", interval=1.0,
                                  metrics_port=metrics_port)
    cfg = support.load(config)
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    seen: list[tuple[float, str]] = []
    done = threading.Event()
    receiver = threading.Thread(target=_receive, args=(sock, seen, done), daemon=True)
    receiver.start()
    log = tmp_path / "frazil.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)], cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "1000000"})
    try:
        def ready() -> None:
            assert any("READY=1" in m for _, m in seen), seen

        support.wait_for(ready, proc, log, timeout=120)
        ready_message = next(m for _, m in seen if "READY=1" in m)
        assert f"MAINPID={proc.pid}" in ready_message and "STATUS=2 partition(s)" in ready_message, ready_message
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        catalog = support.catalog_of(cfg)
        support.wait_until_committed(catalog, cfg, ends, alive=lambda: proc.poll() is None)

        def settled() -> dict:  # type: ignore[type-arg]
            done_ = frazil("status", "--json", "--config", str(config), cwd=tmp_path)
            assert done_.returncode == 0, done_.stderr
            report = json.loads(done_.stdout)
            assert report["metrics"]["answering"] and report["metrics"]["coordinating"] == 1, report
            assert report["members"] and report["tables"][0]["rows"] == first, report
            return report  # type: ignore[no-any-return]

        report = support.wait_for(settled, proc, log, timeout=60)
        table = report["tables"][0]
        snapshot = catalog.load_table(cfg.table.name).current_snapshot()
        assert table["snapshot_id"] == snapshot.snapshot_id and table["commit_id"].startswith("ops-")
        assert {(r["topic"], r["partition"]): (r["table_offset"], r["log_end"], r["lag"])
                for r in table["partitions"]} == {tp: (end, end, 0) for tp, end in ends.items()}
        assert len(report["members"]) == 1 and sorted(map(tuple, report["members"][0]["partitions"])) == sorted(ends)
        assert report["coordinator"] == "each process, for its own partitions"
        text = frazil("status", "--config", str(config), cwd=tmp_path)
        assert text.returncode == 0 and f"table {cfg.table.name}: last commit ops-" in text.stdout, text.stdout
        pings_at_ready = sum("WATCHDOG=1" in m for _, m in seen)
        time.sleep(2.5)
        assert sum("WATCHDOG=1" in m for _, m in seen) >= pings_at_ready + 3, seen[-10:]
        # more records, then SIGTERM: the drain commits what was read, within the stop deadline
        asyncio.run(support.produce(kafka.bootstrap, topic, [support.record(i) for i in range(first, first + 300)],
                                    PARTITIONS))

        def consumed() -> None:   # read into the buffer, maybe not committed yet: the drain must land them
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=3).read().decode()
            total = sum(float(line.split()[-1]) for line in text.splitlines()
                        if line.startswith("frazil_records_consumed_total"))
            assert total >= first + 300, total

        support.wait_for(consumed, proc, log, timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        done.set()
        receiver.join()
        sock.close()
    messages = [m for _, m in seen]
    assert any("STOPPING=1" in m for m in messages), messages[-8:]
    stopping = next(i for i, m in enumerate(messages) if "STOPPING=1" in m)
    assert stopping > next(i for i, m in enumerate(messages) if "READY=1" in m)
    # nothing lost, nothing doubled: the table holds exactly the offsets below its stored ones
    stored = support.stored(catalog, cfg)
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), stored)
    assert sum(stored.values()) == first + 300, stored


def test_offsets_skip_moves_past_a_bad_record_on_purpose_once_confirmed(kafka: KafkaBroker, tmp_path: Path) -> None:
    from frazil.errors import RecordDecodeError

    topic = "ops-skip"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
    values = [support.record(i) for i in range(40)] + [b'{"id": "forty"}'] + [support.record(i) for i in range(41, 60)]
    asyncio.run(support.produce(kafka.bootstrap, topic, values, 1))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="skip")
    cfg = support.load(config)
    with pytest.raises(RecordDecodeError, match="offset=40"):
        asyncio.run(support.run_until_committed(cfg, {(topic, 0): 60}))
    catalog = support.catalog_of(cfg)
    # confirmation and a reason are required; nothing changes without them
    one_line_error(frazil("offsets", "--config", str(config), "--skip", f"{topic}:0@40", "--reason", "bad id",
                          cwd=tmp_path), 2, "pass --yes")
    one_line_error(frazil("offsets", "--config", str(config), "--skip", f"{topic}:0@40", "--yes", cwd=tmp_path), 2,
                   "--reason")
    with pytest.raises(RecordDecodeError, match="offset=40"):   # still stops there
        asyncio.run(support.run_until_committed(cfg, {(topic, 0): 60}))
    done = frazil("offsets", "--config", str(config), "--skip", f"{topic}:0@40", "--reason", "order 40 has a text id",
                  "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"the record {topic}[0]@40 will never land" in done.stdout, done.stdout
    # the pipeline goes on; the table has every record but the skipped one, once, and its offset moved past it
    asyncio.run(support.run_until_committed(cfg, {(topic, 0): 60}))
    counts = support.count_offsets(catalog, cfg.table.name)
    assert set(counts) == {(topic, 0, o) for o in range(60) if o != 40} and max(counts.values()) == 1
    table = catalog.load_table(cfg.table.name)
    skips = json.loads(table.properties["frazil.skip.skip"])
    assert skips[topic]["0"]["40"]["reason"] == "order 40 has a text id" and "@" in skips[topic]["0"]["40"]["by"]
    # a record the table passed cannot be skipped
    late = frazil("offsets", "--config", str(config), "--skip", f"{topic}:0@10", "--reason", "x", "--yes", cwd=tmp_path)
    assert late.returncode == 1 and "already holds" in late.stderr, late.stderr


def test_offsets_reset_moves_a_table_forward_once_confirmed_and_never_back(kafka: KafkaBroker, tmp_path: Path) -> None:
    from frazil.iceberg.offsets import COMMIT_ID_KEY

    topic = "ops-reset"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
    asyncio.run(support.produce(kafka.bootstrap, topic, [support.record(i) for i in range(20)], 1))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="reset")
    cfg = support.load(config)
    asyncio.run(support.run_until_committed(cfg, {(topic, 0): 20}))
    asyncio.run(support.produce(kafka.bootstrap, topic, [support.record(i) for i in range(20, 60)], 1))
    done = frazil("offsets", "--config", str(config), "--reset", f"{topic}:0=50", "--reason", "drop the backlog",
                  "--yes", cwd=tmp_path)
    assert done.returncode == 0 and "30 record(s) will never land" in done.stdout, done.stdout + done.stderr
    back = frazil("offsets", "--config", str(config), "--reset", f"{topic}:0=30", "--reason", "oops", "--yes",
                  cwd=tmp_path)
    assert back.returncode == 1 and "would move it back" in back.stderr, back.stderr
    asyncio.run(support.run_until_committed(cfg, {(topic, 0): 60}))
    catalog = support.catalog_of(cfg)
    counts = support.count_offsets(catalog, cfg.table.name)
    assert set(counts) == {(topic, 0, o) for o in [*range(20), *range(50, 60)]} and max(counts.values()) == 1
    resets = [s.summary.additional_properties for s in catalog.load_table(cfg.table.name).snapshots()
              if s.summary is not None and "frazil.reset" in s.summary.additional_properties]
    assert len(resets) == 1 and resets[0][COMMIT_ID_KEY].startswith("reset-")
    reset = json.loads(resets[0]["frazil.reset"])
    assert (reset["from"], reset["to"], reset["reason"]) == (20, 50, "drop the backlog") and "@" in reset["by"]


def test_offsets_from_group_takes_over_where_a_kafka_connect_sink_stopped(kafka: KafkaBroker, tmp_path: Path) -> None:
    """Moving from Kafka Connect: the connector's consumer group (``connect-<name>``) committed the
    offsets of what it landed; ``--from-group`` moves the table there, so frazil lands only the rest."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    from frazil.iceberg import catalog as iceberg_catalog

    topic, group = "ops-from-group", "connect-kc-sink"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    asyncio.run(support.produce(kafka.bootstrap, topic, [support.record(i) for i in range(40)], PARTITIONS))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="migrated")
    cfg = support.load(config)
    catalog = support.catalog_of(cfg)
    iceberg_catalog.ensure_table(catalog, cfg.table)   # the connector's table exists already
    connector_at = {(topic, 0): 12, (topic, 1): 15}
    args = ("offsets", "--config", str(config), "--from-group", group, "--reason", "moved from Kafka Connect")

    async def connector(check: object) -> None:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=200)
            await consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "")
                                   for (t, p), o in connector_at.items()})
            await asyncio.to_thread(check)   # type: ignore[arg-type]
        finally:
            await consumer.stop()

    # a group with a live member is still moving: refused, nothing changes
    asyncio.run(connector(lambda: one_line_error(frazil(*args, "--yes", cwd=tmp_path), 1, group, "still has members")))
    assert support.stored(catalog, cfg) == {}
    one_line_error(frazil("offsets", "--config", str(config), "--from-group", "connect-nobody", "--reason", "x",
                          "--yes", cwd=tmp_path), 5, "connect-nobody")
    done = frazil(*args, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 partition(s)" in done.stdout and "12 record(s) never land" in done.stdout, done.stdout
    assert support.stored(catalog, cfg) == connector_at
    asyncio.run(support.run_until_committed(cfg, {(topic, 0): 20, (topic, 1): 20}))
    counts = support.count_offsets(catalog, cfg.table.name)
    assert set(counts) == {(topic, p, o) for (_, p), start in connector_at.items() for o in range(start, 20)}
    assert max(counts.values()) == 1
    # again, once frazil is past the group: nothing moves
    again = frazil(*args, "--yes", cwd=tmp_path)
    assert again.returncode == 0 and "nothing to move" in again.stdout, again.stdout + again.stderr
    assert support.stored(catalog, cfg) == {(topic, 0): 20, (topic, 1): 20}


@pytest.mark.parametrize("mode", ["single", "distributed"])
def test_run_against_an_unreachable_broker_exits_3_and_closes_every_client(tmp_path: Path, mode: str) -> None:
    """A broker restarting while frazil starts: exit 3 (retriable; systemd starts it again) with the
    reason, and no Kafka client left open behind it (aiokafka's "Unclosed AIOKafkaProducer")."""
    dead = support.write_config(tmp_path, f"127.0.0.1:{free_port()}", ["t"],
                                extra=f'\n[coordination]\nmode = "{mode}"\n')
    done = frazil("run", "--config", str(dead), cwd=tmp_path)
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith("frazil: KafkaUnavailable: cannot reach Kafka"), done.stderr
    assert "Unclosed" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    # checked before anything changed: no catalog, no table was created
    assert not (tmp_path / "warehouse").exists(), sorted(str(p) for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("mode", ["single", "distributed"])
def test_run_with_a_listed_topic_that_does_not_exist_exits_5_at_once_and_creates_nothing(
        kafka: KafkaBroker, tmp_path: Path, mode: str) -> None:
    """The documented exit status 5, in both modes, before the catalog or a table is touched
    (single mode used to keep running, logging the Kafka client's "not found in cluster metadata")."""
    cfg = support.write_config(tmp_path, kafka.bootstrap, ["no-such-source-topic"],
                               extra=f'\n[coordination]\nmode = "{mode}"\n')
    started = time.monotonic()
    done = frazil("run", "--config", str(cfg), cwd=tmp_path, timeout=60)
    assert done.returncode == 5, done.stderr[-3000:]
    assert time.monotonic() - started < 30, "it kept running"
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("frazil: NotFound:") and "no-such-source-topic" in last, done.stderr[-2000:]
    assert not (tmp_path / "warehouse").exists(), sorted(str(p) for p in tmp_path.rglob("*"))
