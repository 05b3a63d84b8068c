"""The dead-letter topic, with the real broker and catalog: a stream of good records mixed with
every kind of bad one, and the process SIGKILLed where a landed commit's bad records are on their
way to the dead-letter topic. Afterwards every good record is in the table once, every bad record
is in the dead-letter topic once (read_committed) with its own key, value and headers and headers
that name the error, the field and where it came from, and nothing else is anywhere."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

import support
from frazil.config import Config
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration]

MODES = {"single": "", "distributed": '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n'}
RECORDS = 3000
PARTITIONS = 2

# every kind of record that cannot become a row as sent: (value, field the error names, words of its reason)
BAD = [
    (b'{"id": 1, "name": "x"', "", "not valid JSON"),
    (b'[1, 2]', "", "not an object"),
    (b'{"id": "seven", "name": "x"}', "id", ""),
    (b'{"name": "no id"}', "id", "is required"),
    (b'{"id": 7.5, "name": "x"}', "id", "fractional part"),
    (b'{"id": 123456789012345678901234567890}', "id", ""),
    (b'{"id": 8, "Name": "x"}', "Name", "differs only in case from column 'name'"),
    (b'{"id": 9, "extra": true}', "extra", "the table has no such column"),
    (b'{"id": 10, "at": 1795428000123}', "at", "declares no unit"),
]


def is_bad(i: int) -> bool:
    return i % 7 == 3


def value_of(i: int) -> bytes:
    return BAD[(i // 7) % len(BAD)][0] if is_bad(i) else support.record(i)


async def produce(bootstrap: str, topic: str, compression: str | None = None) -> None:
    """Record i to partition i % 2, keyed, some with headers of their own."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20,
                                compression_type=compression)
    await producer.start()
    try:
        futures = [await producer.send(topic, value_of(i), key=f"k{i}".encode(), partition=i % PARTITIONS,
                                       headers=[("origin", f"h{i}".encode())] if i % 2 else None)
                   for i in range(RECORDS)]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def all_sent(bootstrap: str, topic: str, count: int) -> Callable[[], None]:
    """A check that ``count`` bad records are in the dead-letter topic (for ``support.wait_for``)."""
    def check() -> None:
        sent = len(asyncio.run(support.dead_letters(bootstrap, topic)))
        assert sent >= count, f"{sent} of {count} bad records in the dead-letter topic"

    return check


def run(config: Path, log: Path, faults: str = "") -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "FRAZIL_FAULTS": faults})


def table_offsets(cfg: Config) -> Counter[tuple[str, int, int]]:
    return support.count_offsets(support.catalog_of(cfg), cfg.table.name)


EXPIRED = "dead_letter.after_commit+expired"   # and the consumer groups' offsets expire while it is down


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("point", ["commit.after_catalog", "dead_letter.before_commit", "dead_letter.after_commit",
                                   EXPIRED])
