"""Distributed mode in one ``frazil run`` process: the worker's channel, and the coordinator role
while this process owns the election partition.

Election: the member assigned partition 0 of the first configured topic is the coordinator (the
consumer group guarantees exactly one owner per generation). When the assignment moves, the old
owner stops its coordinator and the new one starts, reading the control topic from the position
the last one committed. A coordinator that does not know it lost (paused, partitioned away) is
fenced twice: its control-topic producer shares the role's transactional id, so the new one's
start fences its sends; and its catalog commits meet the table's offsets inside the
compare-and-swap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from pyiceberg.catalog import Catalog

from frazil.config import Config
from frazil.coordination.channel import ControlChannel
from frazil.coordination.commit_state import TopicPartition
from frazil.coordination.coordinator import Coordinator, table_committer
from frazil.status import partitions

log = logging.getLogger(__name__)


def election_partition(topics: tuple[str, ...]) -> TopicPartition:
    return (topics[0], 0)


def worker_channel(cfg: Config) -> ControlChannel:
    member = f"worker-{uuid.uuid4().hex[:12]}"
    return ControlChannel(cfg.kafka.bootstrap_servers, cfg.coordination.control_topic, group=cfg.pipeline,
                          member=member, transactional_id=f"frazil-{cfg.pipeline}-{member}")


class CoordinatorService:
    def __init__(self, cfg: Config, catalog: Catalog, assignment: Callable[[], set[TopicPartition]]) -> None:
        self._cfg, self._catalog, self._assignment = cfg, catalog, assignment
        self._election = election_partition(cfg.kafka.topics)
        self.cycles = 0

    async def run(self, stop: asyncio.Event) -> None:
        task: asyncio.Task[None] | None = None
        try:
            while not stop.is_set():
                leader = self._election in self._assignment()
                if leader and task is None:
                    log.info("coordinator: this process owns %s[%d]; starting the coordinator", *self._election)
                    task = asyncio.create_task(self._lead())
                elif not leader and task is not None:
                    log.info("coordinator: %s[%d] moved to another process; stopping the coordinator", *self._election)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    task = None
                if task is not None and task.done():
                    task.result()  # a coordinator failure stops the process, loudly
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

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
                                      timeout_s=cfg.coordination.commit_timeout_s)
            await coordinator.recover()
            while True:
                await asyncio.sleep(cfg.commit_interval_s)
                results = await coordinator.cycle()
                self.cycles += 1
                for r in results:
                    log.info("coordinator: commit %s landed as snapshot %s with %d rows", r.commit_id, r.snapshot_id,
                             r.rows)
        finally:
            await channel.stop()
