"""A Kafka broker down for 15 s under a running ``frazil run``: every record lands exactly once,
and the log stays readable. The Kafka client (aiokafka) fails a retry dozens of times a second;
its lines fold into the first of each kind and a summary with the count (python/frazil/logs.py).

The test starts a broker of its own: restarting the session's broker would disturb the other
tests. Single mode, with dead letters (a producer besides the consumer)."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import support
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration]

TOPIC, PARTITIONS, DOWN_S = "restarted", 3, 15.0
LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<logger>\S+): (?P<msg>.*)$")
SUMMARY = re.compile(r"^repeated (?P<n>[\d,]+) (more )?times? ")


def kafka_client_lines(log: Path) -> list[re.Match[str]]:
    """The WARNING and ERROR lines of the Kafka client's loggers."""
    found = (LINE.match(line) for line in log.read_text().splitlines())
    return [m for m in found if m and m["level"] in ("WARNING", "ERROR", "CRITICAL")
            and m["logger"].split(".")[0] in ("aiokafka", "kafka")]


def test_a_broker_outage_loses_nothing_and_its_client_errors_fold_into_a_few_lines(tmp_path: Path) -> None:
    with KafkaBroker.start(tmp_path / "kafka") as broker:
        asyncio.run(support.create_topic(broker.bootstrap, TOPIC, PARTITIONS))
        config = support.write_config(tmp_path / "run", broker.bootstrap, [TOPIC], pipeline="restart")
        config.write_text(config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
        cfg = support.load(config)
        assert cfg.on_bad_record == "dead_letter"
        catalog = support.catalog_of(cfg)
        log = tmp_path / "frazil.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)],
                                    cwd=tmp_path / "run", stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            produced = asyncio.run(support.produce(broker.bootstrap, TOPIC, (support.record(i) for i in range(1000)),
                                                   PARTITIONS))
            ends = asyncio.run(support.end_offsets(broker.bootstrap, [TOPIC]))
            support.wait_until_committed(catalog, cfg, ends, timeout=60, alive=lambda: proc.poll() is None)

            broker.restart(DOWN_S)
            produced += asyncio.run(support.produce(broker.bootstrap, TOPIC,
                                                    (support.record(i) for i in range(1000, 2000)), PARTITIONS))
            ends = asyncio.run(support.end_offsets(broker.bootstrap, [TOPIC]))
            support.wait_until_committed(catalog, cfg, ends, timeout=60, alive=lambda: proc.poll() is None)
            # The outage is over: its summaries are written while frazil runs (a new kind of line,
            # or 10 s without a repeat), not only when it stops.
            support.wait_for(lambda: next(m for m in kafka_client_lines(log) if SUMMARY.match(m["msg"])), proc, log,
                             timeout=20)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
        support.close_catalog(catalog)
    assert code == 0, log.read_text()[-3000:]
    assert produced == 2000 and sum(ends.values()) == 2000

    lines = kafka_client_lines(log)
    folded = sum(int(s["n"].replace(",", "")) for m in lines if (s := SUMMARY.match(m["msg"])))
    shown = [f"{m['level']} {m['logger']}: {m['msg']}" for m in lines]
    assert len(lines) <= 30, "\n".join(shown)
    assert folded >= 100, f"only {folded} line(s) folded: did the outage happen?\n" + "\n".join(shown)
