"""The dead-letter topic (``on_bad_record = "dead_letter"``): bad records go there, exactly once.

A worker does not send a bad record anywhere: it reports it (offset, field, reason) with the
range of the table it was bad for, and the range counts as consumed in that table's commit like
any other. Once the commit has landed, the coordinator role reads each bad record again from the
source topic and sends it to the dead-letter topic with its own key, value and headers, plus
headers that say why (``frazil.*``, docs/operations.md).

Exactly once, across crashes and coordinator changes: the records of one commit go out in one
Kafka transaction that also commits, for a consumer group of the table's own
(``frazil-<pipeline>-dead-letters-<table>``), each source partition's offset past its last bad
record. That group offset is the dead-letter position: whoever finishes a landed commit again
(the next coordinator taking over the cycle, or this process settling its transaction log at
start) sends only the records at or past it. Records below the table's offsets are never read
again, so nothing is sent for them twice; records of a commit that did not land are reported
again by the cycle that lands them. The producer's transactional id is the pipeline's, so a
coordinator that lost the role is fenced and cannot send.

A group's offsets expire (the broker's ``offsets.retention.minutes``, 7 days by default), so they
are not the only record: before a cycle commits tables with bad records, the coordinator reads
where the dead-letter topic ends (:meth:`DeadLetterSink.anchor`), and that goes into the same
catalog commit as the data and the offsets (``frazil.dead-letters-from.<pipeline>``). The
commit's letters can only be past it, since they are sent after it lands. Whoever finishes a
commit again reads the dead-letter topic from there and skips every letter it finds there (by
pipeline, table and source position), whatever the group still says. That read is bounded by
what was sent since the commit; a dead-letter topic whose retention deleted records past the
anchor cannot be checked, and the coordinator stops with the range rather than guess.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from frazil import faults
from frazil.config import KafkaConfig
from frazil.coordination.channel import MAX_EVENT_BYTES, ensure_topic
from frazil.errors import FrazilError, KafkaUnavailable
from frazil.events.payloads import DeadLetter
from frazil.flow import retry
from frazil.kafka import fetch
from frazil.kafka.clients import close_quietly, connect, options
from frazil.kafka.clients import delivered as all_delivered
from frazil.kafka.copies import SourceCopies
from frazil.kafka.fetch import Record
from frazil.metrics import Metrics

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 30.0   # reading one bad record back from the source
SEEK_GAP = 500           # bad records further apart than this are read with a seek each
POSITION_ATTEMPTS = 5
POSITION_BACKOFF = retry.Backoff(0.5, 4.0)

HEADER = "frazil."
# letters go out in record batches built here, a microsecond each where a send() per record costs
# about 150 us; a batch stays well inside a broker's default message.max.bytes (1 MiB)
BATCH_BYTES = 512 * 1024


def group_of(pipeline: str, table: str) -> str:
    """The consumer group whose offsets say how far a table's bad records have been sent."""
    return f"frazil-{pipeline}-dead-letters-{table}"


def headers_of(letter: DeadLetter, *, pipeline: str, table: str, commit_id: str, timestamp_ms: int | None,
               original: Sequence[tuple[str, bytes | None]] = (), missing: str = "") -> list[tuple[str, bytes | None]]:
    """The dead-letter record's headers: the record's own, then frazil's (pure)."""
    ours = [("error", letter.reason), ("error.field", letter.field), ("source.topic", letter.topic),
            ("source.partition", str(letter.partition)), ("source.offset", str(letter.offset)),
            ("source.timestamp", "" if timestamp_ms is None else str(timestamp_ms)), ("pipeline", pipeline),
            ("table", table if letter.meant_for is None else letter.meant_for), ("commit_id", commit_id)]
    if letter.meant_for is not None:
        ours.append(("carried_by", table))   # routing found it bad: the commit of this table counted it
    if missing:
        ours.append(("source.missing", missing))
    return [*original, *((HEADER + k, v.encode()) for k, v in ours)]


def still_to_send(letters: Sequence[DeadLetter], sent: dict[tuple[str, int], int]) -> list[DeadLetter]:
    """The letters at or past each source partition's dead-letter position (pure)."""
    return [d for d in letters if d.offset >= sent.get((d.topic, d.partition), -1)]


