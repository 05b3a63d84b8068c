"""Distributed mode in one ``frazil run`` process: the worker's channel, and the coordinator role
while this process owns the election partition.

Election: the member assigned partition 0 of the first configured topic is the coordinator (the
consumer group guarantees exactly one owner per generation). When the assignment moves, the old
owner stops its coordinator and the new one starts, reading the control topic from the position
the last one committed. A rebalance that leaves the partition where it was does not stop the
coordinator (aiokafka's rebalances are eager: every member gives up everything first); until the
new assignment is known, the old one counts.

A coordinator that does not know it lost (paused, partitioned away) is fenced twice: its
control-topic producer shares the role's transactional id, so the new one's start fences its
sends; and its catalog commits meet the table's offsets inside the compare-and-swap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from aiokafka.errors import KafkaError, ProducerFenced
from pyiceberg.catalog import Catalog

from frazil import faults
from frazil.config import Config
from frazil.coordination.channel import ControlChannel
from frazil.coordination.commit_state import TopicPartition
from frazil.coordination.coordinator import Coordinator, table_committer
from frazil.metrics import Metrics
from frazil.status import partitions

log = logging.getLogger(__name__)

FENCED_PAUSE_S = 5.0


def election_partition(topics: tuple[str, ...]) -> TopicPartition:
    return (topics[0], 0)


def reply_transaction_timeout_ms(cfg: Config) -> int:
    """A worker's reply transaction takes milliseconds; one left open (a paused worker) holds back
    every reader of the control topic until the broker aborts it. So: the commit timeout (after it
    the cycle has moved on anyway), at least 10 s for a slow broker."""
    return max(10_000, int(cfg.coordination.commit_timeout_s * 1000))


def worker_channel(cfg: Config) -> ControlChannel:
    member = f"worker-{uuid.uuid4().hex[:12]}"
    return ControlChannel(cfg.kafka.bootstrap_servers, cfg.coordination.control_topic, group=cfg.pipeline,
                          member=member, transactional_id=f"frazil-{cfg.pipeline}-{member}",
                          transaction_timeout_ms=reply_transaction_timeout_ms(cfg))


class CoordinatorService:
    def __init__(self, cfg: Config, catalog: Catalog, assignment: Callable[[], set[TopicPartition]],
                 metrics: Metrics | None = None) -> None:
        self._cfg, self._catalog, self._assignment, self._metrics = cfg, catalog, assignment, metrics
        self._election = election_partition(cfg.kafka.topics)

    async def run(self, stop: asyncio.Event) -> None:
        task: asyncio.Task[None] | None = None
        not_before = 0.0
        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                leader = self._election in self._assignment()
                if leader and task is None and loop.time() >= not_before:
                    log.info("coordinator: this process owns %s[%d]; starting the coordinator", *self._election)
                    task = asyncio.create_task(self._lead())
                elif not leader and task is not None:
                    log.info("coordinator: %s[%d] moved to another process; stopping the coordinator", *self._election)
                    await _end(task)
                    task = None
                if task is not None and task.done():
                    try:
                        task.result()
                    except ProducerFenced:
                        # Another process started a coordinator: this one is the zombie. Stop; if the
                        # group still says this process leads, try again after a pause.
                        log.warning("coordinator: fenced by a newer coordinator of %s; stopping this one",
                                    self._cfg.pipeline)
                        not_before = loop.time() + FENCED_PAUSE_S
                    task = None  # any other failure was raised above and stops the process, loudly
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
        finally:
            if task is not None:
                await _end(task)

    async def _lead(self) -> None:
        cfg = self._cfg
        channel = ControlChannel(cfg.kafka.bootstrap_servers, cfg.coordination.control_topic, group=cfg.pipeline,
                                 member=f"coordinator-{uuid.uuid4().hex[:12]}",
                                 transactional_id=f"frazil-{cfg.pipeline}-coordinator",
                                 consumer_group=f"{cfg.kafka.group_id}-coordinator")
        await channel.start()
        try:
            source = frozenset(await partitions(cfg.kafka.bootstrap_servers, cfg.kafka.topics))
            coordinator = Coordinator(channel, cfg.pipeline, source,
                                      table_committer(self._catalog, cfg.pipeline, max_attempts=cfg.max_commit_attempts),
                                      timeout_s=cfg.coordination.commit_timeout_s, fence=not faults.off("fencing"),
                                      outage_timeout_s=cfg.outage_timeout_s, metrics=self._metrics)
            if self._metrics is not None:
                self._metrics.coordinator.set(1)
            requested = await coordinator.recover()
            while True:
                trigger = "requested before this coordinator started" if requested else \
                    await coordinator.wait_for_trigger(cfg.commit_interval_s)
                requested = False
                if trigger != "interval":
                    log.info("coordinator: starting a cycle early, %s", trigger)
                results = await coordinator.cycle()
                for r in results:
                    log.info("coordinator: commit %s landed as snapshot %s with %d rows", r.commit_id, r.snapshot_id,
                             r.rows)
        finally:
            if self._metrics is not None:
                self._metrics.coordinator.set(0)
            with contextlib.suppress(KafkaError):   # a fenced producer may refuse to close cleanly
                await channel.stop()


async def _end(task: asyncio.Task[None]) -> None:
    """Stop a coordinator task whose leadership is gone; being fenced on the way out is expected."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, ProducerFenced):
        await task
