"""The worker role on its own: buffers filled by hand, a channel that keeps what is sent, a fake
source, a SQLite catalog in a temporary folder, and the coordinator's commit made by the test
(``CommitState`` and ``table_committer``, as the coordinator makes it). No broker."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import support
from fakes import FakeSource, fetch_of, json_records
from frazil.buffers.positions import Takers
from frazil.buffers.state import Buffers
from frazil.buffers.targets import Targets
from frazil.config import Config
from frazil.coordination.channel import Received
from frazil.coordination.commit_state import CommitState
from frazil.coordination.table_commit import table_committer
from frazil.coordination.worker import Worker
from frazil.events.payloads import CommitComplete, DataComplete, DataWritten, Payload
from frazil.iceberg import catalog as iceberg_catalog
from frazil.metrics import Metrics, Stats
from frazil.txlog import JournalPolicy, open_journal

pytestmark = pytest.mark.asyncio
TABLE = "db.events"
TP = ("t", 0)


class Channel:
    def __init__(self) -> None:
        self.sent: list[list[Payload]] = []

    async def send(self, payloads: list[Payload], *, fault_point: str | None = None) -> None:
        self.sent.append(list(payloads))

    async def poll(self, timeout_ms: int) -> list[Received]:
        return []

    async def reset_producer(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class Setup:
    cfg: Config
    buffers: Buffers
    worker: Worker
    channel: Channel
    source: FakeSource
    clock: Clock

    def take(self, first: int, n: int) -> None:
        """``n`` records of TP from offset ``first`` into the table's buffer, as intake takes them."""
        records = fetch_of(*TP, json_records([{"id": i, "name": f"n{i}"} for i in range(n)], first=first)).records()
        assert self.buffers.targets[TABLE].buffer.append(*TP, records) == []
        self.buffers.positions.table_took(TABLE, TP)
        self.buffers.positions.took(TP, first, first + n - 1)

    def commit(self, commit_id: str) -> None:
        """What the coordinator does with the worker's last reply: commit its table."""
        state = CommitState(commit_id, frozenset({TP}), 0, 10_000, senders=1)
        for payload in self.channel.sent[-1]:
            assert isinstance(payload, (DataWritten, DataComplete))
            state.add("w", payload)
        catalog = iceberg_catalog.load(self.cfg.catalog)
        try:
            commit = table_committer(catalog, self.cfg.pipeline, max_attempts=3)
            for table in state.tables():
                commit(table, commit_id, None)
        finally:
            support.close_catalog(catalog)

    def stored(self) -> dict[tuple[str, int], int]:
        catalog = iceberg_catalog.load(self.cfg.catalog)
        try:
            return support.stored(catalog, self.cfg)
        finally:
            support.close_catalog(catalog)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    cfg = support.load(support.write_config(tmp_path, "127.0.0.1:1", ["t"], extra=""))
    catalog = iceberg_catalog.load(cfg.catalog)
    table = iceberg_catalog.ensure_table(catalog, cfg.table, {})
    buffers = Buffers(Targets(cfg, catalog, {TABLE: table}, takers=lambda topic: Takers((TABLE,))))
    buffers.positions.positioned({TP}, {})
    source = FakeSource({TP: []})
    source.assignment = {TP}
    channel, clock = Channel(), Clock()
    journal, _ = open_journal(tmp_path / "txlog", JournalPolicy(fsync="never"))
    worker = Worker(cfg, buffers=buffers, channel=channel, journal=journal, source=source,
                    metrics=Metrics(cfg.pipeline, TABLE), stats=Stats(), clock=clock)
    yield Setup(cfg, buffers, worker, channel, source, clock)
    journal.close()
    support.close_catalog(catalog)


async def test_a_reply_reports_each_tables_rows_and_every_owned_partition_in_one_send(setup: Setup) -> None:
    setup.take(0, 25)
    await setup.worker.reply("c1")
    [sent] = setup.channel.sent
    written = [p for p in sent if isinstance(p, DataWritten)]
    [complete] = [p for p in sent if isinstance(p, DataComplete)]
    assert [(w.table, [(r.topic, r.partition, r.start, r.end, r.generation) for r in w.ranges]) for w in written] == [
        (TABLE, [("t", 0, 0, 25, 1)])]
    assert sum(f.record_count for w in written for f in w.files) == 25
    assert [(a.topic, a.partition, a.generation) for a in complete.assignments] == [("t", 0, 1)]
    assert setup.worker.in_flight == "c1" and setup.buffers.rows == 0