def encode_anchor(topic: str, ends: dict[int, int]) -> str:
    """Where the dead-letter topic ends, as kept with a commit: ``{"topic": t, "from": {"0": 12}}``."""
    return json.dumps({"topic": topic, "from": {str(p): o for p, o in sorted(ends.items())}}, separators=(",", ":"))


def decode_anchor(text: str) -> tuple[str, dict[int, int]] | None:
    """The dead-letter topic and each partition's offset an anchor names; None: no anchor (a commit
    made before anchors were kept, or one that does not read)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        return str(data["topic"]), {int(p): int(o) for p, o in data["from"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("a dead-letter anchor that does not read: %r", text[:200])
        return None


def identity_of(headers: Sequence[tuple[str, bytes | None]], pipeline: str) -> tuple[str, tuple[str, int, int]] | None:
    """The table whose commit counted a dead-letter record and the source position it came from,
    from its ``frazil.*`` headers; None: not one of ``pipeline``'s (pure)."""
    # frazil's block starts at its last "frazil.error": headers before it are the record's own,
    # which may carry another pipeline's frazil.* headers (a dead-letter topic read as a source)
    first = max((i for i, (k, _) in enumerate(headers) if k == HEADER + "error"), default=len(headers))
    ours = {k[len(HEADER):]: (v or b"").decode(errors="replace") for k, v in headers[first:] if k.startswith(HEADER)}
    if ours.get("pipeline") != pipeline:
        return None
    try:
        where = (ours["source.topic"], int(ours["source.partition"]), int(ours["source.offset"]))
    except (KeyError, ValueError):
        return None
    return ours.get("carried_by") or ours.get("table", ""), where


class _Batches:
    """Records for one topic gathered into a record batch per partition, each sent when full. A
    record goes where the producer's own partitioner would put it: by its key, or (no key) to
    the partition of the batch being filled."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, partitions: list[int]) -> None:
        self._producer, self._topic, self._partitions = producer, topic, partitions
        self._by_key = DefaultPartitioner()
        self._open: dict[int, Any] = {}
        self._keyless = random.choice(partitions)
        self._sent: list[asyncio.Future[Any]] = []

    async def add(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> None:
        partition = self._keyless if key is None else self._by_key(key, self._partitions, self._partitions)
        batch = self._open.get(partition)
        if batch is None:
            batch = self._open[partition] = self._producer.create_batch()
        if batch.append(timestamp=None, key=key, value=value, headers=headers) is None:   # full
            self._sent.append(await self._producer.send_batch(batch, self._topic, partition=partition))
            batch = self._open[partition] = self._producer.create_batch()
            batch.append(timestamp=None, key=key, value=value, headers=headers)   # a first record always fits

    async def flush(self) -> list[asyncio.Future[Any]]:
        """Send what is left; every batch's delivery, to be awaited."""
        for partition, batch in self._open.items():
            if batch.record_count():
                self._sent.append(await self._producer.send_batch(batch, self._topic, partition=partition))
        self._open.clear()
        return self._sent


