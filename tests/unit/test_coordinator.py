"""The coordinator's cycle with an in-process fake channel and fake table commits (pure logic)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from frazil.coordination.channel import Received
from frazil.coordination.commit_state import TableCommit
from frazil.coordination.coordinator import Coordinator
from frazil.errors import CommitFailed, OutageTimeout
from frazil.events import (
    Assignment,
    CommitComplete,
    CommitToTable,
    DataComplete,
    DataFileRef,
    DataWritten,
    DeadLetter,
    Event,
    OffsetRange,
    StartCommit,
)
from frazil.events.payloads import Payload
from frazil.iceberg.committer import CommitResult
from frazil.metrics import Metrics

P = frozenset({("t", 0), ("t", 1)})


class FakeChannel:
    """The control topic as a list; ``workers`` answer every StartCommit they see."""

    def __init__(self, workers: dict[str, list[int]], backlog: list[Event] | None = None) -> None:
        self.log: list[Event] = list(backlog or [])
        self.read = 0
        self.position: int | None = None
        self.workers = workers

    async def send(self, payloads: list[Payload]) -> None:
        for p in payloads:
            self.log.append(Event("p", "coordinator", 0, payload=p))
            if isinstance(p, StartCommit):
                for name, parts in self.workers.items():
                    self.log.append(Event("p", name, 0, payload=DataWritten(
                        p.commit_id, "db.t", (DataFileRef(f"{name}.parquet", "PARQUET", 1, 1, 0),),
                        tuple(OffsetRange("t", q, 0, 5, 1) for q in parts))))
                    self.log.append(Event("p", name, 0, payload=DataComplete(
                        p.commit_id, tuple(Assignment("t", q, 1) for q in parts), 100 + len(parts))))

    async def poll(self, timeout_ms: int) -> list[Received]:
        out = [Received(e, i) for i, e in enumerate(self.log) if i >= self.read]
        self.read = len(self.log)
        return out

    async def caught_up(self) -> bool:
        return self.read >= len(self.log)

    async def commit_position(self, offset: int) -> None:
        self.position = offset

    def payloads(self, kind: type) -> list[Payload]:
        return [e.payload for e in self.log if isinstance(e.payload, kind)]


class Tables:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[TableCommit, str]] = []
        self.fail = fail

    def __call__(self, table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
        self.calls.append((table, commit_id))
        if self.fail:
            raise CommitFailed("catalog down")
        return CommitResult(commit_id, 42, sum(f.record_count for f in table.files),
                            {(r.topic, r.partition): r.end for r in table.ranges}, 1, 0.01)


class Held(Tables):
    """Each table commit waits in the catalog until ``release`` is set (``entered``: one is there)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
        self.entered.set()
        self.release.wait(10)
        return super().__call__(table, commit_id, vtts)


async def _stop_mid_commit(coordinator: Coordinator, tables: Held) -> None:
    """A cycle whose table commit is in the catalog when the coordinator is cancelled (the role
    moving away, SIGTERM); the commit lands 0.3 s later."""
    cycle = asyncio.create_task(coordinator.cycle())
    assert await asyncio.to_thread(tables.entered.wait, 5)
    cycle.cancel()
    threading.Timer(0.3, tables.release.set).start()
    with pytest.raises(asyncio.CancelledError):
        await cycle


@pytest.mark.asyncio
async def test_a_full_cycle_commits_each_table_once_with_every_workers_files_and_vtts() -> None:
    channel, tables = FakeChannel({"w1": [0], "w2": [1]}), Tables()
    coordinator = Coordinator(channel, "p", P, tables, timeout_s=5)
    results = await coordinator.cycle()
    assert len(results) == 1 and len(tables.calls) == 1
    table, commit_id = tables.calls[0]
    assert {f.path for f in table.files} == {"w1.parquet", "w2.parquet"} and len(table.ranges) == 2
    assert channel.payloads(CommitToTable) == [CommitToTable(commit_id, "db.t", 42, 101)]
    assert channel.payloads(CommitComplete) == [CommitComplete(commit_id, 101)]
    assert channel.position == 5   # past StartCommit and the four replies