def test_every_bad_record_reaches_the_dead_letter_topic_once_across_a_kill(kafka: KafkaBroker, tmp_path: Path,
                                                                             point: str, mode: str) -> None:
    """Killed where a landed commit's bad records are on their way, restarted: each arrives once.
    ``EXPIRED``: killed after they went out but before that was noted, and down longer than the
    broker keeps consumer group offsets (deleted here, as expiry does): the restart finds them in
    the dead-letter topic past where the commit says the topic stood, and sends none again."""
    expire = point == EXPIRED
    point = point.split("+")[0]
    topic = f"dlq-{point.replace('.', '-').replace('_', '-')}-{mode}{'-expired' if expire else ''}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    # compressed sources: the dead-letter sink reads the bad records back as the pipeline read them
    asyncio.run(produce(kafka.bootstrap, topic, {"commit.after_catalog": "zstd", "dead_letter.before_commit": "lz4",
                                                 "dead_letter.after_commit": "gzip"}[point]))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, interval=0.5, extra=MODES[mode])
    config.write_text(config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(config)
    assert cfg.on_bad_record == "dead_letter"
    log = tmp_path / "frazil.log"
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))

    proc = run(config, log, faults=f"{point}=kill")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    landed_before = sum(table_offsets(cfg).values())
    sent_before = len(asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)))
    assert (sent_before > 0) == (point == "dead_letter.after_commit"), sent_before   # an open transaction is not read
    assert landed_before > 0, "the kill came after a commit landed"
    if expire:
        expired = asyncio.run(support.expire_groups(kafka.bootstrap, topic))
        assert f"frazil-{topic}-dead-letters-db.events" in expired, expired

    bad = {(topic, i % PARTITIONS, i // PARTITIONS): i for i in range(RECORDS) if is_bad(i)}
    def answering() -> None:   # the restarted coordinator has settled what the kill left and runs cycles
        assert "replied to commit" in log.read_text()[restarted:], "no cycle yet"

    restarted = len(log.read_text())
    proc = run(config, log)
    try:
        support.wait_until_committed(support.catalog_of(cfg), cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
        support.wait_for(all_sent(kafka.bootstrap, cfg.dead_letter_topic, len(bad)), proc, log, timeout=60)
        support.wait_for(answering, proc, log, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]

    # every good record in the table once, no bad one
    counts = table_offsets(cfg)
    good = {(topic, i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS) if not is_bad(i)}
    assert {k for k, n in counts.items() if n > 1} == set(), "duplicated in the table"
    assert set(counts) == good, f"lost {sorted(good - set(counts))[:5]}, unexpected {sorted(set(counts) - good)[:5]}"

    assert_sent_once(asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)), bad, cfg)
    text = log.read_text()
    assert "bad record(s) of db.events to" in text
    if expire:   # the dead-letter position was gone: found past the commit's anchor instead
        assert "already (past where the topic stood before the commit)" in text[restarted:], text[-3000:]


def test_bad_records_go_to_the_dead_letter_topic_from_the_workers_copies_without_reading_the_source_again(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    """Both roles in one process: the sink sends the bad records as the worker fetched them (each
    send logs how many it read back from the source: none), each once, as it was sent."""
    topic = "dlq-copies"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    asyncio.run(produce(kafka.bootstrap, topic, "zstd"))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, interval=0.5)
    config.write_text(config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(config)
    log = tmp_path / "frazil.log"
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    bad = {(topic, i % PARTITIONS, i // PARTITIONS): i for i in range(RECORDS) if is_bad(i)}

    proc = run(config, log)
    try:
        support.wait_until_committed(support.catalog_of(cfg), cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
        support.wait_for(all_sent(kafka.bootstrap, cfg.dead_letter_topic, len(bad)), proc, log, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert_sent_once(asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)), bad, cfg)
    sends = re.findall(r"sent (\d+) bad record\(s\) of db.events to \S+ in \d+ ms \((\d+) read back", log.read_text())
    assert sends and sum(int(n) for n, _ in sends) == len(bad), sends
    assert {back for _, back in sends} == {"0"}, sends


def assert_sent_once(letters: list, bad: dict[tuple[str, int, int], int], cfg: Config) -> None:  # type: ignore[type-arg]
    """Every bad record in the dead-letter topic once, as it was sent, saying why."""
    seen: Counter[tuple[str, int, int]] = Counter()
    for letter in letters:
        where, h = support.source_of(letter)
        seen[where] += 1
        i = bad[where]
        value, field, words = BAD[(i // 7) % len(BAD)]
        assert (letter.key, letter.value) == (f"k{i}".encode(), value), where
        assert h["frazil.error.field"] == field, (where, h)
        assert words in h["frazil.error"] and h["frazil.error"], (where, h)
        assert h["frazil.pipeline"] == cfg.pipeline and h["frazil.table"] == cfg.table.name
        assert h["frazil.commit_id"].startswith(cfg.pipeline) and h["frazil.source.timestamp"]
        own = [(k, v) for k, v in letter.headers if not k.startswith("frazil.")]
        assert own == ([("origin", f"h{i}".encode())] if i % 2 else []), (where, own)
    assert {k for k, n in seen.items() if n > 1} == set(), "duplicated in the dead-letter topic"
    assert set(seen) == set(bad), (f"missing {sorted(set(bad) - set(seen))[:5]}, "
                                   f"unexpected {sorted(set(seen) - set(bad))[:5]}")


ROUTING_CONFIG = """\
[pipeline]
name = "{name}"
commit_interval_s = 0.5
on_bad_record = "dead_letter"

[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{name}-routed", "{name}-dyn"]
session_timeout_ms = 2000
heartbeat_interval_ms = 500

[catalog]
properties = {{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }}

[[tables]]
name = "db.clicks"
topics = ".*-routed"
route_field = "kind"
route = "click"
columns = [{{ name = "id", type = "long", required = true }}, {{ name = "kind", type = "string" }}]

[dynamic]
table = "ev.{{kind}}"
topics = ".*-dyn"
create = false
columns = [{{ name = "id", type = "long", required = true }}, {{ name = "kind", type = "string" }}]
{extra}"""


def routed_value(i: int) -> bytes:
    """Topic -routed: clicks land in db.clicks; other kinds no table takes (unrouted, not bad); a
    value that is not JSON cannot be routed at all (bad)."""
    return (b'{"kind": "click", "id": ' if i % 5 == 0 else
            json.dumps({"id": i, "kind": "other" if i % 5 == 1 else "click"}).encode())


def dyn_value(i: int) -> bytes:
    """Topic -dyn: views land in ev.view; "nope" names a table that does not exist (create =
    false); a record without kind names no table."""
    return json.dumps({"id": i} if i % 6 == 0 else {"id": i, "kind": "nope" if i % 6 == 1 else "view"}).encode()


@pytest.mark.parametrize("mode", list(MODES))
def test_records_routing_finds_bad_reach_the_dead_letter_topic_once_across_a_kill(kafka: KafkaBroker, tmp_path: Path,
                                                                                    mode: str) -> None:
    """Records that no table can take because of what they are (not valid JSON where a route
    field must be read, a template field naming no table, a named table that cannot be opened)
    go with the first declared table's commits and reach the dead-letter topic once, naming the
    table they were meant for; records routed nowhere on purpose stay unrouted."""
    name = f"route-bad-{mode}"
    n = 600
    for suffix in ("routed", "dyn"):
        asyncio.run(support.create_topic(kafka.bootstrap, f"{name}-{suffix}", PARTITIONS))
    asyncio.run(support.produce(kafka.bootstrap, f"{name}-routed", [routed_value(i) for i in range(n)], PARTITIONS))
    asyncio.run(support.produce(kafka.bootstrap, f"{name}-dyn", [dyn_value(i) for i in range(n)], PARTITIONS))
    config = tmp_path / "frazil.toml"
    config.write_text(ROUTING_CONFIG.format(name=name, bootstrap=kafka.bootstrap, extra=MODES[mode]))
    cfg = support.load(config)
    assert cfg.dynamic is not None
    from frazil.iceberg import catalog as iceberg_catalog
    iceberg_catalog.ensure_table(support.catalog_of(cfg), dataclasses.replace(cfg.dynamic.table_config("ev.view"),
                                                                              create=True))
    log = tmp_path / "frazil.log"

    proc = run(config, log, faults="dead_letter.before_commit=kill")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    letters = asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))
    assert letters == [], "killed before its transaction"

    # (topic, partition, offset) of record i: support.produce sends them round-robin
    def where(topic: str, i: int) -> tuple[str, int, int]:
        return (topic, i % PARTITIONS, i // PARTITIONS)

    bad = {where(f"{name}-routed", i): ("", "not valid JSON") for i in range(n) if i % 5 == 0}
    bad |= {where(f"{name}-dyn", i): ("", "it names no table") for i in range(n) if i % 6 == 0}
    bad |= {where(f"{name}-dyn", i): ("ev.nope", "which cannot be opened") for i in range(n) if i % 6 == 1}

    want_clicks = Counter(where(f"{name}-routed", i) for i in range(n) if i % 5 > 1)
    want_views = Counter(where(f"{name}-dyn", i) for i in range(n) if i % 6 > 1)

    proc = run(config, log)
    try:
        catalog = support.catalog_of(cfg)

        def landed() -> None:
            assert sum(support.count_offsets(catalog, "db.clicks").values()) >= len(want_clicks)
            assert sum(support.count_offsets(catalog, "ev.view").values()) >= len(want_views)

        support.wait_for(landed, proc, log, timeout=120)
        support.wait_for(all_sent(kafka.bootstrap, cfg.dead_letter_topic, len(bad)), proc, log, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]

    catalog = support.catalog_of(cfg)
    clicks, views = support.count_offsets(catalog, "db.clicks"), support.count_offsets(catalog, "ev.view")
    assert clicks == want_clicks, "every click once, nothing else"
    assert views == want_views, "every view once, nothing else"
    seen: Counter[tuple[str, int, int]] = Counter()
    for letter in asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)):
        at, h = support.source_of(letter)
        seen[at] += 1
        table, words = bad[at]
        assert (h["frazil.table"], h["frazil.carried_by"]) == (table, "db.clicks"), h
        assert words in h["frazil.error"], h
    assert {k for k, c in seen.items() if c > 1} == set(), "duplicated in the dead-letter topic"
    assert set(seen) == set(bad), (f"missing {sorted(set(bad) - set(seen))[:5]}, "
                                   f"unexpected {sorted(set(seen) - set(bad))[:5]}")
