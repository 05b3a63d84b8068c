"""The ingest loop of one process: Kafka records into the buffers, control events to the worker
role, backpressure, rebalances. It never commits: the worker answers the coordinator's cycles over
the channel (in process in single mode, the control topic in distributed mode), and the
coordinator commits (docs/architecture.md, the commit cycle).

Each pass: poll the source, hand the fetches to intake (``ingest/intake.py``), read the control
channel, hand one control event at a time to the worker in a background task (so polling, and with
it heartbeats, never stops), ask for an early cycle when the buffers are full, and pause or resume
consumption by the bytes held. On stop, single mode lands what is buffered through the in-process
coordinator; in distributed mode the partitions' next owner reads it again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from frazil.buffers.state import Buffers
from frazil.config import Config
from frazil.coordination.worker import SourceControl, Worker, WorkerChannel
from frazil.events.payloads import CommitComplete, Event, StartCommit
from frazil.flow.backpressure import Action, Backpressure
from frazil.flow.catch_up import CatchUp
from frazil.iceberg.offsets import TopicPartition
from frazil.ingest.intake import Intake
from frazil.kafka.fetch import Chunk
from frazil.metrics import Metrics, Stats

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 200
BUSY_POLL_TIMEOUT_MS = 10   # while a control event waits or the worker's task runs: hand over quickly
LAG_EVERY_S = 2.0   # how often the per-partition lag gauges are set
DRAIN_CYCLES = 3   # on stop, at most this many cycles to land the batch and the buffer
EARLY_CYCLE_SHARE = 0.5   # of memory_budget_mb buffered (no batch held): ask for a cycle
CATCH_UP_LAG = 50_000     # records behind the partitions' ends that make a backlog (flow/catch_up.py)

OnAssigned = Callable[[set[TopicPartition]], Awaitable[Mapping[TopicPartition, int]]]
OnRevoked = Callable[[set[TopicPartition]], Awaitable[None]]
OnPositioned = Callable[[set[TopicPartition], Mapping[TopicPartition, int]], None]


class Source(SourceControl, Protocol):
    """The Kafka source as the loop, intake and the worker use it (``ingest/source.py``; a fake in
    unit tests)."""

    @property
    def joined(self) -> bool: ...
    @property
    def paused(self) -> bool: ...
    def listen(self, *, on_assigned: OnAssigned, on_positioned: OnPositioned, on_revoked: OnRevoked) -> None: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def poll(self, timeout_ms: int) -> dict[TopicPartition, list[Chunk]]: ...
    def highwaters(self) -> dict[TopicPartition, int]: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def seek_back(self, tp: TopicPartition, offset: int) -> None: ...
    def settled_assignment(self) -> set[TopicPartition]: ...


class Pipeline:
    def __init__(self, cfg: Config, *, buffers: Buffers, source: Source, intake: Intake, worker: Worker,
                 channel: WorkerChannel, metrics: Metrics, stats: Stats, drain_on_stop: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """The parts come assembled (``ingest/assemble.py``); ``drain_on_stop``: single mode lands
        what is buffered on stop; ``clock``: monotonic seconds."""
        self._cfg, self._buffers, self._source, self._intake, self.worker = cfg, buffers, source, intake, worker
        self._channel, self.metrics, self.stats, self._drain_on_stop = channel, metrics, stats, drain_on_stop
        self._clock = clock
        self._control: deque[Event] = deque()
        self._flow = Backpressure(cfg.memory_budget_bytes)
        self.metrics.budget_bytes.set(cfg.memory_budget_bytes)
        self._lag_due = 0.0   # when the lag gauges are set next (monotonic)
        self._catch_up = CatchUp(CATCH_UP_LAG)
        self._task: asyncio.Task[None] | None = None
        self.coordinator: asyncio.Task[None] | None = None   # the in-process coordinator, when there is one
        source.listen(on_assigned=self._on_assigned, on_positioned=buffers.positions.positioned,
                      on_revoked=self._on_revoked)

    @property
    def bytes_in_use(self) -> int:
        return self._buffers.bytes + self.worker.batch_bytes

    def assignment(self) -> set[TopicPartition]:
        """The source partitions this process owns now; during a rebalance, the ones it owned
        before (a coordinator is not stopped by a rebalance that leaves it the election partition)."""
        return self._source.settled_assignment()

    @property
    def joined(self) -> bool:
        """The group assigned this process its partitions (maybe none) and they are positioned."""
        return self._source.joined

    @property
    def paused(self) -> bool:
        """Consumption is paused by backpressure."""
        return self._source.paused

    def positions(self) -> dict[TopicPartition, int]:
        """The next offset this pipeline takes from each positioned partition."""
        return self._buffers.positions.next_offsets()

    async def run(self, stop: asyncio.Event) -> None:
        """Ingest until ``stop`` is set, then drain."""
        await self._source.start()
        try:
            while not stop.is_set():
                await self._pass()
            await self._drain()
        finally:
            if self._task is not None and not self._task.done():
                self._task.cancel()
            await self._source.stop()
        s = self.stats
        log.info("stopped after %.1fs: %d records in (%d taken by no table, %d filtered out by transforms, %d "
                 "tombstones, %d bad), %d rows committed in %d commits (%d failed), %d pause(s)",
                 self._clock() - s.started, s.records_in, s.records_unrouted, s.records_filtered, s.records_tombstones,
                 s.records_bad, s.rows_committed, s.commits, s.failed_commits, s.pauses)

    async def _pass(self) -> None:
        """One pass of the loop."""
        busy = self._task is not None or self._control
        batches = await self._source.poll(BUSY_POLL_TIMEOUT_MS if busy else POLL_TIMEOUT_MS)
        if batches:
            before = self.stats.records_in
            if await self._intake.take(batches):
                self._apply(self._flow.full(), f"the buffer is at its {self._flow.budget_bytes} byte cap")
            self._catch_up.polled(sum(self._lags().values()), self.stats.records_in - before, self._buffers.rows)
        self._control.extend(r.event for r in await self._channel.poll(0) if _for_worker(r.event))
        self._check_task()
        if self._task is None and self._control:
            self._task = self._next_control()
        # the buffers' rows and bytes once for the rest of the pass: each is a sum over every table's buffer
        rows, nbytes = self._buffers.rows, self._buffers.bytes
        full = self._full(rows, nbytes)
        if self._task is None and self.worker.request_due(full or self._catch_up.due(rows), self._clock()):
            self._catch_up.asked()
            self._task = asyncio.create_task(self.worker.request(
                f"{rows} rows buffered" if rows >= self._cfg.max_buffer_records
                else "memory budget reached" if full
                else f"caught up with a backlog: {rows} rows buffered"))
        in_use = nbytes + self.worker.batch_bytes
        self._apply(self._flow.update(in_use))
        self.metrics.bytes_in_use.set(in_use)
        now = self._clock()
        self.metrics.failing_seconds.set(self.worker.outage.seconds(now))
        if now >= self._lag_due:
            self._lag_due = now + LAG_EVERY_S
            self.metrics.lag(self._lags())

    def _lags(self) -> dict[TopicPartition, int]:
        """Per owned partition: the high watermark of its last fetch minus the next offset this
        process takes (the table's offset until it takes one)."""
        marks = self._source.highwaters()
        nexts = self._buffers.positions.next_offsets()
        return {tp: max(0, mark - nexts[tp]) for tp, mark in marks.items() if tp in nexts}

    def _next_control(self) -> asyncio.Task[None] | None:
        """The worker's task for the next control event; a StartCommit whose CommitComplete is
        already here is skipped (that cycle ended without us: answering would only be refused)."""
        event = self._control.popleft()
        payload = event.payload
        if isinstance(payload, StartCommit) and any(
                isinstance(e.payload, CommitComplete) and e.payload.commit_id == payload.commit_id
                for e in self._control):
            log.info("commit %s ended before this worker could answer it; skipping it", payload.commit_id)
            return None
        return asyncio.create_task(self.worker.handle(payload, event.sent_ms))

    def _full(self, rows: int, nbytes: int) -> bool:
        """The record-count and bytes triggers (bad records held for the dead-letter topic count:
        a flood of them is sent in cycles of bounded size). The bytes trigger is half the budget
        while no batch is held: a backfill's rows are written while the other half fills, instead
        of ingestion pausing at the budget while one big batch is written."""
        held = self._intake.letters_held()
        return (rows + held >= self._cfg.max_buffer_records or self._intake.letters_full()
                or self._flow.paused
                or (self.worker.batch is None and nbytes >= self._flow.budget_bytes * EARLY_CYCLE_SHARE))

    def _check_task(self) -> None:
        """Surface a worker task's failure on the loop that runs the pipeline."""
        if self._task is not None and self._task.done():
            task, self._task = self._task, None
            task.result()

    async def _wait_task(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            await asyncio.wait([task])
            task.result()

    def _apply(self, action: Action, why: str = "") -> None:
        """Carry out a backpressure decision on the consumer, in the log and in the metrics."""
        self.metrics.paused.set(1 if self._flow.paused else 0)
        if action is Action.PAUSE:
            self._source.pause()
            self.stats.pauses += 1
            self.metrics.pauses.inc()
            log.warning("backpressure: %s; pausing all partitions (polling and heartbeats go on)%s",
                        why or f"{self.bytes_in_use} bytes in use of a {self._flow.budget_bytes} byte budget",
                        "; a commit is failing" if self.worker.outage.failing else "")
        elif action is Action.RESUME:
            self._source.resume()
            log.info("backpressure: %d bytes in use; resuming all partitions", self.bytes_in_use)

    async def _drain(self) -> None:
        """On stop. Single mode: land the batch and the buffer through the in-process coordinator
        (a few cycles at most; none while commits are failing). Distributed mode: hand over."""
        await self._wait_task()
        worker = self.worker
        if not self._drain_on_stop:
            if not worker.idle:
                log.info("stopping a worker: %d buffered rows are not replied; the partitions' next owner reads them "
                         "again from the table%s", self._buffers.rows,
                         f"; reply {worker.in_flight} lands if the coordinator commits it" if worker.in_flight else "")
            return
        cycles = 0
        requested = False
        timeout_s = self._cfg.coordination.commit_timeout_s + self._cfg.commit_interval_s
        deadline = self._clock() + DRAIN_CYCLES * timeout_s + 10
        while not worker.idle and cycles < DRAIN_CYCLES and not worker.outage.failing:
            if self.coordinator is None or self.coordinator.done() or self._clock() > deadline:
                break
            if not requested and worker.in_flight is None and worker.holds_records:
                log.info("draining: committing %d buffered and %d held rows before stopping", self._buffers.rows,
                         worker.batch.rows if worker.batch else 0)
                await worker.request("draining before stop")
                requested = True
            events = [*self._control,
                      *(r.event for r in await self._channel.poll(POLL_TIMEOUT_MS) if _for_worker(r.event))]
            self._control.clear()
            for event in events:
                await worker.handle(event.payload, event.sent_ms)
                if isinstance(event.payload, CommitComplete):
                    cycles += 1
                    requested = False
        if not worker.idle:
            log.warning("stopping with uncommitted rows (%d buffered, %d held); they are read again on restart",
                        self._buffers.rows, worker.batch.rows if worker.batch else 0)

    async def _on_revoked(self, tps: set[TopicPartition]) -> None:
        task = self._task
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait([task])  # its outcome is surfaced by the run loop
        worker = self.worker
        log.info("partitions revoked (%d): dropping %d uncommitted rows%s; they are read again from the table",
                 len(tps), self._buffers.rows + (worker.batch.rows if worker.batch else 0),
                 f" and reply {worker.in_flight}" if worker.in_flight else "")
        # Every partition is re-positioned from the table on the next assignment (aiokafka's
        # assignors are eager: an assignment always follows), so forget them all, not only the
        # revoked ones: a range must never claim records that were dropped here.
        async with self._buffers.lock:   # not halfway through a poll's appends (only they hold it across an await)
            worker.drop()   # a reply in flight may still land; the next assignment resumes from the table either way

    async def _on_assigned(self, tps: set[TopicPartition]) -> Mapping[TopicPartition, int]:
        async with self._buffers.lock:
            self.worker.drop()
        resume = await self.worker.position(tps)
        self.stats.assignments += 1
        self.metrics.assignments.inc()
        return resume


def _for_worker(event: Event) -> bool:
    """The events a worker acts on; the rest of the channel (replies, CommitToTable, requests) is
    the coordinator's business."""
    return isinstance(event.payload, (StartCommit, CommitComplete))