@pytest.mark.asyncio
async def test_a_missing_worker_gives_a_partial_commit_after_the_timeout_without_vtts() -> None:
    now = [0]
    channel, tables = FakeChannel({"w1": [0]}), Tables()
    coordinator = Coordinator(channel, "p", P, tables, timeout_s=0.05, clock_ms=lambda: now[0])

    async def advance() -> list[Received]:
        now[0] += 30
        return await FakeChannel.poll(channel, 0)

    channel.poll = lambda timeout_ms: advance()  # type: ignore[method-assign]
    await coordinator.cycle()
    assert len(tables.calls) == 1 and [f.path for f in tables.calls[0][0].files] == ["w1.parquet"]
    assert channel.payloads(CommitComplete)[0].valid_through_ms is None


@pytest.mark.asyncio
async def test_a_failing_table_commit_is_carried_to_the_next_cycle_until_the_outage_timeout() -> None:
    """Rule 6: the cycle completes naming the failed table (its workers keep the files); rule 8:
    after outage_timeout_s of failures the coordinator stops instead of retrying forever. A commit
    that lands in between ends the outage."""
    now = [0]
    channel, tables = FakeChannel({"w1": [0, 1]}), Tables(fail=True)
    coordinator = Coordinator(channel, "p", P, tables, timeout_s=5, outage_timeout_s=60, clock_ms=lambda: now[0])

    async def at(seconds: int, fail: bool) -> None:
        now[0], tables.fail = seconds * 1000, fail
        await coordinator.cycle()

    await at(0, fail=True)
    assert channel.payloads(CommitToTable) == []
    assert [c.failed_tables for c in channel.payloads(CommitComplete)] == [("db.t",)]
    await at(30, fail=False)
    assert channel.payloads(CommitComplete)[-1].failed_tables == ()
    await at(70, fail=True)
    await at(129, fail=True)   # 59 s into the second outage: still carried
    with pytest.raises(OutageTimeout, match="failed for 60s.*stopping the coordinator"):
        await at(130, fail=True)