class DeadLetterSink:
    def __init__(self, kafka: KafkaConfig | str, topic: str, pipeline: str, metrics: Metrics | None = None, *,
                 copies: SourceCopies | None = None) -> None:
        """``copies``: bad records this process's workers kept as they fetched them (not read back)."""
        self._kafka, self._topic, self._pipeline, self._metrics = kafka, topic, pipeline, metrics
        self._copies = copies
        # the records' size was fine for the source topic; the broker has the last word on the copy
        self._producer = AIOKafkaProducer(**options(kafka), transactional_id=f"frazil-{pipeline}-dead-letters",
                                          enable_idempotence=True, max_request_size=MAX_EVENT_BYTES,
                                          max_batch_size=BATCH_BYTES)
        # raw fetches: the source's records are read as the pipeline reads them (every codec)
        fetch.install()
        self._reader = AIOKafkaConsumer(**options(kafka), enable_auto_commit=False, key_deserializer=fetch.RAW,
                                        isolation_level="read_committed", auto_offset_reset="earliest")
        self._admin = AIOKafkaAdminClient(**options(kafka))
        # the dead-letter topic's high watermark (read_uncommitted), for reading it to its very end
        self._watermarks = AIOKafkaConsumer(**options(kafka), enable_auto_commit=False)

    async def start(self) -> None:
        """Create the topic if it is missing; the producer's start fences an older coordinator's
        and aborts what it left open."""
        try:   # the clients exist from __init__: closed whatever fails here
            await ensure_topic(self._kafka, self._topic, "dead-letter")
            await connect(self._admin, self._kafka)
            await connect(self._producer, self._kafka)
            await connect(self._reader, self._kafka)
            await connect(self._watermarks, self._kafka)
        except BaseException:
            await close_quietly(self._producer, self._reader, self._watermarks, self._admin)
            raise

    async def stop(self) -> None:
        for close in (self._producer.stop, self._reader.stop, self._watermarks.stop, self._admin.close):
            try:
                await close()
            except Exception as exc:  # noqa: BLE001 - a fenced producer may refuse to close cleanly
                log.debug("dead-letter sink: %s: %s", close.__qualname__, exc)

    async def anchor(self) -> str:
        """Where the dead-letter topic ends now (read_committed), to keep with a commit whose bad
        records are sent after it lands (:func:`encode_anchor`)."""
        async for attempt in retry.attempts_async(POSITION_ATTEMPTS, POSITION_BACKOFF):
            try:
                tps = [TopicPartition(self._topic, p) for p in sorted(await self._producer.partitions_for(self._topic))]
                ends = await self._reader.end_offsets(tps)
                return encode_anchor(self._topic, {tp.partition: o for tp, o in ends.items()})
            except KafkaError as exc:
                if attempt == POSITION_ATTEMPTS or not exc.retriable:
                    raise KafkaUnavailable(f"cannot read where the dead-letter topic {self._topic} ends "
                                           f"({type(exc).__name__}: {exc}) after {attempt} tries; nothing was "
                                           "committed") from exc
                log.warning("dead-letter topic %s: cannot read its end (%s: %s); try %d/%d", self._topic,
                            type(exc).__name__, exc, attempt, POSITION_ATTEMPTS)
        raise AssertionError("unreachable")

    async def send(self, commit_id: str, table: str, letters: Sequence[DeadLetter], *, again: bool = False,
                   since: str = "") -> int:
        """After ``commit_id`` landed in ``table``: send its bad records that are not sent yet, in
        one transaction with the new dead-letter positions. Returns how many were sent. ``again``:
        the commit may have been finished before (a restart, a takeover); its letters found in the
        dead-letter topic past ``since`` (the anchor kept with the commit) are not sent again."""
        group = group_of(self._pipeline, table)
        sent = await self._positions(group, {TopicPartition(d.topic, d.partition) for d in letters})
        todo = still_to_send(letters, sent)
        if again and todo:
            there = await self._sent_since(commit_id, table, since)
            if there is not None:
                found = [d for d in todo if (d.topic, d.partition, d.offset) in there]
                if found:
                    log.warning("commit %s: %d of its %d bad record(s) for %s are in %s already (past where the topic "
                                "stood before the commit) although the dead-letter position did not say so (expired "
                                "group offsets?); not sent again", commit_id, len(found), len(todo), table, self._topic)
                    todo = [d for d in todo if (d.topic, d.partition, d.offset) not in there]
        if not todo:
            if letters:
                log.info("commit %s: the %d bad record(s) of %s are in %s already", commit_id, len(letters), table,
                         self._topic)
            return 0
        started = time.monotonic()
        originals = self._copies.take((d.topic, d.partition, d.offset) for d in todo) if self._copies else {}
        kept = len(originals)
        originals.update(await self._read_back([d for d in todo if (d.topic, d.partition, d.offset) not in originals]))
        ends: dict[TopicPartition, int] = {}
        async with self._producer.transaction():
            batches = _Batches(self._producer, self._topic, sorted(await self._producer.partitions_for(self._topic)))
            for letter in todo:
                record = originals.get((letter.topic, letter.partition, letter.offset))
                missing = "" if record is not None else ("the source no longer holds this record (retention or "
                                                         "compaction): key and value are empty")
                if missing:
                    log.warning("commit %s: %s[%d]@%d is gone from the source; its dead letter carries only the "
                                "error", commit_id, letter.topic, letter.partition, letter.offset)
                await batches.add(record.key if record else None, record.value if record else None,
                                  headers_of(letter, pipeline=self._pipeline, table=table, commit_id=commit_id,
                                             timestamp_ms=record.timestamp if record else None,
                                             original=list(record.headers) if record else (), missing=missing))
                tp = TopicPartition(letter.topic, letter.partition)
                ends[tp] = max(ends.get(tp, 0), letter.offset + 1)
            # every letter acknowledged before the position moves: aiokafka would commit the
            # transaction even if a batch of it failed (too large, no leader), losing those letters
            await all_delivered(await batches.flush())
            await self._producer.send_offsets_to_transaction(ends, group)
            faults.hit("dead_letter.before_commit", table)
        if self._metrics is not None:
            self._metrics.dead_lettered.inc(len(todo))
        log.warning("commit %s: sent %d bad record(s) of %s to %s in %.0f ms (%d read back from the source; first: "
                    "%s[%d]@%d, field %r: %s)", commit_id, len(todo), table, self._topic,
                    1000 * (time.monotonic() - started), len(todo) - kept, todo[0].topic,
                    todo[0].partition, todo[0].offset, todo[0].field, todo[0].reason)
        return len(todo)

    async def _sent_since(self, commit_id: str, table: str, since: str) -> set[tuple[str, int, int]] | None:
        """The source positions of ``table``'s letters in the dead-letter topic past the anchor
        ``since`` (read_committed); None: no anchor to look from (a commit from before anchors, or
        one kept for another dead-letter topic): the group's position is all there is."""
        anchor = decode_anchor(since)
        if anchor is None or anchor[0] != self._topic:
            log.warning("commit %s: no record of where %s stood before it%s; its bad records are checked against "
                        "the dead-letter position only", commit_id, self._topic,
                        f" (it kept one of {anchor[0]})" if anchor else "")
            return None
        start = anchor[1]
        try:
            await self._producer.client.force_metadata_update()   # partitions added since this process started
            tps = [TopicPartition(self._topic, p) for p in sorted(await self._producer.partitions_for(self._topic))]
            firsts = await self._reader.beginning_offsets(tps)
            # to the high watermark, not the read_committed end: a letter of ours committed behind a
            # transaction still open on a shared topic is readable only once that one ends
            ends = await self._watermarks.end_offsets(tps)
        except KafkaError as exc:
            raise KafkaUnavailable(f"commit {commit_id}: cannot read {self._topic}'s offsets to find its bad records "
                                   f"({type(exc).__name__}: {exc}); nothing was sent") from exc
        for tp in tps:
            if firsts[tp] > start.get(tp.partition, 0):
                raise FrazilError(
                    f"commit {commit_id} to {table}: its bad records went to {self._topic}[{tp.partition}] at or past "
                    f"offset {start.get(tp.partition, 0)}, but that topic's retention deleted records up to "
                    f"{firsts[tp]}, so whether they were sent cannot be told (the pipeline stopped between sending "
                    "them and noting it, and stayed down longer than the dead-letter topic's retention.ms). Nothing "
                    f"was sent, and frazil does not guess: look in {self._topic} for header frazil.commit_id = "
                    f"{commit_id}. Give the dead-letter topic a retention.ms longer than any stop")
        todo = {tp: start.get(tp.partition, 0) for tp in tps if ends[tp] > start.get(tp.partition, 0)}
        there: set[tuple[str, int, int]] = set()
        if not todo:
            return there
        started = time.monotonic()
        self._reader.assign(list(todo))
        try:
            for tp, offset in todo.items():
                self._reader.seek(tp, offset)
            deadline, moved = time.monotonic() + FETCH_TIMEOUT_S, -1
            while True:
                positions = {tp: await self._reader.position(tp) for tp in todo}
                if all(positions[tp] >= ends[tp] for tp in todo):
                    break
                if sum(positions.values()) > moved:   # control batches and aborted records move it too
                    deadline, moved = time.monotonic() + FETCH_TIMEOUT_S, sum(positions.values())
                elif time.monotonic() > deadline:
                    raise KafkaUnavailable(f"commit {commit_id}: cannot read {self._topic} to its end (at {positions}, "
                                           f"end {ends}) to find its bad records within {FETCH_TIMEOUT_S:g}s (a "
                                           "transaction of another producer open on it?); nothing was sent")
                for got in (await self._reader.getmany(*todo, timeout_ms=500)).values():
                    for chunk in got:
                        for record in chunk.records():
                            mine = identity_of(record.headers, self._pipeline)
                            if mine is not None and mine[0] == table:
                                there.add(mine[1])
        finally:
            self._reader.unsubscribe()   # no fetching in the background for partitions nobody reads
        log.info("commit %s: read %s from where it stood before the commit in %.0f ms: %d bad record(s) of %s there",
                 commit_id, self._topic, 1000 * (time.monotonic() - started), len(there), table)
        return there

    async def _positions(self, group: str, tps: set[TopicPartition]) -> dict[tuple[str, int], int]:
        """The group's dead-letter position of each of ``tps`` (absent: none sent yet). Asked for by
        partition: asked for everything, a broker whose group coordinator is loading or moving
        answers with an empty list, which would read as "nothing sent" and send it all again."""
        async for attempt in retry.attempts_async(POSITION_ATTEMPTS, POSITION_BACKOFF):
            try:
                committed = await self._admin.list_consumer_group_offsets(group, partitions=sorted(tps))
            except KafkaError as exc:
                if not exc.retriable:
                    raise FrazilError(f"cannot read the dead-letter position of {group} ({type(exc).__name__}: "
                                      f"{exc}); nothing was sent") from exc
                why = f"{type(exc).__name__}: {exc}"
            else:
                missing = tps - set(committed)
                if not missing:
                    return {(tp.topic, tp.partition): meta.offset for tp, meta in committed.items() if meta.offset >= 0}
                # the group's coordinator is loading or moving (a broker restart): ask again
                why = f"the broker did not say the position for {sorted(missing)[:3]}"
            if attempt == POSITION_ATTEMPTS:
                # retriable: the coordinator role stops and starts again (service.py), still sending nothing
                raise KafkaUnavailable(f"cannot read the dead-letter position of {group} ({why}) after "
                                       f"{POSITION_ATTEMPTS} tries; nothing was sent")
            log.warning("dead-letter position of %s: %s; try %d/%d", group, why, attempt, POSITION_ATTEMPTS)
        raise AssertionError("unreachable")

    async def _read_back(self, letters: Sequence[DeadLetter]) -> dict[tuple[str, int, int], Record]:
        """The bad records themselves, from the source (a seek per run of nearby offsets)."""
        wanted: dict[TopicPartition, list[int]] = defaultdict(list)
        for d in letters:
            wanted[TopicPartition(d.topic, d.partition)].append(d.offset)
        keys = {(d.topic, d.partition, d.offset) for d in letters}
        found: dict[tuple[str, int, int], Record] = {}
        for tp, offsets in sorted(wanted.items()):
            offsets.sort()
            self._reader.assign([tp])
            i = 0
            while i < len(offsets):
                self._reader.seek(tp, offsets[i])
                deadline = time.monotonic() + FETCH_TIMEOUT_S
                while i < len(offsets):
                    chunks = (await self._reader.getmany(tp, timeout_ms=500)).get(tp, [])
                    if not chunks:
                        if time.monotonic() > deadline:
                            first = (await self._reader.beginning_offsets([tp]))[tp]
                            if offsets[i] >= first:
                                raise FrazilError(f"cannot read {tp.topic}[{tp.partition}]@{offsets[i]} back from the "
                                                  f"source within {FETCH_TIMEOUT_S:g}s to send it to the dead-letter "
                                                  "topic; nothing was sent (the next coordinator tries again)")
                            while i < len(offsets) and offsets[i] < first:
                                i += 1   # deleted by retention: sent with the error only (loud)
                            break
                        continue
                    deadline = time.monotonic() + FETCH_TIMEOUT_S
                    for chunk in chunks:   # only the records wanted become objects
                        for record in chunk.records(offsets=offsets[i:]):
                            if (tp.topic, tp.partition, record.offset) in keys:
                                found[(tp.topic, tp.partition, record.offset)] = record
                    last = max(chunk.fetched.summary().last_offset for chunk in chunks)
                    while i < len(offsets) and offsets[i] <= last:
                        i += 1
                    if i < len(offsets) and offsets[i] - last > SEEK_GAP:
                        break
        return found
