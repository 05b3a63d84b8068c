"""Log noise under faults (pure, clock injected): the Kafka client's repeated WARNING/ERROR lines
fold into the first of each kind and one summary line with the count and duration when the state
changes, and every minute while it goes on. Frazil's own lines are never folded."""

from __future__ import annotations

import io
import json
import logging
import random
import threading
import time

import pytest

from frazil import logs
from frazil.logs import Folds, KafkaNoise, Summary, SummaryRecord

ERROR, WARNING = logging.ERROR, logging.WARNING
REFUSED = "Unable connect to node with id %s: %s"


def record(name: str, level: int, msg: str, *args: object, at: float) -> logging.LogRecord:
    r = logging.LogRecord(name, level, __file__, 1, msg, args, None)
    r.created = at
    return r


class Log:
    """``KafkaNoise`` without a thread, writing into a list: the lines an operator would read."""

    def __init__(self, folds: Folds) -> None:
        self.lines: list[logging.LogRecord] = []
        self.noise = KafkaNoise(self.lines.append, folds=folds, sweep_s=None, clock=lambda: self.now)
        self.now = 0.0

    def log(self, name: str, level: int, msg: str, *args: object, at: float) -> None:
        self.now = at
        r = record(name, level, msg, *args, at=at)
        if self.noise.filter(r):
            self.lines.append(r)

    @property
    def text(self) -> list[str]:
        return [r.getMessage() for r in self.lines]

    def summaries(self) -> list[SummaryRecord]:
        return [r for r in self.lines if isinstance(r, SummaryRecord)]


def test_repeats_fold_into_the_first_line_and_one_summary_with_the_count_and_duration() -> None:
    log = Log(Folds(quiet_s=10))
    for i in range(1000):   # 20 s of a broker that refuses connections, to nodes 1 and 2
        log.log("aiokafka", ERROR, REFUSED, 1 + i % 2, ConnectionRefusedError(111, "Connection refused"), at=i * 0.02)
    assert log.text == ["Unable connect to node with id 1: [Errno 111] Connection refused"]
    log.log("frazil.coordination.worker", logging.INFO, "replied to commit %s", "c1", at=31.0)   # 11 s quiet: ended
    (summary,) = log.summaries()
    assert summary.name == "aiokafka" and summary.levelno == ERROR
    assert summary.getMessage() == ("repeated 999 times over 20.0 s: Unable connect to node with id 2: "
                                    "[Errno 111] Connection refused")
    assert (summary.repeated, summary.over_s) == (999, 20.0)
    assert log.text[-1] == "replied to commit c1", "the summary is written before the line that noticed the end"
    log.log("aiokafka", ERROR, REFUSED, 1, ConnectionRefusedError(111, "Connection refused"), at=40.0)
    assert log.text[-1] == "Unable connect to node with id 1: [Errno 111] Connection refused", "a new outage shows"


def test_different_kinds_each_show_and_a_new_one_says_the_others_counts_first() -> None:
    log = Log(Folds(quiet_s=10, settle_s=1))
    # an outage begins with several kinds at once: each shows, nothing is summed up yet
    log.log("aiokafka", ERROR, REFUSED, 1, ConnectionRefusedError(111, "Connection refused"), at=0.0)
    log.log("aiokafka", ERROR, "Unable to update metadata from %s", [1], at=0.01)
    log.log("aiokafka", ERROR, REFUSED, 1, ConnectionRefusedError(111, "Connection refused"), at=0.02)
    log.log("aiokafka.consumer.fetcher", ERROR, "Failed fetch messages from %s: %s", 1, "NodeNotReadyError: not ready",
            at=0.03)
    assert len(log.lines) == 3 and not log.summaries()
    for t in range(1, 20):
        log.log("aiokafka", ERROR, REFUSED, 1, ConnectionRefusedError(111, "Connection refused"), at=float(t))
        log.log("aiokafka", ERROR, "Unable to update metadata from %s", [1], at=t + 0.5)
    # a different state: the group coordinator refuses this client (not the same as "not ready")
    log.log("aiokafka.consumer.group_coordinator", ERROR, "Group Coordinator Request failed: %s",
            "[Error 30] GroupAuthorizationFailedError", at=20.0)
    assert log.text[3:] == [
        "repeated 20 times over 19.0 s: Unable connect to node with id 1: [Errno 111] Connection refused",
        "repeated 19 times over 19.5 s: Unable to update metadata from [1]",
        "Group Coordinator Request failed: [Error 30] GroupAuthorizationFailedError"]


