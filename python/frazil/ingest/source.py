"""The Kafka side of ingestion: a consumer-group member whose positions come from the table."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError, KafkaTimeoutError, NoOffsetForPartitionError, OffsetOutOfRangeError
from aiokafka.structs import OffsetAndMetadata

from frazil.config import KafkaConfig
from frazil.errors import KafkaUnavailable, RetentionGapError, TopicMismatchError
from frazil.flow import retry
from frazil.iceberg import offsets
from frazil.iceberg.offsets import TopicPartition as TP
from frazil.kafka import fetch, topic_ids
from frazil.kafka.clients import connect, options, stop_client
from frazil.kafka.fetch import Chunk

log = logging.getLogger(__name__)
_T = TypeVar("_T")

END_OFFSETS_BACKOFF = retry.Backoff(1.0, 5.0)   # a broker outage across a rebalance

OnRevoked = Callable[[set[TP]], Awaitable[None]]
OnAssigned = Callable[[set[TP]], Awaitable[Mapping[TP, int]]]
OnPositioned = Callable[[set[TP], Mapping[TP, int]], None]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._source._revoked({(tp.topic, tp.partition) for tp in revoked})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._source._assigned({(tp.topic, tp.partition) for tp in assigned})


class KafkaSource:
    """Consumes the pipeline's topics. On assignment it asks ``on_assigned`` where each partition
    must resume (the table's stored offsets, rule 2) and seeks there; partitions the table has
    never seen start at ``auto_offset_reset``. Group offsets are only a low watermark for lag.
    Fetches come back raw: one :class:`~frazil.kafka.fetch.Chunk` per partition fetch, its
    records read natively (``kafka/fetch.py``).
    """

    def __init__(self, cfg: KafkaConfig, *, outage_timeout_s: float = 900.0,
                 on_lost: Callable[[int], None] | None = None) -> None:
        """``on_lost``: told how many records a retention gap skipped (``on_retention_gap = "skip"``)."""
        self._cfg = cfg
        self._on_lost = on_lost
        self._outage_timeout_s = outage_timeout_s   # how long a broker outage while positioning is waited out
        self._on_assigned: OnAssigned | None = None
        self._on_revoked: OnRevoked | None = None
        self._on_positioned: OnPositioned | None = None
        fetch.install()
        self._consumer = AIOKafkaConsumer(
            **options(cfg),
            group_id=cfg.group_id,
            client_id=cfg.client_id,
            enable_auto_commit=False,
            # every partition is positioned here (the table's offset, or the reset policy for one it
            # has never seen); a position that falls out of the log is an error to look at, never a
            # silent jump to its start (records lost to retention) or back (a recreated topic)
            auto_offset_reset="none",
            isolation_level="read_committed",
            key_deserializer=fetch.RAW,
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            max_partition_fetch_bytes=cfg.max_partition_fetch_bytes,
            fetch_max_bytes=cfg.fetch_max_bytes,
            metadata_max_age_ms=cfg.metadata_max_age_ms,   # how soon a new topic matching topic_pattern is seen
        )
        self.assignment: set[TP] = set()
        # where this source positioned each assigned partition (the table's offset, a seek back):
        # a fetch refused below it is aiokafka's own, made from the group's offset before that
        self._sought: dict[TP, int] = {}
        self.rebalancing = False   # between a revocation and the next assignment
        self._before: set[TP] = set()
        self.generation = -1   # the consumer group's generation of the current assignment
        self.joined = False    # an assignment (maybe empty) was received and positioned: the process is serving
        # aiokafka logs and swallows exceptions raised in a rebalance listener; keep the first
        # one and raise it from poll() so the pipeline stops instead of running unpositioned.
        self._failure: BaseException | None = None
        self.paused = False
        self._epoch = 0   # moves with every positioning and revocation (``_out_of_log``)
        self._first_ends: dict[TP, int] = {}   # auto_offset_reset = "latest": where new partitions first started

    def listen(self, *, on_assigned: OnAssigned, on_positioned: OnPositioned, on_revoked: OnRevoked) -> None:
        """Who is told of rebalances: ``on_assigned`` says where each assigned partition resumes
        (the tables' offsets), ``on_positioned`` is told once they were sought there (records of
        them may be taken from then on), ``on_revoked`` before partitions go. Before :meth:`start`."""
        self._on_assigned, self._on_positioned, self._on_revoked = on_assigned, on_positioned, on_revoked

    async def start(self) -> None:
        if self._on_assigned is None:
            raise RuntimeError("KafkaSource.listen() comes before start(): rebalances need their handlers")
        await connect(self._consumer, self._cfg)
        cfg = self._cfg
        if cfg.topic_pattern:
            # aiokafka matches from the start only: anchor the end, and never take an excluded topic
            excluded = "".join(f"(?!{re.escape(t)}\\Z)" for t in cfg.exclude_topics)
            self._consumer.subscribe(pattern=f"{excluded}(?:{cfg.topic_pattern})\\Z", listener=_Listener(self))
            log.info("consuming every topic matching %r (new ones within %d ms) as group %s from %s",
                     cfg.topic_pattern, cfg.metadata_max_age_ms, cfg.group_id, cfg.bootstrap_servers)
            return
        self._consumer.subscribe(list(cfg.topics), listener=_Listener(self))
        log.info("consuming %s as group %s from %s", ", ".join(cfg.topics), cfg.group_id, cfg.bootstrap_servers)

    async def stop(self) -> None:
        await stop_client(self._consumer)

    async def poll(self, timeout_ms: int) -> dict[TP, list[Chunk]]:
        """The partition fetches that arrived, each whole (usually one chunk per partition)."""
        if self._failure is not None:
            raise self._failure
        try:
            batches = await self._consumer.getmany(timeout_ms=timeout_ms)
        except OffsetOutOfRangeError as exc:   # {partition: the position the broker refused}
            refused = {(tp.topic, tp.partition): offset for tp, offset in exc.args[0].items()}
            mine = {tp: o for tp, o in refused.items() if tp in self._sought and o >= self._sought[tp]}
            if refused.keys() - mine.keys():   # fetched before this source positioned them: stale
                log.debug("ignored: out-of-range fetches from before the partitions were positioned: %s", refused)
            if mine:
                await self._out_of_log(mine)
            return {}
        except NoOffsetForPartitionError as exc:
            # asked by aiokafka on assignment, before this source positions the partition: stale
            log.debug("ignored: %s (every assigned partition is positioned from the table)", exc)
            return {}
        return {(tp.topic, tp.partition): chunks for tp, chunks in batches.items() if chunks}

    async def _out_of_log(self, refused: dict[TP, int]) -> None:
        """The broker refused to fetch from positions outside the log: below its start (records
        deleted by retention before they were read) or past its end (the topic was recreated)."""
        epoch = self._epoch
        stored = await self._within_log(set(refused), refused)
        if epoch != self._epoch:
            # positioned again meanwhile (a rewind, a rebalance; the bounds may have been waited for
            # through a broker outage): seeking back to the refused offsets now would skip what lies
            # between the new position and them
            log.info("out-of-range fetches of %s dropped: the partitions were positioned again meanwhile",
                     ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(refused.items())))
            return
        for tp, offset in stored.items():
            if tp not in self._sought:   # revoked while the log's bounds were asked
                continue
            if offset == refused[tp]:   # in the log after all (a leader moved meanwhile): fetched again from there
                log.info("%s[%d]: offset %d was out of range, and is within the log now; fetching it again", *tp,
                         offset)
            self._consumer.seek(TopicPartition(*tp), offset)
            self._sought[tp] = offset

    def highwaters(self) -> dict[TP, int]:
        """Each assigned partition's high watermark as of its last fetch (partitions not fetched yet are left out)."""
        out: dict[TP, int] = {}
        if self.rebalancing:
            return out
        for tp in self._consumer.assignment():   # aiokafka's own view: asking about any other partition asserts
            mark = self._consumer.highwater(tp)
            if mark is not None and (tp.topic, tp.partition) in self.assignment:
                out[(tp.topic, tp.partition)] = mark
        return out

    def pause(self) -> None:
        """Stop fetching every assigned partition; polling and heartbeats go on."""
        self.paused = True
        self._consumer.pause(*(TopicPartition(*tp) for tp in self.assignment))

    def resume(self) -> None:
        self.paused = False
        self._consumer.resume(*(TopicPartition(*tp) for tp in self.assignment))

    def seek_back(self, tp: TP, offset: int) -> None:
        """Fetch ``tp`` again from ``offset`` (records that were fetched but not taken)."""
        self._consumer.seek(TopicPartition(*tp), offset)
        self._sought[tp] = offset

    async def commit_low_watermark(self, offsets: Mapping[TP, int]) -> None:
        """Commit group offsets no further than the table (they may lag it, never lead it)."""
        owned = {TopicPartition(t, p): OffsetAndMetadata(o, "") for (t, p), o in offsets.items()
                 if (t, p) in self.assignment}
        if not owned:
            return
        try:
            await self._consumer.commit(owned)
        except Exception as exc:  # noqa: BLE001 - a lagging low watermark is harmless; say so and go on
            log.warning("could not commit consumer-group offsets (only used for lag; the table holds the truth): %s",
                        exc)

    def settled_assignment(self) -> set[TP]:
        """The assignment, or during a rebalance the one before it (what this process held last)."""
        return set(self._before if self.rebalancing else self.assignment)

    async def _revoked(self, tps: set[TP]) -> None:
        self._epoch += 1
        if not self.rebalancing:
            self._before, self.rebalancing = set(self.assignment), True
        self.assignment -= tps
        for tp in tps:
            self._sought.pop(tp, None)
        assert self._on_revoked is not None
        try:
            await self._on_revoked(tps)
        except BaseException as exc:
            self._failure = self._failure or exc
            raise

    async def _assigned(self, tps: set[TP]) -> None:
        self.assignment = set(tps)
        self._sought = {}
        self.rebalancing = False
        # aiokafka sets it from the JoinGroup response before calling the listener; it has no
        # public accessor. Workers report it so the coordinator can drop a zombie's replies.
        self.generation = int(getattr(self._consumer._coordinator, "generation", -1))
        log.info("assigned %d partition(s) in generation %d: %s", len(tps), self.generation,
                 ", ".join(f"{t}[{p}]" for t, p in sorted(tps)[:12]) + (" ..." if len(tps) > 12 else ""))
        assert self._on_assigned is not None and self._on_positioned is not None
        try:
            stored = await self._on_assigned(tps)
            await self.seek(tps, stored)
            if self.paused:  # a pause outlives a rebalance
                self._consumer.pause(*(TopicPartition(*tp) for tp in tps))
            # Only now may records of these partitions be taken: anything fetched before the seek
            # came from the group's committed position, which is not where the table needs us.
            self._on_positioned(tps, stored)
            self.joined = True
        except BaseException as exc:
            self._failure = self._failure or exc
            raise

    async def seek(self, tps: set[TP], stored: Mapping[TP, int]) -> None:
        """Position ``tps`` at the table's offsets; partitions it has never seen at the reset policy.
        Callers take no record of ``tps`` until this returns, and mark them positioned right after
        it, with no await between: every seek is made after the last await here. A partition
        sought before an await could be fetched from its new position meanwhile, and the loop,
        which drops fetches of partitions not positioned yet, would drop those records while the
        consumer's position moved past them: for a partition new to the tables, whose start is the
        first offset taken, they would be skipped without a word (found by the chaos run on a
        three-broker cluster, where the new partitions' log starts took longer to read)."""
        stored = await self._within_log(tps, stored)
        fresh = [tp for tp in sorted(tps) if tp not in stored]
        earliest = self._cfg.auto_offset_reset == "earliest"
        edge = "start" if earliest else "end"
        # "latest": a new partition read again (a rewind, a rebalance back) before any table holds it
        # starts where it first started in this process, not at the end it has now, which would skip
        # what was read meanwhile and not landed
        starts = {} if earliest else {tp: self._first_ends[tp] for tp in fresh if tp in self._first_ends}
        unknown = [TopicPartition(*tp) for tp in fresh if tp not in starts]
        if unknown:
            ask = self._consumer.beginning_offsets if earliest else self._consumer.end_offsets
            found = await self._retried(lambda: ask(unknown), f"could not read where {len(unknown)} new "
                                        f"partition(s) {edge}")
            starts.update({(tp.topic, tp.partition): offset for tp, offset in found.items()})
            if not earliest:
                self._first_ends.update(starts)
        missing = [f"{t}[{p}]" for t, p in fresh if (t, p) not in starts]
        if missing:
            raise KafkaUnavailable(f"the broker did not say where {', '.join(missing)} {edge}; nothing of them "
                                   "was read")
        self._epoch += 1
        for tp in sorted(tps):   # no await from here on (above)
            offset = stored[tp] if tp in stored else starts[tp]
            self._consumer.seek(TopicPartition(*tp), offset)
            self._sought[tp] = offset
        log.info("positioned %d partition(s): %s from the table, %d new from %s", len(tps),
                 ", ".join(f"{t}[{p}]@{stored[(t, p)]}" for t, p in sorted(tps) if (t, p) in stored) or "none",
                 len(fresh), self._cfg.auto_offset_reset)

    async def _within_log(self, tps: set[TP], stored: Mapping[TP, int]) -> dict[TP, int]:
        """Where each of ``tps`` with a ``stored`` position reads from: that position, or the log's
        start when retention deleted the records from there before they were read and
        ``on_retention_gap = "skip"`` (the range logged and counted); RetentionGapError with
        ``"stop"``. A position past the end of its partition means the topic is not the one the
        table was fed from (deleted and recreated, or truncated): reading on would silently skip."""
        known = [TopicPartition(*tp) for tp in sorted(tps) if tp in stored]
        if not known:
            return {}
        ends = await self._end_offsets(known)
        beyond = {(tp.topic, tp.partition): end for tp, end in ends.items() if stored[(tp.topic, tp.partition)] > end}
        if beyond:
            detail = ", ".join(f"{t}[{p}] table={stored[(t, p)]} log end={end}"
                               for (t, p), end in sorted(beyond.items()))
            raise TopicMismatchError(
                f"the table's stored offsets are past the end of the topic: {detail}. The topic was probably "
                "deleted and recreated. Nothing past the table's offsets there was committed. "
                + offsets.RECREATED_FIX.format(pipeline="<pipeline>")
            )
        starts = await self._retried(lambda: self._consumer.beginning_offsets(known),
                                     f"could not read the log starts of {len(known)} assigned partition(s)")
        gaps = {(tp.topic, tp.partition): start for tp, start in starts.items()
                if stored[(tp.topic, tp.partition)] < start}
        out = {tp: stored[tp] for tp in stored if tp in tps}
        if not gaps:
            return out
        detail = ", ".join(f"{t}[{p}] offsets {stored[(t, p)]} to {start - 1} ({start - stored[(t, p)]} record(s))"
                           for (t, p), start in sorted(gaps.items()))
        if self._cfg.on_retention_gap == "stop":
            raise RetentionGapError(
                f"records were deleted by the topic's retention before frazil read them: {detail}. frazil stopped "
                "there: nothing past the table's offsets of those partitions was committed. They cannot be read "
                "from Kafka any more; to go on from the log's start without them, record it in the table "
                "(frazil offsets --reset TOPIC:PARTITION=START --reason ...) or set "
                "kafka.on_retention_gap = \"skip\" (each range is logged and counted in "
                "frazil_records_lost_to_retention_total); and give the topic a longer retention.ms than frazil "
                "can be stopped or behind.")
        log.error("SKIPPING records deleted by the topic's retention before frazil read them "
                  "(kafka.on_retention_gap = \"skip\"): %s; reading on from the log's start", detail)
        lost = 0
        for tp, start in gaps.items():
            lost += start - stored[tp]
            out[tp] = start
        if self._on_lost is not None:
            self._on_lost(lost)
        return out

    async def _end_offsets(self, known: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The log ends of ``known``. A broker outage across the rebalance (the request timed out,
        or failed with a retriable error) is waited out up to ``outage_timeout_s``, as a commit's
        catalog outage is: the partitions take no record until they are positioned, and a process
        that had been working does not stop for a broker restart (the chaos run: a broker down
        twice in 40 s timed the call out and the worker exited). Past the bound, the error stops
        the process (exit status 3)."""
        return await self._retried(lambda: self._consumer.end_offsets(known),
                                   f"could not read the log ends of {len(known)} assigned partition(s)")

    async def read_topic_ids(self, topics: set[str]) -> dict[str, str] | None:
        """The id each of ``topics`` has now (``kafka/topic_ids.py``; a topic that does not exist is
        left out); None when the brokers give none. A broker outage is waited out, as for the log's
        bounds."""
        return await self._retried(lambda: topic_ids.fetch(self._consumer._client, topics),
                                   f"could not read the ids of {len(topics)} topic(s)")

    async def _retried(self, ask: Callable[[], Awaitable[_T]], what: str) -> _T:
        def retriable(exc: BaseException) -> bool:
            return isinstance(exc, KafkaError) and bool(exc.retriable or isinstance(exc, KafkaTimeoutError))

        found: _T = await retry.wait_out(
            ask, what=what, timeout_s=self._outage_timeout_s, backoff=END_OFFSETS_BACKOFF, retriable=retriable,
            expired=lambda exc, failing: exc)
        return found
