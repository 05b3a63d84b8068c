"""The coordinator role in a ``frazil run`` process, in either mode, and the worker's channel.

Single mode: the process always coordinates, over an in-process ``LocalTopic``, and a cycle waits
for the partitions this process owns. Distributed mode: the control topic, and the role is held
while this process owns the election partition; a cycle waits for every partition of the topics.
Either way the coordinator logs its commit intents and outcomes in the process's transaction log,
and every landed commit is observed in the metrics and handed to ``on_committed`` (maintenance).

Election: the member assigned partition 0 of the first configured topic (with a topic pattern:
of the first matching topic, by name) is the coordinator (the consumer group guarantees exactly
one owner per generation). With a pattern the matching topics are listed again every
``kafka.metadata_max_age_ms``, and a cycle waits for every partition of them; while two processes
disagree about a new first topic, both may lead for a moment: the newer coordinator's producer
fences the older one, and the catalog's compare-and-swap refuses anything it commits late. When the
assignment moves, the old owner stops its coordinator and the new one starts, reading the control
topic from the position the last one committed. A rebalance that leaves the partition where it was
does not stop the coordinator (aiokafka's rebalances are eager: every member gives up everything
first); until the new assignment is known, the old one counts.

A coordinator that does not know it lost (paused, partitioned away) is fenced twice: its
control-topic producer shares the role's transactional id, so the new one's start fences its
sends; and its catalog commits meet the table's offsets inside the compare-and-swap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiokafka.errors import KafkaError, ProducerFenced, UnknownError
from pyiceberg.catalog import Catalog

from frazil.config import Config
from frazil.coordination.commit_state import TopicPartition
from frazil.coordination.coordinator import Coordinator
from frazil.coordination.dead_letters import DeadLetterSink
from frazil.coordination.mode import Mode, election_partition, for_config
from frazil.coordination.table_commit import table_committer
from frazil.errors import KafkaUnavailable, NotFound
from frazil.flow import retry
from frazil.iceberg.committer import CommitResult, Committer
from frazil.iceberg.index_store import IndexStore
from frazil.iceberg.mutations import KeyIndex
from frazil.kafka.copies import SourceCopies
from frazil.metrics import Metrics
from frazil.status import partitions, source_topics, table_names
from frazil.txlog import Journal

log = logging.getLogger(__name__)

FENCED_PAUSE_S = 5.0
ROLE_BACKOFF = retry.Backoff(1.0, 30.0)   # a coordinator role that lost Kafka starts again after these


class CoordinatorService:
    def __init__(self, cfg: Config, catalog: Catalog, assignment: Callable[[], set[TopicPartition]],
                 metrics: Metrics | None = None, *, journal: Journal | None = None, mode: Mode | None = None,
                 fence: bool = True, on_committed: Callable[[CommitResult], None] | None = None,
                 copies: SourceCopies | None = None) -> None:
        """``mode``: single or distributed (default: as the config says; single mode's worker
        shares its in-process channel, so the daemon passes the one it made). ``fence=False``
        only for the fault-injection test that shows what fencing prevents. ``copies``: the bad
        records this process's worker kept, which its dead-letter sink need not read back."""
        self._cfg, self._catalog, self._assignment, self._metrics = cfg, catalog, assignment, metrics
        self._journal, self._on_committed, self._fence, self._copies = journal, on_committed, fence, copies
        self._mode: Mode = mode if mode is not None else for_config(cfg)
        self._topics: list[str] = list(cfg.kafka.topics)          # with a pattern: listed every refresh
        self._partitions: frozenset[TopicPartition] = frozenset()  # of the topics, for distributed cycles
        self.leading = False   # this process runs the coordinator role now (merges run only here)
        self.cycles_landed = 0  # cycles the role finished in this process (resets the lost-Kafka clock)

    @property
    def _election(self) -> TopicPartition:
        return election_partition(tuple(self._topics)) if self._topics else ("", -1)

    def _leads(self) -> bool:
        return self._mode.leads(self._assignment(), self._election)

    def _keep_progress(self, progress: dict[TopicPartition, int]) -> str | None:
        """Blocking. Store the pipeline's watermark in its first table that exists (the declared
        ones in order, then those the records named); the table's name, or None when there is none."""
        cfg = self._cfg
        for name in table_names(self._catalog, cfg):
            if not self._catalog.table_exists(name):
                continue
            Committer(self._catalog, name, cfg.pipeline, max_attempts=cfg.max_commit_attempts).keep_progress(progress)
            return name
        return None

    async def _refresh(self, stop: asyncio.Event) -> None:
        """Distributed mode with a topic pattern: list the matching topics and their partitions
        again every ``metadata_max_age_ms`` (new topics join the cycles and the election)."""
        cfg = self._cfg.kafka
        while not stop.is_set():
            try:
                topics = await source_topics(cfg)
                self._partitions = frozenset(await partitions(cfg, topics))
                if topics != self._topics:
                    log.info("coordinator: source topics now %s", ", ".join(topics) or "none")
                self._topics = topics
            except (KafkaError, KafkaUnavailable, NotFound, OSError, LookupError) as exc:
                # a broker outage, or a topic deleted between the list and the describe
                if not self._partitions:
                    raise
                log.warning("coordinator: cannot list the source topics (%s: %s); keeping the last list",
                            type(exc).__name__, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), cfg.metadata_max_age_ms / 1000)

    async def run(self, stop: asyncio.Event) -> None:
        task: asyncio.Task[None] | None = None
        not_before = 0.0
        loop = asyncio.get_running_loop()
        refresh = None
        failing_since: float | None = None
        landed_at_failure = restarts = 0
        if self._mode.lists_partitions and self._cfg.kafka.topic_pattern:
            refresh = asyncio.create_task(self._refresh(stop))
        try:
            while not stop.is_set():
                if refresh is not None and refresh.done():
                    refresh.result()   # listing failed before any list was known: loud
                    refresh = None
                leader = self._leads()
                if leader and task is None and loop.time() >= not_before:
                    if self._mode.lists_partitions:
                        log.info("coordinator: this process owns %s[%d]; starting the coordinator", *self._election)
                    else:
                        log.info("coordinator: %s mode; coordinating in this process", self._mode.name)
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
                    except Exception as exc:
                        # Kafka went away under the role (a broker restart): start it again while this
                        # process leads, as a new coordinator would, taking over the open cycle. Bounded
                        # by outage_timeout_s from the first failure since the last landed cycle.
                        now = loop.time()
                        if not kafka_outage(exc) or (failing_since is not None
                                                     and now - failing_since > self._cfg.outage_timeout_s):
                            raise
                        if failing_since is None or self.cycles_landed > landed_at_failure:
                            failing_since, landed_at_failure, restarts = now, self.cycles_landed, 0
                        restarts += 1
                        pause = ROLE_BACKOFF.delay(restarts)
                        log.warning("coordinator: lost Kafka (%s: %s); stopping this coordinator and starting it "
                                    "again in %.0fs if this process still leads (failing for %.0fs of "
                                    "outage_timeout_s=%g); the new one finishes the open cycle", type(exc).__name__,
                                    exc, pause, now - failing_since, self._cfg.outage_timeout_s)
                        not_before = now + pause
                    task = None  # any other failure was raised above and stops the process, loudly
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
        finally:
            if refresh is not None:
                refresh.cancel()
            if task is not None:
                await _end(task)

    async def _lead(self) -> None:
        cfg = self._cfg
        mode = self._mode
        channel = mode.coordinator_channel(cfg)
        await channel.start()
        dead_letters = (DeadLetterSink(cfg.kafka, cfg.dead_letter_topic, cfg.pipeline, self._metrics,
                                       copies=self._copies)
                        if cfg.on_bad_record == "dead_letter" else None)
        indexes: dict[str, KeyIndex] = {}   # keyed tables' key indexes: checkpointed when the role ends
        store = IndexStore(cfg.txlog_dir / "key-index")
        try:
            if dead_letters is not None:
                await dead_letters.start()
            # the listed topics exist: we own one's partition
            if mode.lists_partitions and not cfg.kafka.topic_pattern:
                self._partitions = frozenset(await partitions(cfg.kafka, cfg.kafka.topics))
            committer = table_committer(self._catalog, cfg.pipeline, max_attempts=cfg.max_commit_attempts,
                                        journal=self._journal, log_dead_letters=mode.keeps_dead_letters,
                                        fence=self._fence, indexes=indexes, store=store)
            coordinator = Coordinator(channel, cfg.pipeline,
                                      mode.cycle_partitions(self._assignment, lambda: self._partitions), committer,
                                      timeout_s=cfg.coordination.commit_timeout_s, fence=self._fence,
                                      outage_timeout_s=cfg.outage_timeout_s, metrics=self._metrics,
                                      senders=mode.senders, dead_letters=dead_letters,
                                      journal=self._journal if mode.keeps_dead_letters else None,
                                      keep_progress=self._keep_progress)
            if self._metrics is not None:
                self._metrics.coordinator.set(1)
            self.leading = True
            requested = await coordinator.recover()
            while True:
                trigger = "requested before this coordinator started" if requested else \
                    await coordinator.wait_for_trigger(cfg.commit_interval_s)
                requested = False
                if trigger != "interval":
                    log.info("coordinator: starting a cycle early, %s", trigger)
                results = await coordinator.cycle()
                self.cycles_landed += 1
                for r in results:
                    if r.found:
                        log.info("coordinator: commit %s was already in %s as snapshot %s (landed by the coordinator "
                                 "that took this cycle over, or before a restart); not counted again", r.commit_id,
                                 r.table, r.snapshot_id)
                        continue
                    log.info("coordinator: commit %s landed in %s as snapshot %s with %d rows", r.commit_id, r.table,
                             r.snapshot_id, r.rows)
                    if self._metrics is not None and not r.already_committed:
                        self._metrics.commit_seconds.observe(r.seconds)
                    if self._on_committed is not None:
                        self._on_committed(r)
        finally:
            self.leading = False
            # off the loop: a process that stays a worker keeps its heartbeats while it is written
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(asyncio.to_thread(_checkpoint, store, indexes))
            if self._metrics is not None:
                self._metrics.coordinator.set(0)
            with contextlib.suppress(KafkaError):   # a fenced producer may refuse to close cleanly
                await channel.stop()
            if dead_letters is not None:
                await dead_letters.stop()