def test_what_only_differs_in_numbers_is_one_kind_and_other_errors_are_not() -> None:
    log = Log(Folds())
    log.log("aiokafka.consumer.fetcher", ERROR, "Failed fetch messages from %s: %s", 1,
            "NodeNotReadyError: Attempt to send a request to node which is not ready (node id 1).", at=0)
    log.log("aiokafka.consumer.fetcher", ERROR, "Failed fetch messages from %s: %s", 3,
            "NodeNotReadyError: Attempt to send a request to node which is not ready (node id 3).", at=1)
    log.log("aiokafka.consumer.fetcher", ERROR, "Failed fetch messages from %s: %s", 1,
            "KafkaConnectionError: Connection at 10.0.0.7:9092 closed", at=2)
    log.log("aiokafka.consumer.fetcher", ERROR, "Failed fetch messages from %s: %s", 2,
            "KafkaConnectionError: Connection at 10.0.0.8:9092 closed", at=3)
    log.log("aiokafka.consumer.fetcher", WARNING, "Failed fetch messages from %s: %s", 2,   # another level
            "KafkaConnectionError: Connection at 10.0.0.8:9092 closed", at=4)
    log.log("aiokafka.producer.sender", ERROR, "Failed fetch messages from %s: %s", 2,      # another logger
            "KafkaConnectionError: Connection at 10.0.0.8:9092 closed", at=5)
    assert [r.getMessage().split(": ", 1)[1] for r in log.lines if not isinstance(r, SummaryRecord)] == [
        "NodeNotReadyError: Attempt to send a request to node which is not ready (node id 1).",
        "KafkaConnectionError: Connection at 10.0.0.7:9092 closed",
        "KafkaConnectionError: Connection at 10.0.0.8:9092 closed",
        "KafkaConnectionError: Connection at 10.0.0.8:9092 closed"]


def test_a_long_outage_is_summed_up_every_minute_while_it_goes_on() -> None:
    log = Log(Folds(quiet_s=10, every_s=60))
    for i in range(1501):   # 150 s, ten a second
        log.log("kafka.conn", WARNING, "connect attempt to %s failed", f"broker-{i % 3}:9092", at=i / 10)
    log.log("frazil.daemon", logging.INFO, "draining", at=200.0)
    assert [(r.getMessage(), r.levelno) for r in log.summaries()] == [
        ("repeated 600 times over 60.0 s, going on: connect attempt to broker-0:9092 failed", WARNING),
        ("repeated 600 more times (1,200 over 120.0 s), going on: connect attempt to broker-0:9092 failed", WARNING),
        ("repeated 300 more times (1,500 over 150.0 s): connect attempt to broker-0:9092 failed", WARNING)]
    assert sum(r.repeated for r in log.summaries()) == 1500, "every folded line is counted once"


def test_frazil_saying_it_recovered_sums_up_at_once_and_a_later_failure_shows_again() -> None:
    log = Log(Folds(quiet_s=10))
    for i in range(50):
        log.log("aiokafka", ERROR, "Unable to update metadata from %s", [1], at=i * 0.1)
    log.log("frazil.coordination.worker", WARNING, "commit %s landed after %.0fs of failures; the outage is over",
            "c9", 5.0, at=5.0)
    assert log.text == ["Unable to update metadata from [1]",
                        "repeated 49 times over 4.9 s: Unable to update metadata from [1]",
                        "commit c9 landed after 5s of failures; the outage is over"]
    log.log("aiokafka", ERROR, "Unable to update metadata from %s", [1], at=5.1)
    assert log.text[-1] == "Unable to update metadata from [1]", "a new outage's first line shows"


def test_frazil_lines_and_the_kafka_clients_lesser_lines_are_never_folded() -> None:
    log = Log(Folds())
    for i in range(100):
        log.log("frazil.coordination.worker", ERROR, "commit %s (N rows) did not land: %s", "c1", "locked", at=i * 0.1)
        log.log("frazil", WARNING, "Unable to update metadata from %s", [1], at=i * 0.1)
        log.log("aiokafka.consumer.group_coordinator", logging.INFO, "(Re-)joining group %s", "g", at=i * 0.1)
        log.log("kafkaesque", ERROR, "not the Kafka client %d", 1, at=i * 0.1)
    assert len(log.lines) == 400 and not log.summaries()