@pytest.mark.asyncio
async def test_a_gap_stops_the_coordinator() -> None:
    from frazil.errors import OffsetGapError

    class Gap(Tables):
        def __call__(self, table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
            raise OffsetGapError("would skip records: t[0] stored=3 range=[5, 9)")

    with pytest.raises(OffsetGapError, match="stored=3"):
        await Coordinator(FakeChannel({"w1": [0, 1]}), "p", P, Gap(), timeout_s=5).cycle()


@pytest.mark.asyncio
async def test_a_successor_finishes_the_open_cycle_with_the_same_commit_id_and_only_that_one() -> None:
    first = FakeChannel({"w1": [0, 1]})
    await first.send([StartCommit("old-1")])   # the old coordinator died before committing
    tables = Tables()
    successor = Coordinator(FakeChannel({}, backlog=first.log), "p", P, tables, timeout_s=5)
    await successor.recover()
    assert [c for _, c in tables.calls] == ["old-1"]

    # a cycle that was completed is not committed again
    done = FakeChannel({"w1": [0, 1]})
    await done.send([StartCommit("old-2")])
    await done.send([CommitComplete("old-2")])
    tables = Tables()
    successor = Coordinator(FakeChannel({}, backlog=done.log), "p", P, tables, timeout_s=5)
    await successor.recover()
    assert tables.calls == []


@pytest.mark.asyncio
async def test_a_successor_waits_for_the_open_cycles_missing_replies_until_its_timeout() -> None:
    """The old coordinator died while one worker had not answered yet: the successor takes that
    answer too (one full commit with VTTS), instead of a partial commit at once."""
    first = FakeChannel({"w1": [0]})
    await first.send([StartCommit("old-1")])
    late = FakeChannel({"w2": [1]})
    await late.send([StartCommit("old-1")])
    now = [1000]
    channel = FakeChannel({}, backlog=first.log)
    tables = Tables()
    successor = Coordinator(channel, "p", P, tables, timeout_s=5, clock_ms=lambda: now[0])

    async def poll(timeout_ms: int) -> list[Received]:
        now[0] += 100
        if now[0] == 1500:   # w2's reply to old-1 arrives after the takeover
            channel.log.extend(e for e in late.log if not isinstance(e.payload, StartCommit))
        return await FakeChannel.poll(channel, 0)

    channel.poll = poll  # type: ignore[method-assign]
    await successor.recover()
    assert [c for _, c in tables.calls] == ["old-1"]
    assert {f.path for f in tables.calls[0][0].files} == {"w1.parquet", "w2.parquet"}
    assert channel.payloads(CommitComplete) == [CommitComplete("old-1", 101)]


@pytest.mark.asyncio
async def test_a_commit_request_starts_the_cycle_before_the_interval() -> None:
    from frazil.events import CommitRequest

    now = [0]
    channel = FakeChannel({})
    coordinator = Coordinator(channel, "p", P, Tables(), timeout_s=5, clock_ms=lambda: now[0])

    async def tick(timeout_ms: int) -> list[Received]:
        now[0] += 100
        if now[0] == 1000:
            channel.log.append(Event("p", "w3", 0, payload=CommitRequest("10000 rows buffered")))
        return await FakeChannel.poll(channel, 0)

    channel.poll = tick  # type: ignore[method-assign]
    assert await coordinator.wait_for_trigger(600) == "requested by w3 (10000 rows buffered)"
    assert now[0] == 1000
    assert await coordinator.wait_for_trigger(0.5) == "interval"


@pytest.mark.asyncio
async def test_the_metrics_count_cycles_by_kind_table_commits_by_result_and_dropped_replies() -> None:
    metrics = Metrics("p", "db.t")
    now = [0]
    channel, tables = FakeChannel({"w1": [0], "w2": [1]}), Tables()
    coordinator = Coordinator(channel, "p", P, tables, timeout_s=0.05, clock_ms=lambda: now[0], metrics=metrics)
    await coordinator.cycle()                      # full, committed
    channel.log.append(Event("p", "w1", 0, payload=DataComplete("late", (Assignment("t", 0, 1),))))
    await coordinator.cycle()                      # full again; the late reply is dropped
    channel.workers = {"w1": [0]}
    tables.fail = True

    async def advance(timeout_ms: int) -> list[Received]:
        now[0] += 30
        return await FakeChannel.poll(channel, 0)

    channel.poll = advance  # type: ignore[method-assign]
    await coordinator.cycle()                      # partial, failed
    assert metrics.value("frazil_coordinator_cycles_total", kind="full") == 2
    assert metrics.value("frazil_coordinator_cycles_total", kind="partial") == 1
    assert metrics.value("frazil_coordinator_table_commits_total", result="committed") == 2
    assert metrics.value("frazil_coordinator_table_commits_total", result="failed") == 1
    assert metrics.value("frazil_coordinator_dropped_replies_total") == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("landed", [{"found": True}, {"already_committed": True, "snapshot_id": None}],
                         ids=["commit-id-found", "every-range-already-in"])
async def test_a_commit_found_already_landed_is_counted_as_such_not_as_committed(landed: dict[str, Any]) -> None:
    """A coordinator woken after a takeover finds its cycle landed by the new one (the committer
    says ``found``), or finds every range of the cycle already in the table, landed by an earlier
    commit (``already_committed``: no snapshot made): one table commit per snapshot across
    processes, never two."""
    import dataclasses

    metrics = Metrics("p", "db.t")
    channel, tables = FakeChannel({"w1": [0], "w2": [1]}), Tables()

    def found(table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
        return dataclasses.replace(tables(table, commit_id, vtts), **landed)

    coordinator = Coordinator(channel, "p", P, found, timeout_s=5, metrics=metrics)
    results = await coordinator.cycle()
    assert len(results) == 1 and (results[0].found or results[0].already_committed)
    assert metrics.value("frazil_coordinator_table_commits_total", result="already_landed") == 1
    assert metrics.value("frazil_coordinator_table_commits_total", result="committed") == 0
    assert len(channel.payloads(CommitComplete)) == 1   # the cycle still ends for its workers


@pytest.mark.asyncio
async def test_a_commit_request_read_during_a_cycle_starts_the_next_one_at_once() -> None:
    """A worker that fills up while a cycle runs must not wait a whole interval (or, in single
    mode on SIGTERM, forever): its request, read while collecting, triggers the next cycle."""
    from frazil.events import CommitRequest

    channel, tables = FakeChannel({"w1": [0, 1]}), Tables()
    coordinator = Coordinator(channel, "p", P, tables, timeout_s=5)
    original = channel.send

    async def send_and_request(payloads: list[Payload]) -> None:
        await original(payloads)
        if any(isinstance(p, StartCommit) for p in payloads):
            channel.log.append(Event("p", "w1", 0, payload=CommitRequest("buffer full")))

    channel.send = send_and_request  # type: ignore[method-assign]
    await coordinator.cycle()
    trigger = await asyncio.wait_for(coordinator.wait_for_trigger(3600), 1)
    assert trigger.startswith("requested by w1 (buffer full)"), trigger


@pytest.mark.asyncio
async def test_no_cycle_starts_while_there_is_no_partition_to_wait_for() -> None:
    """Single mode before the worker's first assignment: a cycle would end before anyone could
    answer it, and the worker's late answer would only be refused (and its records read again)."""
    owned: list[frozenset[tuple[str, int]]] = [frozenset()]
    channel, tables = FakeChannel({"w1": [0, 1]}), Tables()
    coordinator = Coordinator(channel, "p", lambda: owned[0], tables, timeout_s=5)
    assert await coordinator.cycle() == [] and channel.log == []
    owned[0] = P
    assert len(await coordinator.cycle()) == 1 and len(channel.payloads(StartCommit)) == 1


@pytest.mark.asyncio
async def test_a_stop_during_a_table_commit_waits_for_its_outcome_and_starts_no_other_table() -> None:
    """SIGTERM (or the role moving away) while a catalog commit runs in its thread: the cancel must
    wait for that commit to end (its outcome is logged before the process closes the log) and must
    not start the next table's commit."""
    release, entered = threading.Event(), threading.Event()
    ended: list[str] = []

    class Slow(Tables):
        def __call__(self, table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
            self.calls.append((table, commit_id))
            entered.set()
            release.wait(10)
            ended.append(table.table)
            return CommitResult(commit_id, 42, 1, {}, 1, 0.01)

    class TwoTables(FakeChannel):
        async def send(self, payloads: list[Payload]) -> None:
            await super().send(payloads)
            for p in payloads:
                if isinstance(p, StartCommit):   # w1 also wrote for a second table
                    self.log.insert(-1, Event("p", "w1", 0, payload=DataWritten(
                        p.commit_id, "db.u", (DataFileRef("u.parquet", "PARQUET", 1, 1, 0),), ())))

    tables = Slow()
    coordinator = Coordinator(TwoTables({"w1": [0, 1]}), "p", P, tables, timeout_s=5)
    cycle = asyncio.create_task(coordinator.cycle())
    assert await asyncio.to_thread(entered.wait, 5)
    cycle.cancel()
    threading.Timer(0.3, release.set).start()
    with pytest.raises(asyncio.CancelledError):
        await cycle
    assert len(ended) == 1, "the cancel took effect while the catalog commit was still running"
    assert len(tables.calls) == 1, "a second table was committed after the stop"


class Letters:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, tuple[DeadLetter, ...]]] = []
        self.how: list[tuple[bool, str]] = []   # (again, since) of each send
        self.anchors = 0

    async def anchor(self) -> str:
        self.anchors += 1
        return f"anchor-{self.anchors}"

    async def send(self, commit_id: str, table: str, letters: Sequence[DeadLetter], *, again: bool = False,
                   since: str = "") -> int:
        self.sent.append((commit_id, table, tuple(letters)))
        self.how.append((again, since))
        return len(letters)


class WithBadRecords(FakeChannel):
    """w1's reply also names a bad record of its range."""

    async def send(self, payloads: list[Payload]) -> None:
        await super().send(payloads)
        for i, e in enumerate(self.log):
            p = e.payload
            if isinstance(p, DataWritten) and not p.dead_letters:
                self.log[i] = Event("p", e.sender, 0, payload=dataclasses.replace(
                    p, dead_letters=(DeadLetter("t", p.ranges[0].partition, 2, "id", "is required"),)))


@pytest.mark.asyncio
async def test_bad_records_go_to_the_dead_letter_topic_only_after_their_commit_landed() -> None:
    letters, tables = Letters(), Tables()
    coordinator = Coordinator(WithBadRecords({"w1": [0, 1]}), "p", P, tables, timeout_s=5, dead_letters=letters)
    (result,) = await coordinator.cycle()
    assert [(c, t, [d.offset for d in ds]) for c, t, ds in letters.sent] == [(result.commit_id, "db.t", [2])]
    # the commit kept where the dead-letter topic stood before it; landed now, so nothing is looked up
    assert [t.letters_from for t, _ in tables.calls] == ["anchor-1"] and letters.how == [(False, "")]

    failing, letters = Tables(fail=True), Letters()
    coordinator = Coordinator(WithBadRecords({"w1": [0, 1]}), "p", P, failing, timeout_s=5, dead_letters=letters)
    assert await coordinator.cycle() == [] and letters.sent == []   # reported again with the next cycle

    # a coordinator without a dead-letter topic refuses them rather than commit their offsets
    tables = Tables()
    assert await Coordinator(WithBadRecords({"w1": [0, 1]}), "p", P, tables, timeout_s=5).cycle() == []
    assert tables.calls == []


@pytest.mark.asyncio
async def test_a_stop_during_a_table_commit_that_lands_still_sends_its_bad_records() -> None:
    """Found by the chaos run: the coordinator role moved away while a commit carrying a bad record
    was in the catalog. The commit landed, the stop took effect before the dead letter went out, and
    the next coordinator had dropped that reply (an older generation): the record never reached the
    dead-letter topic. The landed commit's bad records now go out before the stop takes effect."""
    letters, tables = Letters(), Held()
    coordinator = Coordinator(WithBadRecords({"w1": [0, 1]}), "p", P, tables, timeout_s=5, dead_letters=letters)
    await _stop_mid_commit(coordinator, tables)
    assert [(t, [d.offset for d in ds]) for _, t, ds in letters.sent] == [("db.t", [2])]


@pytest.mark.asyncio
async def test_a_table_commit_that_lands_as_the_coordinator_stops_is_counted() -> None:
    """make test's flake (test_commit_request.py, committed 0 against one snapshot): the role moved
    away while the cycle's table commit was in the catalog; the commit landed, but only a cycle that
    returned counted it. The metric now counts every commit that lands, whenever the stop came."""
    metrics, tables = Metrics("p", "db.t"), Held()
    await _stop_mid_commit(Coordinator(FakeChannel({"w1": [0, 1]}), "p", P, tables, timeout_s=5, metrics=metrics),
                           tables)
    assert metrics.value("frazil_coordinator_table_commits_total", result="committed") == 1


@pytest.mark.asyncio
async def test_a_commit_found_landed_sends_the_bad_records_of_dropped_replies_below_the_tables_offsets() -> None:
    """The coordinator that landed a commit died before sending its bad records, and the one that
    takes the cycle over dropped that reply (an older generation after the rebalance): when the
    commit id is found in the table, those records are sent too, those the table's offsets passed."""
    letters = Letters()
    coordinator = Coordinator(FakeChannel({}), "p", P, Tables(), timeout_s=5, dead_letters=letters)
    table = TableCommit("db.t", (), (), dead_letters=(DeadLetter("t", 0, 4, "id", "bad"),),
                        stale_letters=(DeadLetter("t", 0, 4, "id", "bad"), DeadLetter("t", 1, 2, "id", "bad"),
                                       DeadLetter("t", 1, 9, "id", "bad")))
    found = CommitResult("c1", 42, 0, {("t", 0): 10, ("t", 1): 5}, 1, 0.01, found=True, letters_from="kept")
    await coordinator._send_landed("c1", table, found)
    assert [(d.partition, d.offset) for _, _, ds in letters.sent for d in ds] == [(0, 4), (1, 2)]   # once each
    assert letters.how == [(True, "kept")]   # found: the sink looks past the commit's anchor for what is out
    letters.sent.clear()
    await coordinator._send_landed("c1", table, dataclasses.replace(found, found=False))   # landed by this one
    assert [(d.partition, d.offset) for _, _, ds in letters.sent for d in ds] == [(0, 4)]
    assert letters.how[-1] == (False, "kept")


@pytest.mark.asyncio
async def test_a_taken_over_cycle_whose_bad_records_only_a_dropped_reply_carried_is_sealed() -> None:
    """The chaos run's lost dead letter (seed 821346851): the old coordinator, paused, had accepted a
    reply with a bad record; its successor dropped that reply (the partitions had moved), closed the
    cycle with nothing to commit, and the old one's catalog commit landed afterwards, its bad record
    never sent. The successor now seals the commit id in that table: if the old one's commit is there
    already, its bad records go out; if not, it never can land."""
    first = FakeChannel({})
    first.log += [Event("p", "coordinator", 0, payload=StartCommit("old-1")),
                  Event("p", "zombie", 0, payload=DataWritten("old-1", "db.t",
                                                              (DataFileRef("z.parquet", "PARQUET", 1, 1, 0),),
                                                              (OffsetRange("t", 0, 0, 5, 1),),
                                                              dead_letters=(DeadLetter("t", 0, 3, "id", "bad"),))),
                  Event("p", "zombie", 0, payload=DataComplete("old-1", (Assignment("t", 0, 1),))),
                  Event("p", "w2", 0, payload=DataComplete("old-1", (Assignment("t", 0, 2), Assignment("t", 1, 2))))]

    class Sealing(Tables):
        def __init__(self, landed: bool) -> None:
            super().__init__()
            self.landed = landed

        def __call__(self, table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
            self.calls.append((table, commit_id))
            assert table.seal and not table.files
            return CommitResult(commit_id, 42 if self.landed else None, 0, {("t", 0): 5 if self.landed else 0}, 1,
                                0.01, found=self.landed)

    for landed in (False, True):
        letters, tables = Letters(), Sealing(landed)
        channel = FakeChannel({}, backlog=first.log)
        successor = Coordinator(channel, "p", P, tables, timeout_s=5, dead_letters=letters)
        await successor.recover()
        assert [(t.table, c) for t, c in tables.calls] == [("db.t", "old-1")]
        assert [(d.partition, d.offset) for _, _, ds in letters.sent for d in ds] == ([(0, 3)] if landed else [])
        assert channel.payloads(CommitToTable) == ([CommitToTable("old-1", "db.t", 42, None)] if landed else [])
        assert len(channel.payloads(CommitComplete)) == 1


class TwoTables(FakeChannel):
    """One worker's reply to two tables, with the watermark as it is and as it will be once landed."""

    async def send(self, payloads: list[Payload]) -> None:
        for p in payloads:
            self.log.append(Event("p", "coordinator", 0, payload=p))
            if isinstance(p, StartCommit):
                for table in ("db.a", "db.b"):
                    self.log.append(Event("p", "w", 0, payload=DataWritten(
                        p.commit_id, table, (DataFileRef(f"{table}.parquet", "PARQUET", 1, 1, 0),),
                        (OffsetRange("t", 0, 10, 20, 1),))))
                self.log.append(Event("p", "w", 0, payload=DataComplete(
                    p.commit_id, (Assignment("t", 0, 1, progress=10, landed=20),), 100)))


@pytest.mark.asyncio
@pytest.mark.parametrize("failing, short, kept", [((), (), {"db.a": 10, "db.b": 20}),
                                                  (("db.a",), (), {"db.b": 10}), (("db.b",), (), {"db.a": 10}),
                                                  ((), ("db.a",), {"db.a": 10, "db.b": 10})])
async def test_only_the_last_commit_of_a_cycle_whose_other_commits_landed_keeps_the_landed_watermark(
        failing: tuple[str, ...], short: tuple[str, ...], kept: dict[str, int]) -> None:
    """The watermark a reply will have once landed is true only when every table of the cycle
    holds its part: the cycle's last commit, atomic with its own part, may keep it when every
    table before it holds every range of the cycle; any other commit keeps the watermark as it
    was. A commit found already in a table (a taken-over cycle) that lacks a late reply's range
    (``short``) does not count as holding it."""
    stored: dict[str, int] = {}

    def commit(table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
        if table.table in failing:
            raise CommitFailed("catalog down")
        stored[table.table] = dict(((t, p), o) for t, p, o in table.progress)[("t", 0)]
        if table.table in short:   # landed by the coordinator this one took over from, without [10, 20)
            return CommitResult(commit_id, 41, 1, {("t", 0): 10}, 1, 0.01, found=True)
        return CommitResult(commit_id, 42, 1, {("t", 0): 20}, 1, 0.01)

    coordinator = Coordinator(TwoTables({}), "p", frozenset({("t", 0)}), commit, timeout_s=5)
    await coordinator.cycle()
    assert stored == kept
