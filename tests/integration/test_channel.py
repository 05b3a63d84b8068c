"""The control channel on the real broker: transactions, positions, foreign records."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from frazil.coordination.channel import ControlChannel
from frazil.events import Assignment, DataComplete, DataWritten, EventDecodeError, OffsetRange, StartCommit
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration


def channel(kafka: KafkaBroker, topic: str, member: str, *, group: str = "p",
            coordinator: bool = False) -> ControlChannel:
    return ControlChannel(kafka.bootstrap, topic, group=group, member=member, transactional_id=f"{group}-{member}",
                          consumer_group=f"{group}-coordinator" if coordinator else None)


@pytest.mark.asyncio
async def test_a_reply_arrives_whole_aborted_ones_never_and_the_coordinator_resumes_after_failover(
        kafka: KafkaBroker) -> None:
    topic = "control-a"
    coordinator = channel(kafka, topic, "c", coordinator=True)
    worker = channel(kafka, topic, "w1")
    other_pipeline = channel(kafka, topic, "x", group="q")
    for c in (coordinator, worker, other_pipeline):
        await c.start()
    try:
        await coordinator.send([StartCommit("c1")])
        reply = [DataWritten("c1", "db.t", (), (OffsetRange("t", 0, 0, 5, 1),)),
                 DataComplete("c1", (Assignment("t", 0, 1),), 123)]
        await worker.send(reply)
        await other_pipeline.send([StartCommit("z")])
        # a transaction that aborts is never seen
        producer = worker._producer
        await producer.begin_transaction()
        await producer.send(topic, b"\xf7\x01garbage that is never committed")
        await producer.abort_transaction()

        got = []
        for _ in range(20):
            got += await coordinator.poll(500)
            if len(got) >= 3:
                break
        assert [r.event.payload for r in got] == [StartCommit("c1"), *reply]
        assert [r.event.sender for r in got] == ["c", "w1", "w1"]
        # the worker started at the end: it sees only what was said after it joined (its own reply too)
        seen = [r.event.payload for r in await worker.poll(2000)]
        assert StartCommit("c1") in seen and StartCommit("z") not in seen
        await coordinator.commit_position(got[1].offset)   # StartCommit handled; the reply not yet
    finally:
        for c in (coordinator, worker, other_pipeline):
            await c.stop()

    # failover: the next coordinator reads again from the committed position
    successor = channel(kafka, topic, "c2", coordinator=True)
    await successor.start()
    try:
        assert not await successor.caught_up()
        again = []
        while not await successor.caught_up():
            again += await successor.poll(500)
        assert [r.event.payload for r in again][:2] == reply
    finally:
        await successor.stop()


@pytest.mark.asyncio
async def test_a_foreign_record_on_the_control_topic_is_named_by_offset(kafka: KafkaBroker) -> None:
    topic = "control-b"
    coordinator = channel(kafka, topic, "c", coordinator=True)
    await coordinator.start()
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b'{"not": "ours"}')
        with pytest.raises(EventDecodeError, match=r"control-b\[0\]@0 is not a frazil event"):
            for _ in range(10):
                await coordinator.poll(500)
    finally:
        await producer.stop()
        await coordinator.stop()


@pytest.mark.asyncio
async def test_a_fenced_coordinators_channel_stops_without_leaving_an_unretrieved_error(kafka: KafkaBroker) -> None:
    """A zombie coordinator woken after its successor started: its send is refused (fenced) and
    it stops. aiokafka leaves the fencing error in a transaction future nobody awaits; frazil
    retrieves it on stop, so the process logs the fencing once, not an asyncio traceback of an
    unretrieved ProducerFenced when the future is collected."""
    import asyncio
    import gc

    from aiokafka.errors import ProducerFenced

    topic = "control-fenced"
    seen: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: seen.append(context))
    try:
        zombie = channel(kafka, topic, "c", coordinator=True)
        await zombie.start()
        await zombie.send([StartCommit("c1")])
        successor = ControlChannel(kafka.bootstrap, topic, group="p", member="c2", transactional_id="p-c",
                                   consumer_group="p-coordinator")
        await successor.start()   # same transactional id: the zombie's producer is fenced
        try:
            with pytest.raises(ProducerFenced):
                await zombie.send([StartCommit("c2")])
        finally:
            await zombie.stop()
            await successor.stop()
        del zombie
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(None)
    assert [c.get("message") for c in seen] == [], seen