def test_never_more_lines_out_than_in_and_every_line_is_counted() -> None:
    rng = random.Random(7)
    log = Log(Folds(quiet_s=2, every_s=5, settle_s=0.5))
    kinds = [("aiokafka", REFUSED), ("aiokafka", "Unable to update metadata from %s"),
             ("aiokafka.consumer.fetcher", "Failed fetch messages from %s: %s"), ("kafka.client", "retry %s: %s")]
    now, shown = 0.0, 0
    for _ in range(5000):
        now += rng.expovariate(20) if rng.random() < 0.99 else rng.uniform(1, 4)
        name, msg = rng.choice(kinds)
        before = len(log.lines)
        log.log(name, ERROR, msg, *([rng.randint(1, 3), "refused"][:msg.count("%s")]), at=now)
        shown += len(log.lines) > before and not isinstance(log.lines[-1], SummaryRecord)
    log.noise.close()
    folded = sum(r.repeated for r in log.summaries())
    assert shown + folded == 5000
    assert len(log.lines) < 5000 // 5


def test_setup_folds_in_both_formats_and_says_what_is_left_when_it_closes(capsys: pytest.CaptureFixture[str]) -> None:
    for fmt in ("text", "json"):
        logs.setup("INFO", fmt)
        client = logging.getLogger("aiokafka")
        try:
            for node in range(300):
                client.error(REFUSED, node % 3, ConnectionRefusedError(111, "Connection refused"))
            logging.getLogger("frazil.ingest.source").info("assigned %d partition(s)", 4)
            logging.getLogger().handlers[0].close()   # as logging.shutdown does at exit
            lines = capsys.readouterr().err.splitlines()
        finally:
            logging.getLogger().handlers[:] = []
        assert len(lines) == 3, lines
        if fmt == "json":
            first, source, summary = (json.loads(line) for line in lines)
            assert first["level"] == summary["level"] == "ERROR" and first["logger"] == summary["logger"] == "aiokafka"
            assert summary["repeated"] == 299 and summary["msg"].startswith("repeated 299 times over ")
            assert source["logger"] == "frazil.ingest.source"
        else:
            assert " ERROR aiokafka: Unable connect to node with id 0: [Errno 111] Connection refused" in lines[0]
            assert " INFO frazil.ingest.source: assigned 4 partition(s)" in lines[1]
            assert " ERROR aiokafka: repeated 299 times over " in lines[2]
            assert lines[2].endswith(": Unable connect to node with id 2: [Errno 111] Connection refused")


def test_the_group_coordinators_first_election_is_still_info() -> None:
    """StartupNoise, on its logger, runs before the fold: the first 20 are INFO lines, not folded."""
    logs.setup("INFO")
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    out = io.StringIO()
    handler.setStream(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    try:
        for _ in range(25):
            logging.getLogger("aiokafka.consumer.group_coordinator").error(
                "Group Coordinator Request failed: %s", "[Error 15] GroupCoordinatorNotAvailableError")
        handler.close()
    finally:
        logging.getLogger().handlers[:] = []
    lines = out.getvalue().splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["INFO"] * 20 + ["ERROR", "ERROR"]
    assert lines[20].endswith("Group Coordinator Request failed: [Error 15] GroupCoordinatorNotAvailableError")
    assert lines[21].startswith("ERROR repeated 4 times over ")


def test_an_ended_state_is_summed_up_from_a_thread_when_nothing_else_is_logged() -> None:
    lines: list[logging.LogRecord] = []
    written = threading.Event()
    now = [0.0]

    def emit(r: logging.LogRecord) -> None:
        lines.append(r)
        written.set()

    noise = KafkaNoise(emit, folds=Folds(quiet_s=10), sweep_s=0.01, clock=lambda: now[0])
    for i in range(30):
        assert noise.filter(record("aiokafka", ERROR, "Unable to update metadata from %s", [1], at=i * 0.1)) == (i == 0)
    time.sleep(0.05)
    assert not lines, "still going on: nothing to say yet"
    now[0] = 13.0
    assert written.wait(5)
    assert [r.getMessage() for r in lines] == ["repeated 29 times over 2.9 s: Unable to update metadata from [1]"]
    noise.close()


def test_summary_wording() -> None:
    assert Summary("aiokafka", ERROR, "x", 1, 1, 0.04, False).message() == "repeated 1 time over 0.0 s: x"
    assert Summary("aiokafka", ERROR, "x", 1234, 5678, 80.25, True).message() == \
        "repeated 1,234 more times (5,678 over 80.2 s), going on: x"