def kafka_outage(exc: BaseException) -> bool:
    """Whether a coordinator role's failure is Kafka being unreachable for now (a broker restart,
    a lost connection), which a new coordinator survives, rather than a fault of its own. The cause
    chain counts: aiokafka's transactional producer wraps a lost connection met while it looks up
    the transaction coordinator in a plain ``KafkaError`` ("Unexpected error during batch
    delivery") and its sender stops for good. A broker's UNKNOWN_SERVER_ERROR (aiokafka's
    ``UnknownError``, not retriable to aiokafka) counts too: a broker just restarted answered a
    transaction's end with it, and the producer's sender stopped the same way (the chaos run,
    seed 821346851). A new coordinator starts with new producers and takes the open cycle over,
    so a broker-side error costs a restart, bounded by ``outage_timeout_s``, not the process."""
    seen: BaseException | None = exc
    while seen is not None:
        if (isinstance(seen, (KafkaUnavailable, UnknownError))
                or (isinstance(seen, KafkaError) and bool(seen.retriable))):
            return True
        seen = seen.__cause__
    return False


def _checkpoint(store: IndexStore, indexes: dict[str, KeyIndex]) -> None:
    """Blocking, once, as the role ends: each key index written for the next start to read back
    (``iceberg/index_store.py``). A failure costs that start a build from the table: logged, not
    raised over the role's own end."""
    for table, index in indexes.items():
        began = time.monotonic()
        try:
            store.save(table, index)
        except Exception as exc:  # noqa: BLE001 - a checkpoint only saves time
            log.warning("table %s: the key index could not be checkpointed (%s: %s); the next start builds it from "
                        "the table", table, type(exc).__name__, exc)
            continue
        log.info("table %s: key index checkpointed at snapshot %s: %d keys, %.0f ms", table, index.snapshot_id,
                 len(index), 1000 * (time.monotonic() - began))


async def _end(task: asyncio.Task[None]) -> None:
    """Stop a coordinator task whose leadership is gone; being fenced on the way out is expected."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, ProducerFenced):
        await task