async def test_a_landed_reply_moves_the_tables_floor_and_the_groups_low_watermark(setup: Setup) -> None:
    setup.take(0, 10)
    await setup.worker.reply("c1")
    setup.commit("c1")
    await setup.worker.handle(CommitComplete("c1", None))
    assert setup.stored() == {TP: 10}
    assert setup.buffers.targets[TABLE].floors == {TP: 10}
    assert setup.source.low_watermarks == [{TP: 10}]
    assert setup.worker.idle


async def test_a_table_whose_commit_failed_keeps_its_files_and_reports_them_again(setup: Setup) -> None:
    setup.take(0, 10)
    await setup.worker.reply("c1")
    files = [f.path for p in setup.channel.sent[-1] if isinstance(p, DataWritten) for f in p.files]
    await setup.worker.handle(CommitComplete("c1", None, (TABLE,)))   # the coordinator could not commit it
    assert setup.worker.batch is not None and setup.worker.outage.failing
    setup.take(10, 5)   # taken while the files wait: held unwritten behind them
    await setup.worker.reply("c2")
    again = [p for p in setup.channel.sent[-1] if isinstance(p, DataWritten)]
    assert [f.path for p in again for f in p.files] == files
    assert [(r.start, r.end) for p in again for r in p.ranges] == [(0, 10)]
    setup.commit("c2")
    await setup.worker.handle(CommitComplete("c2", None))
    assert setup.stored() == {TP: 10}
    await setup.worker.reply("c3")   # the rows that waited go now
    setup.commit("c3")
    await setup.worker.handle(CommitComplete("c3", None))
    assert setup.stored() == {TP: 15} and setup.worker.idle and not setup.worker.outage.failing


async def test_a_reply_that_did_not_land_reads_every_partition_again_from_the_table(setup: Setup) -> None:
    setup.take(0, 10)
    await setup.worker.reply("c1")
    setup.commit("c1")
    await setup.worker.handle(CommitComplete("c1", None))
    setup.take(10, 10)
    await setup.worker.reply("c2")
    # not committed, and not named as failed: refused (an overlap, a zombie's reply)
    await setup.worker.handle(CommitComplete("c2", None))
    assert setup.worker.batch is None and setup.buffers.rows == 0
    assert setup.source.position == {TP: 10}                # sought back to what the table holds
    assert setup.buffers.positions.next_offsets() == {TP: 10}


async def test_a_full_buffer_asks_for_a_cycle_once_and_again_only_after_the_commit_timeout(setup: Setup) -> None:
    worker, clock = setup.worker, setup.clock
    assert not worker.request_due(False, clock())
    assert worker.request_due(True, clock())
    await worker.request("full")
    assert not worker.request_due(True, clock())
    clock.now += setup.cfg.coordination.commit_timeout_s
    assert worker.request_due(True, clock())


async def test_an_outage_is_counted_from_the_start_of_the_first_cycle_that_failed(setup: Setup) -> None:
    """As the coordinator counts it: both say the same duration for one outage."""
    setup.take(0, 10)
    await setup.worker.reply("c1", int(time.time() * 1000) - 4000)   # the cycle began 4 s before this answer
    await setup.worker.handle(CommitComplete("c1", None, (TABLE,)))
    assert setup.worker.outage.seconds(setup.clock()) == pytest.approx(4.0, abs=0.5)


async def test_ranges_carry_the_topic_id_and_a_recreated_topic_stops_the_worker_before_it_reads(setup: Setup) -> None:
    from frazil.errors import TopicMismatchError

    setup.source.topic_ids = {"t": "A"}
    assert await setup.worker.position({TP}) == {}   # nothing stored: the id is learnt, not judged
    setup.take(0, 10)
    await setup.worker.reply("c1")
    [written] = [p for p in setup.channel.sent[-1] if isinstance(p, DataWritten)]
    assert [(r.topic, r.topic_id) for r in written.ranges] == [("t", "A")]
    setup.commit("c1")
    setup.worker.drop()
    assert await setup.worker.position({TP}) == {TP: 10}   # the same topic: read on from the table
    # the topic deleted and created again: a new id, whatever its log's bounds
    setup.source.topic_ids = {"t": "B"}
    with pytest.raises(TopicMismatchError, match=r"table db.events keeps offsets read from topic t when its id was A, "
                                                 r"and t has id B now.*new pipeline.name"):
        await setup.worker.position({TP})
    # brokers without ids: only the bounds check is left (ingest/source.py); and the id read before is
    # not sent with what is read now (the topic may have been recreated meanwhile): no id, not judged
    setup.source.topic_ids = None
    assert await setup.worker.position({TP}) == {TP: 10}
    setup.buffers.positions.positioned({TP}, {TP: 10})
    setup.take(10, 5)
    await setup.worker.reply("c2")
    [written] = [p for p in setup.channel.sent[-1] if isinstance(p, DataWritten)]
    assert [(r.topic, r.topic_id) for r in written.ranges] == [("t", "")]
