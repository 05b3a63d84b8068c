"""Single mode's in-process channel keeps the control topic's semantics: one order, a send is
all or nothing, workers read from the end, the coordinator from its committed position."""

from __future__ import annotations

import asyncio

import pytest

from frazil import faults
from frazil.coordination.local import TRIM_AT, LocalChannel, LocalTopic
from frazil.events.payloads import CommitRequest, StartCommit

pytestmark = pytest.mark.asyncio


@pytest.fixture(autouse=True)
def _disarm() -> None:
    yield
    faults.disarm()


def payloads(received) -> list[object]:  # type: ignore[no-untyped-def]
    return [r.event.payload for r in received]


async def test_a_worker_reads_from_the_end_and_the_coordinator_from_its_position() -> None:
    topic = LocalTopic()
    coordinator = LocalChannel(topic, group="p", member="c", coordinator=True)
    await coordinator.start()
    await coordinator.send([StartCommit("c1")])
    worker = LocalChannel(topic, group="p", member="w")
    await worker.start()
    await coordinator.send([StartCommit("c2")])
    assert payloads(await worker.poll(0)) == [StartCommit("c2")]
    got = await coordinator.poll(0)
    assert payloads(got) == [StartCommit("c1"), StartCommit("c2")] and [r.offset for r in got] == [0, 1]
    await coordinator.commit_position(1)
    successor = LocalChannel(topic, group="p", member="c2", coordinator=True)
    await successor.start()
    assert payloads(await successor.poll(0)) == [StartCommit("c2")] and await successor.caught_up()


async def test_a_send_that_fails_inside_its_transaction_shows_nothing() -> None:
    topic = LocalTopic()
    worker, reader = LocalChannel(topic, group="p", member="w"), LocalChannel(topic, group="p", member="c",
                                                                              coordinator=True)
    await reader.start()
    faults.arm("worker.in_reply_transaction", "raise")
    with pytest.raises(faults.InjectedFault):
        await worker.send([CommitRequest("a"), CommitRequest("b")], fault_point="worker.in_reply_transaction")
    assert await reader.poll(0) == []
    faults.disarm()
    await worker.send([CommitRequest("a"), CommitRequest("b")], fault_point="worker.in_reply_transaction")
    assert payloads(await reader.poll(0)) == [CommitRequest("a"), CommitRequest("b")]


async def test_poll_waits_for_the_next_event_and_no_longer() -> None:
    topic = LocalTopic()
    reader, sender = (LocalChannel(topic, group="p", member="c", coordinator=True),
                      LocalChannel(topic, group="p", member="w"))
    await reader.start()
    assert await asyncio.wait_for(reader.poll(20), 1) == []          # times out, empty
    later = asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(sender.send([StartCommit("x")])))
    got = await asyncio.wait_for(reader.poll(5000), 2)               # woken by the send, long before 5 s
    later.cancel()
    assert payloads(got) == [StartCommit("x")]


async def test_events_every_reader_has_read_are_trimmed_and_unread_ones_kept() -> None:
    topic = LocalTopic()
    fast, slow = LocalChannel(topic, group="p", member="a"), LocalChannel(topic, group="p", member="b")
    await fast.start()
    await slow.start()
    for i in range(TRIM_AT * 2):
        await fast.send([CommitRequest(str(i))])
        await fast.poll(0)
    got = await slow.poll(0)
    assert [p.reason for p in payloads(got)] == [str(i) for i in range(TRIM_AT * 2)]   # nothing unread was dropped
    await fast.send([CommitRequest("last")])
    assert len(topic._events) < TRIM_AT + 2   # what both had read is gone
