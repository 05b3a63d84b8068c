"""The coordination mode, decided once from the config: what differs between one process
(``single``) and many sharing a consumer group (``distributed``). Everything else (the worker, the
coordinator, the commit path) is the same code in both.

Single mode: the worker and the coordinator talk over an in-process ``LocalTopic``; the process
always coordinates, a cycle waits for the partitions this process owns (its one worker answers
for all of them), landed commits' bad records are kept in the process's transaction log until
sent, and a stop drains what is buffered. Distributed mode: the control topic; the process
coordinates while it owns the election partition, a cycle waits for every partition of the
source topics, and a stop hands the partitions to their next owner."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from frazil.config import Config
from frazil.coordination.channel import ControlChannel
from frazil.coordination.local import LocalChannel, LocalTopic
from frazil.iceberg.offsets import TopicPartition

Partitions = Callable[[], frozenset[TopicPartition]]


def election_partition(topics: tuple[str, ...]) -> TopicPartition:
    """The partition whose owner coordinates (distributed mode): partition 0 of the first topic."""
    return (topics[0], 0)


def reply_transaction_timeout_ms(cfg: Config) -> int:
    """A worker's reply transaction takes milliseconds; one left open (a paused worker) holds back
    every reader of the control topic until the broker aborts it. So: the commit timeout (after it
    the cycle has moved on anyway), at least 10 s for a slow broker."""
    return max(10_000, int(cfg.coordination.commit_timeout_s * 1000))


def _member(role: str) -> str:
    return f"{role}-{uuid.uuid4().hex[:12]}"


class Mode(Protocol):
    name: str
    drain_on_stop: bool         # a stop lands what is buffered (else the partitions' next owner reads it)
    senders: int | None         # replies that end a cycle at once (None: wait for every partition)
    keeps_dead_letters: bool    # the coordinator's commit intents carry their bad records (no other coordinator
                                # finishes its cycles: a restart sends them)
    lists_partitions: bool      # a cycle waits for every partition of the topics, listed from Kafka

    def worker_channel(self, cfg: Config) -> ControlChannel | LocalChannel: ...
    def coordinator_channel(self, cfg: Config) -> ControlChannel | LocalChannel: ...
    def leads(self, owned: set[TopicPartition], election: TopicPartition) -> bool: ...
    def cycle_partitions(self, owned: Callable[[], set[TopicPartition]], listed: Partitions) -> Partitions: ...


@dataclass
class SingleMode:
    topic: LocalTopic = field(default_factory=LocalTopic)
    name: str = "single"
    drain_on_stop: bool = True
    senders: int | None = 1
    keeps_dead_letters: bool = True
    lists_partitions: bool = False

    def worker_channel(self, cfg: Config) -> LocalChannel:
        return LocalChannel(self.topic, group=cfg.pipeline, member=_member("worker"))

    def coordinator_channel(self, cfg: Config) -> LocalChannel:
        return LocalChannel(self.topic, group=cfg.pipeline, member=_member("coordinator"), coordinator=True)

    def leads(self, owned: set[TopicPartition], election: TopicPartition) -> bool:
        return True

    def cycle_partitions(self, owned: Callable[[], set[TopicPartition]], listed: Partitions) -> Partitions:
        return lambda: frozenset(owned())   # a cycle never waits for another process


@dataclass
class DistributedMode:
    name: str = "distributed"
    drain_on_stop: bool = False
    senders: int | None = None
    keeps_dead_letters: bool = False
    lists_partitions: bool = True

    def worker_channel(self, cfg: Config) -> ControlChannel:
        member = _member("worker")
        return ControlChannel(cfg.kafka, cfg.coordination.control_topic, group=cfg.pipeline, member=member,
                              transactional_id=f"frazil-{cfg.pipeline}-{member}",
                              transaction_timeout_ms=reply_transaction_timeout_ms(cfg))

    def coordinator_channel(self, cfg: Config) -> ControlChannel:
        # the role's one transactional id: a new coordinator's producer fences the old one's sends
        return ControlChannel(cfg.kafka, cfg.coordination.control_topic, group=cfg.pipeline,
                              member=_member("coordinator"), transactional_id=f"frazil-{cfg.pipeline}-coordinator",
                              consumer_group=f"{cfg.kafka.group_id}-coordinator")

    def leads(self, owned: set[TopicPartition], election: TopicPartition) -> bool:
        return election in owned

    def cycle_partitions(self, owned: Callable[[], set[TopicPartition]], listed: Partitions) -> Partitions:
        return listed


def for_config(cfg: Config) -> SingleMode | DistributedMode:
    return DistributedMode() if cfg.coordination.mode == "distributed" else SingleMode()
