"""The control topic as a channel: events out in Kafka transactions, committed events in.

Every process of a pipeline has one. A worker's reply to a StartCommit (its DataWritten events
and its DataComplete) goes out in one transaction, so the coordinator sees all of it or none of
it; aborted and in-flight transactions are invisible (``read_committed``). Workers read from the
end of the topic (what was said before they joined is not for them); the coordinator reads from
its own consumer group's committed position, so replies sent before a failover are read again
by the next coordinator.

The topic is created (one partition: one order for every event; up to 3 replicas) if it does not
exist.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.structs import OffsetAndMetadata

from frazil import faults
from frazil.config import KafkaConfig
from frazil.events import codec
from frazil.events.payloads import Event, Payload
from frazil.flow import retry
from frazil.kafka.clients import close_quietly, connect, delivered, options, stop_client

log = logging.getLogger(__name__)


MAX_REPLICATION = 3   # frazil's own topics, as Kafka Connect's internal topics: 3 copies where there are 3 brokers


async def ensure_topic(kafka: KafkaConfig | str, topic: str, kind: str = "control") -> None:
    """Create ``topic`` (one partition; as many replicas as there are brokers, up to 3) unless it
    exists; ``kind`` names it in the log."""
    admin = AIOKafkaAdminClient(**options(kafka))
    await connect(admin, kafka)
    try:
        if topic in await admin.list_topics():
            return
        brokers = len((await admin.describe_cluster()).get("brokers") or []) or 1
        replicas = min(MAX_REPLICATION, brokers)
        try:
            await admin.create_topics([NewTopic(topic, 1, replicas)])
            log.info("created %s topic %s (1 partition, %d replica(s))", kind, topic, replicas)
        except TopicAlreadyExistsError:
            pass  # another process created it meanwhile
    finally:
        await admin.close()


MAX_EVENT_BYTES = 16 * 1024 * 1024   # one event, before compression
RESET_ATTEMPTS = 12   # a new control-topic producer's start, about 90 s of a broker away
RESET_BACKOFF = retry.Backoff(2.0, 10.0)


@dataclass(frozen=True)
class Received:
    event: Event
    offset: int


class ControlChannel:
    def __init__(self, kafka: KafkaConfig | str, topic: str, *, group: str, member: str, transactional_id: str,
                 consumer_group: str | None = None, transaction_timeout_ms: int = 60_000) -> None:
        """``group`` is the pipeline (events of other pipelines on the topic are skipped);
        ``consumer_group`` set: read from that group's committed position (the coordinator),
        else from the end (a worker). A transaction left open longer than
        ``transaction_timeout_ms`` (a paused process) is aborted by the broker; until then it holds
        back every ``read_committed`` reader of the topic."""
        self._kafka, self._topic, self._group, self._member = kafka, topic, group, member
        self._tp = TopicPartition(topic, 0)
        self._consumer_group = consumer_group
        self._transactional_id, self._transaction_timeout_ms = transactional_id, transaction_timeout_ms
        self._producer = self._new_producer()
        self._consumer = AIOKafkaConsumer(**options(kafka), group_id=consumer_group,
                                          enable_auto_commit=False, isolation_level="read_committed",
                                          auto_offset_reset="earliest")

    async def start(self) -> None:
        try:   # the clients exist from __init__: closed whatever fails here
            await ensure_topic(self._kafka, self._topic)
            await connect(self._producer, self._kafka)
            await connect(self._consumer, self._kafka)
        except BaseException:
            await close_quietly(self._producer, self._consumer)
            raise
        self._consumer.assign([self._tp])
        if self._consumer_group is None:
            await self._consumer.seek_to_end(self._tp)
        else:
            committed = await self._consumer.committed(self._tp)
            if committed is None:
                await self._consumer.seek_to_beginning(self._tp)
            else:
                self._consumer.seek(self._tp, committed)

    def _new_producer(self) -> AIOKafkaProducer:
        # gzip: a reply naming thousands of bad records (similar reasons) shrinks well under the
        # broker's 1 MB message limit; the client-side limit is on the uncompressed size
        return AIOKafkaProducer(**options(self._kafka), transactional_id=self._transactional_id,
                                enable_idempotence=True, transaction_timeout_ms=self._transaction_timeout_ms,
                                compression_type="gzip", max_request_size=MAX_EVENT_BYTES)

    async def reset_producer(self) -> None:
        """After a failed transaction (aborted by the broker's timeout while this process was
        paused, or fenced): a new producer with the same transactional id, whose start aborts
        whatever the old one left open."""
        with contextlib.suppress(KafkaError):
            await stop_client(self._producer)
        self._producer = self._new_producer()
        async for attempt in retry.attempts_async(RESET_ATTEMPTS, RESET_BACKOFF):   # the broker may be restarting
            try:
                await self._producer.start()
                return
            except KafkaError as exc:
                if attempt == RESET_ATTEMPTS:
                    raise
                log.warning("control-topic producer: start failed (%s: %s); try %d/%d", type(exc).__name__, exc,
                            attempt, RESET_ATTEMPTS)
                with contextlib.suppress(KafkaError):
                    await stop_client(self._producer)
                self._producer = self._new_producer()

    async def stop(self) -> None:
        try:
            await stop_client(self._producer)
        finally:
            await stop_client(self._consumer)

    async def send(self, payloads: list[Payload], *, fault_point: str | None = None) -> None:
        """All of ``payloads`` in one transaction: readers see every one of them or none.
        ``fault_point`` is hit inside the transaction, before its commit."""
        now = int(time.time() * 1000)
        async with self._producer.transaction():
            sent = [await self._producer.send(self._topic, codec.encode(Event(self._group, self._member, now,
                                                                              payload=payload)))
                    for payload in payloads]
            await delivered(sent)   # on the broker, every one of them: the transaction is open there now
            if fault_point is not None:
                faults.hit(fault_point)

    async def poll(self, timeout_ms: int) -> list[Received]:
        """Committed events of this pipeline, in topic order; a record that is not a frazil event
        raises ``EventDecodeError`` naming its offset."""
        batches = await self._consumer.getmany(self._tp, timeout_ms=timeout_ms)
        out = []
        for record in batches.get(self._tp, []):
            event = codec.decode(record.value or b"", where=f"{self._topic}[0]@{record.offset}")
            if event.group == self._group:
                out.append(Received(event, record.offset))
        return out

    async def caught_up(self) -> bool:
        """Whether everything committed on the topic so far has been read."""
        end = (await self._consumer.end_offsets([self._tp]))[self._tp]   # the last stable offset
        return bool(await self._consumer.position(self._tp) >= end)

    async def commit_position(self, offset: int) -> None:
        """The coordinator: events before ``offset`` need not be read again after a failover."""
        assert self._consumer_group is not None, "only the coordinator keeps a position"
        await self._consumer.commit({self._tp: OffsetAndMetadata(offset, "")})
