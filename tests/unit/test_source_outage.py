"""Positioning assigned partitions through a broker outage (found by the chaos run, seed
215986939): the broker was SIGKILLed while a worker took a new assignment, came back for 11 s and
was stopped again; the log-end request of the assignment timed out after 40 s and the worker, which
had been landing records, exited. The request is now tried again up to outage_timeout_s. A fake
consumer stands in for aiokafka here: the decision (retry, give up, refuse) is the code under test;
make chaos (and its short version in make test) restarts the real broker."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, KafkaTimeoutError, NodeNotReadyError, TopicAuthorizationFailedError

from frazil.errors import RetentionGapError, TopicMismatchError
from frazil.flow import retry
from frazil.ingest import source as source_mod
from frazil.ingest.source import KafkaSource

TP = ("events", 0)


class FlakyConsumer:
    """``end_offsets`` raises ``failures`` in turn, then answers ``end`` for every partition;
    ``beginning_offsets`` answers ``start``."""

    def __init__(self, failures: Sequence[KafkaError], end: int = 100, start: int = 0) -> None:
        self.failures, self.end, self.start, self.calls = list(failures), end, start, 0

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return {tp: self.end for tp in tps}

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.start for tp in tps}


def source(consumer: FlakyConsumer, outage_timeout_s: float, on_retention_gap: str = "stop",
           lost: list[int] | None = None) -> KafkaSource:
    made = KafkaSource.__new__(KafkaSource)   # no aiokafka consumer: only the positioning check runs
    made._consumer = consumer
    made._outage_timeout_s = outage_timeout_s
    made._cfg = SimpleNamespace(on_retention_gap=on_retention_gap)
    made._on_lost = None if lost is None else lost.append
    made._epoch = 0
    made._first_ends = {}
    return made


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_mod, "END_OFFSETS_BACKOFF", retry.Backoff(0.0))


def test_a_broker_outage_while_positioning_is_waited_out_and_the_check_still_runs() -> None:
    consumer = FlakyConsumer([KafkaTimeoutError(), NodeNotReadyError(), KafkaTimeoutError()])
    asyncio.run(source(consumer, 900.0)._within_log({TP}, {TP: 40}))
    assert consumer.calls == 4
    # the check it waited for still refuses a table ahead of the log
    consumer = FlakyConsumer([KafkaTimeoutError()], end=10)
    with pytest.raises(TopicMismatchError, match=r"events\[0\] table=40 log end=10"):
        asyncio.run(source(consumer, 900.0)._within_log({TP}, {TP: 40}))


def test_an_outage_longer_than_outage_timeout_stops_the_process() -> None:
    consumer = FlakyConsumer([KafkaTimeoutError()] * 5)
    with pytest.raises(KafkaTimeoutError):
        asyncio.run(source(consumer, 0.0)._within_log({TP}, {TP: 40}))
    assert consumer.calls == 1


def test_an_error_no_retry_can_fix_is_raised_at_once() -> None:
    consumer = FlakyConsumer([TopicAuthorizationFailedError()])
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(source(consumer, 900.0)._within_log({TP}, {TP: 40}))
    assert consumer.calls == 1


def test_records_deleted_by_retention_before_they_were_read_stop_or_are_skipped_loudly(
        caplog: pytest.LogCaptureFixture) -> None:
    """A table at offset 40 of a partition whose log now starts at 75: 35 records are gone. By
    default nothing is read and the error names the range; with ``skip`` reading starts at 75, the
    range is logged at ERROR and the 35 are counted. A table within the log is left where it is."""
    other = ("events", 1)
    with pytest.raises(RetentionGapError, match=r"events\[0\] offsets 40 to 74 \(35 record\(s\)\).*"
                                                r"on_retention_gap = \"skip\""):
        asyncio.run(source(FlakyConsumer([], start=75), 900.0)._within_log({TP}, {TP: 40}))
    lost: list[int] = []
    at = asyncio.run(source(FlakyConsumer([], start=75), 900.0, "skip", lost)._within_log(
        {TP, other}, {TP: 40, other: 80}))
    assert at == {TP: 75, other: 80} and lost == [35]
    assert any(r.levelname == "ERROR" and "events[0] offsets 40 to 74" in r.getMessage() for r in caplog.records)
    assert asyncio.run(source(FlakyConsumer([], start=40), 900.0)._within_log({TP}, {TP: 40})) == {TP: 40}


class Recording(FlakyConsumer):
    """Notes each awaited call and each seek, in order."""

    def __init__(self, start: int = 0, end: int = 100) -> None:
        super().__init__([], end=end, start=start)
        self.steps: list[str] = []

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.steps.append("await end_offsets")
        await asyncio.sleep(0)   # the event loop runs here: a fetch may come back
        return await super().end_offsets(tps)

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.steps.append("await beginning_offsets")
        await asyncio.sleep(0)
        return await super().beginning_offsets(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.steps.append(f"seek {tp.topic}[{tp.partition}]@{offset}")

    # aiokafka's lazy resets, as the positioning once used them
    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self.steps.append("await seek_to_beginning")
        await asyncio.sleep(0)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        self.steps.append("await seek_to_end")
        await asyncio.sleep(0)

    async def position(self, tp: TopicPartition) -> int:
        self.steps.append("await position")
        await asyncio.sleep(0)
        return self.start


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_every_partition_is_sought_after_the_last_await_so_none_is_fetched_before_it_is_positioned(
        reset: str) -> None:
    """Found by the chaos run on a three-broker cluster: a partition sought before an await was
    fetched from its new position meanwhile; the loop dropped that fetch (the partition was not
    positioned yet) while the consumer moved past it, and a partition new to the tables, whose
    start is the first offset taken, silently skipped its first 425 records. Every seek now comes
    after the last await, so the caller marks the partitions positioned before any fetch returns."""
    consumer = Recording(start=3, end=90)
    made = source(consumer, 900.0)
    made._cfg = SimpleNamespace(on_retention_gap="stop", auto_offset_reset=reset)
    made._sought = {}
    fresh = ("events", 1)
    asyncio.run(made.seek({TP, fresh}, {TP: 40}))
    awaits = [i for i, s in enumerate(consumer.steps) if s.startswith("await")]
    seeks = [i for i, s in enumerate(consumer.steps) if s.startswith("seek")]
    assert len(seeks) == 2 and max(awaits) < min(seeks), consumer.steps
    new_at = 3 if reset == "earliest" else 90
    assert consumer.steps[-2:] == ["seek events[0]@40", f"seek events[1]@{new_at}"]
    assert made._sought == {TP: 40, fresh: new_at}


def test_a_refused_fetch_does_not_seek_back_a_partition_positioned_again_while_its_bounds_were_read() -> None:
    """A fetch refused as out of range sends the source to read the log's bounds (waited out
    through a broker outage); a rewind positioned the partition at the table's offset meanwhile.
    Seeking back to the refused offset then would skip what lies between: it is dropped instead.
    Without a repositioning, the refused partition is sought where the bounds say."""
    consumer = Recording(start=0, end=500)
    made = source(consumer, 900.0)
    made._sought = {TP: 300}

    async def refused_while_repositioned() -> None:
        async def rewound(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            made._epoch += 1          # what seek() does for the rewind
            made._sought[TP] = 120
            return {tp: 500 for tp in tps}
        consumer.end_offsets = rewound   # type: ignore[method-assign]
        await made._out_of_log({TP: 300})

    asyncio.run(refused_while_repositioned())
    assert not [s for s in consumer.steps if s.startswith("seek")], consumer.steps
    assert made._sought == {TP: 120}

    consumer = Recording(start=0, end=500)
    made = source(consumer, 900.0)
    made._sought = {TP: 300}
    asyncio.run(made._out_of_log({TP: 300}))
    assert consumer.steps[-1] == "seek events[0]@300"


def test_with_latest_a_new_partition_positioned_again_starts_where_it_first_started() -> None:
    """auto_offset_reset = "latest": a partition no table holds yet, read from the end, then
    positioned again (a rewind after a reply that did not land) before anything landed, starts
    where it first did, not at the end it has now: that would skip what was read meanwhile."""
    consumer = Recording(start=0, end=90)
    made = source(consumer, 900.0)
    made._cfg = SimpleNamespace(on_retention_gap="stop", auto_offset_reset="latest")
    made._sought = {}
    asyncio.run(made.seek({TP}, {}))
    consumer.end = 150   # records arrived, were read, did not land
    asyncio.run(made.seek({TP}, {}))
    assert [s for s in consumer.steps if s.startswith("seek")] == ["seek events[0]@90", "seek events[0]@90"]
