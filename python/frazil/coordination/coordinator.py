"""The coordinator's commit cycle over the control channel (one live coordinator per pipeline).

A cycle: send StartCommit(commit id); collect replies in a ``CommitState`` until every source
partition answered (full) or ``commit_timeout_s`` passed (partial); commit each table once with
the files and ranges of the accepted replies (the committer checks contiguity against the
table's offsets inside the compare-and-swap, and resolves unknown outcomes by commit id); send
CommitToTable per table and CommitComplete; then move the coordinator's position on the control
topic past the cycle's events.

Failover: a new coordinator first reads the control topic from the position the last one
committed. If it finds a cycle that was started but not completed, it takes it over: it goes on
collecting replies until that cycle is full or its timeout (counted from the original
StartCommit) passes, then commits it under the same commit id (if the old coordinator's catalog
commit landed, the committer finds it and nothing lands twice), before starting its own. The
old coordinator may only be paused: fenced on the control topic, it can still reach the catalog.
Where the replies it may have accepted carried bad records for a table the takeover commits
nothing to, the commit id is sealed there (``CommitState.seals``), so it lands before the cycle
is closed (and its bad records are sent) or never.

A table whose commit fails in a way worth retrying (catalog or storage down) is named in
CommitComplete's ``failed_tables``: its workers keep the files and report them again, with the
next ones, in the next cycle (rule 6); after ``outage_timeout_s`` of failures the coordinator
stops, loudly. A commit refused for its content (an overlap, files for another table) is read
again by its workers from the table's offsets (workers compare after every CommitComplete). A
gap stops the coordinator (rule 3).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from frazil import faults
from frazil.coordination.channel import Received
from frazil.coordination.commit_state import CommitState, Readiness, TableCommit, TopicPartition
from frazil.coordination.table_commit import CommitTable
from frazil.errors import (
    CommitOutcomeUnknown,
    FrazilError,
    OffsetGapError,
    OffsetOverlapError,
    OutageTimeout,
)
from frazil.events.payloads import (
    CommitComplete,
    CommitRequest,
    CommitToTable,
    DataComplete,
    DataWritten,
    DeadLetter,
    Payload,
    StartCommit,
)
from frazil.flow import retry
from frazil.flow.outage import Outage
from frazil.iceberg.committer import CommitResult
from frazil.iceberg.offsets import encode, merge_progress
from frazil.metrics import Metrics
from frazil.txlog import Journal
from frazil.txlog import records as txrecords

log = logging.getLogger(__name__)

POLL_MS = 100
SEAL_BACKOFF = retry.Backoff(1.0, 10.0)   # sealing a commit id through a catalog outage


class Channel(Protocol):
    async def send(self, payloads: list[Payload]) -> None: ...
    async def poll(self, timeout_ms: int) -> list[Received]: ...
    async def caught_up(self) -> bool: ...
    async def commit_position(self, offset: int) -> None: ...


# (what to commit, commit id, VTTS or None); blocking, run in a worker thread
# stores the pipeline's watermark in a table, without data (blocking); the table's name, or None: no table yet
KeepProgress = Callable[[dict[TopicPartition, int]], str | None]


class DeadLetters(Protocol):
    """Where a landed commit's bad records go (``dead_letters.DeadLetterSink``)."""

    async def anchor(self) -> str: ...

    async def send(self, commit_id: str, table: str, letters: Sequence[DeadLetter], *, again: bool = False,
                   since: str = "") -> int: ...


class Coordinator:
    def __init__(self, channel: Channel, pipeline: str,
                 partitions: frozenset[TopicPartition] | Callable[[], frozenset[TopicPartition]],
                 commit_table: CommitTable, *, timeout_s: float, clock_ms: Callable[[], int] | None = None,
                 fence: bool = True, outage_timeout_s: float = 900.0, metrics: Metrics | None = None,
                 senders: int | None = None, dead_letters: DeadLetters | None = None,
                 journal: Journal | None = None, keep_progress: KeepProgress | None = None) -> None:
        """``partitions``: every source partition a cycle waits for (or a function giving them at
        each cycle's start: in single mode, the local worker's assignment). ``fence=False`` only for
        the test that shows what the generation check prevents. A table whose commits keep failing
        for ``outage_timeout_s`` stops the coordinator (rule 8). ``dead_letters``: where a landed
        commit's bad records go (``on_bad_record = "dead_letter"``); ``journal`` (single mode): the
        process's transaction log, whose landed commits' bad records not yet sent are sent at start
        (in distributed mode the next coordinator finishes the open cycle, and sends them then).
        ``keep_progress``: stores the pipeline's watermark in a table when a cycle moved it without
        landing data anywhere (its records went to no table), so it is not left behind them."""
        self._channel, self._pipeline = channel, pipeline
        self._partitions: Callable[[], frozenset[TopicPartition]] = (
            partitions if callable(partitions) else (lambda: partitions))
        self._fence, self._outage_timeout_s, self._senders = fence, outage_timeout_s, senders
        self._outages: dict[str, Outage] = {}   # by table
        self._metrics = metrics
        self._dead_letters, self._journal = dead_letters, journal
        self._commit_table, self._timeout_ms = commit_table, int(timeout_s * 1000)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._last_offset: int | None = None   # the last control-topic offset this coordinator handled
        self._requested: str | None = None     # a CommitRequest read while a cycle was running
        self._last_start_ms: int | None = None
        self._keep_progress = keep_progress
        self._kept: dict[TopicPartition, int] = {}   # the watermark as this coordinator last stored it

    async def recover(self) -> bool:
        """Read what the last coordinator left; finish its open cycle if there is one. Returns
        whether a worker asked for a cycle after the last one (start the next one at once)."""
        if self._journal is not None and self._dead_letters is not None:
            # landed commits of this process whose bad records may not have gone out (a crash between),
            # in the order they landed (each table's dead-letter position only moves forward)
            for pending in list(self._journal.state.dead_letters.values()):
                await self._send_dead_letters(pending["commit_id"], pending["table"],
                                              txrecords.decode_dead_letters(pending["dead_letters"]), again=True,
                                              since=pending.get("letters_from", ""))
        backlog: list[Received] = []
        while not await self._channel.caught_up():
            backlog += await self._channel.poll(500)
        open_cycle: CommitState | None = None
        requested = False
        for received in backlog:
            payload = received.event.payload
            if isinstance(payload, CommitRequest):
                requested = True
            elif isinstance(payload, StartCommit):
                requested = False
                open_cycle = CommitState(payload.commit_id, self._partitions(), received.event.sent_ms,
                                         self._timeout_ms, fence=self._fence, senders=self._senders, taken_over=True)
            elif (isinstance(payload, CommitComplete) and open_cycle is not None
                  and payload.commit_id == open_cycle.commit_id):
                open_cycle = None
            elif isinstance(payload, (DataWritten, DataComplete)) and open_cycle is not None:
                open_cycle.add(received.event.sender, payload)
            self._last_offset = received.offset
        if open_cycle is not None:
            log.warning("coordinator: taking over commit %s, which the previous coordinator started (%d of %d "
                        "partitions answered); collecting the rest until its timeout", open_cycle.commit_id,
                        len(open_cycle.covered() & open_cycle.partitions), len(open_cycle.partitions))
            await self._conclude(open_cycle, await self._collect(open_cycle))
        elif self._last_offset is not None:
            await self._channel.commit_position(self._last_offset + 1)
        return requested

    async def wait_for_trigger(self, interval_s: float) -> str:
        """Until ``interval_s`` has passed since the last cycle started, or a worker sent
        ``CommitRequest`` (now, or while the last cycle ran); says which."""
        if self._requested is not None:
            trigger, self._requested = self._requested, None
            return trigger
        deadline = (self._last_start_ms or self._clock_ms()) + int(interval_s * 1000)
        while self._clock_ms() < deadline:
            for received in await self._channel.poll(min(POLL_MS, max(1, deadline - self._clock_ms()))):
                self._last_offset = received.offset
                if isinstance(received.event.payload, CommitRequest):
                    return f"requested by {received.event.sender} ({received.event.payload.reason})"
        return "interval"

    async def cycle(self) -> list[CommitResult]:
        """One commit cycle, start to end. Returns the tables' commit results. With no partition to
        wait for (single mode before the first assignment) no cycle starts: it would end before
        any worker could answer it."""
        partitions = self._partitions()
        if not partitions:
            await asyncio.sleep(POLL_MS / 1000)
            return []
        commit_id = f"{self._pipeline}-{uuid.uuid4().hex}"
        self._last_start_ms = self._clock_ms()
        state = CommitState(commit_id, partitions, self._last_start_ms, self._timeout_ms, fence=self._fence,
                            senders=self._senders)
        await self._channel.send([StartCommit(commit_id)])
        faults.hit("coordinator.after_start_commit")
        return await self._conclude(state, await self._collect(state))

    async def _collect(self, state: CommitState) -> Readiness:
        """Take replies until the cycle is full or timed out."""
        while (ready := state.readiness(self._clock_ms())) is Readiness.WAIT:
            for received in await self._channel.poll(POLL_MS):
                self._last_offset = received.offset
                payload = received.event.payload
                if isinstance(payload, (DataWritten, DataComplete)):
                    state.add(received.event.sender, payload)
                elif isinstance(payload, CommitRequest) and self._requested is None:
                    # for the next cycle: this one may have started before the worker filled up
                    self._requested = f"requested by {received.event.sender} ({payload.reason}) during commit " \
                                      f"{state.commit_id}"
        return ready

    async def _conclude(self, state: CommitState, ready: Readiness) -> list[CommitResult]:
        for reason in state.dropped:
            log.warning("commit %s: dropped a reply: %s", state.commit_id, reason)
        if self._metrics is not None:
            self._metrics.cycle(ready.value)
            self._metrics.dropped_replies.inc(len(state.dropped))
        if ready is Readiness.PARTIAL:
            missing = sorted(state.partitions - state.covered())
            log.warning("commit %s: ended (timeout %.1fs, or the in-process worker answered after a rebalance) without "
                        "%d partition(s) (e.g. %s); committing what arrived, without a valid-through timestamp",
                        state.commit_id, self._timeout_ms / 1000, len(missing), missing[:5])
        return await self._finish(state, full=ready is Readiness.FULL)

    async def _finish(self, state: CommitState, *, full: bool) -> list[CommitResult]:
        vtts = state.valid_through_ms() if full else None
        results: list[CommitResult] = []
        events: list[Payload] = []
        failed: list[str] = []
        tables = state.tables()
        began = time.monotonic()
        if self._dead_letters is not None and any(t.dead_letters for t in tables):
            # where the dead-letter topic stands before any of the cycle's commits: kept with each that
            # carries bad records, they are sent past it (whoever finishes the commit looks there)
            since = await self._dead_letters.anchor()
            tables = [dataclasses.replace(t, letters_from=since) if t.dead_letters else t for t in tables]
        # Every table before the one at hand holds every range the cycle's replies gave it. A commit
        # found already in a table (a taken-over cycle) may lack ranges of late replies: it does not count.
        held = True
        keeps_landed = False
        for i, table in enumerate(tables):
            if i == len(tables) - 1 and held and table.landed:
                # the cycle's last commit keeps the watermark the workers will have once it lands too
                # (atomic with it), so a pipeline that goes idle or stops keeps one that is not a cycle behind
                table = dataclasses.replace(table, progress=table.landed)
                keeps_landed = True
            held_before, held = held, False   # until this table's result shows it holds every range (below)
            if table.dead_letters and self._dead_letters is None:
                log.error("commit %s to %s refused: a worker reported %d bad record(s) for the dead-letter topic, "
                          "but this coordinator's pipeline.on_bad_record is not \"dead_letter\"; give every process "
                          "of the pipeline the same config", state.commit_id, table.table, len(table.dead_letters))
                self._count("refused")
                continue
            try:
                result = await _finished(self._commit_table, table, state.commit_id, vtts,
                                         on_stop=functools.partial(self._landed_as_it_stops, state.commit_id, table))
            except OffsetOverlapError as exc:
                log.warning("commit %s: %s", state.commit_id, exc)
                self._count("refused")
                continue
            except OffsetGapError:
                raise   # rule 3: never commit, stop loudly with the numbers
            except FrazilError as exc:
                if table.dead_letters and isinstance(exc, CommitOutcomeUnknown):
                    # it may have landed: stop before CommitComplete, so the restart (its log) or the
                    # next coordinator (the open cycle) settles it by commit id and sends its bad records
                    raise CommitOutcomeUnknown(f"commit {state.commit_id} to {table.table}, which carries "
                                               f"{len(table.dead_letters)} bad record(s), has an unknown outcome "
                                               f"({exc}); stopping the coordinator to settle it") from exc
                if not exc.retriable:
                    log.error("commit %s to %s refused: %s; its workers read the records again from the table's "
                              "offsets", state.commit_id, table.table, exc)
                    self._count("refused")
                    continue
                now_s = self._clock_ms() / 1000
                outage = self._outages.setdefault(table.table, Outage(self._outage_timeout_s))
                failing = outage.failed(now_s, began=state.started_ms / 1000)   # from the failed cycle's start
                if outage.expired(now_s):
                    raise OutageTimeout(
                        f"commits to {table.table} have failed for {failing:.0f}s (outage_timeout_s="
                        f"{self._outage_timeout_s:g}); stopping the coordinator. Nothing is lost: the table's offsets "
                        f"did not move. Last error: {exc}") from exc
                log.error("commit %s to %s failed: %s; its workers keep the files and report them again in the next "
                          "cycle (failing for %.0fs of outage_timeout_s=%g)", state.commit_id, table.table, exc,
                          failing, self._outage_timeout_s)
                failed.append(table.table)
                self._count("failed")
                continue
            lasted = self._outages[table.table].ended(self._clock_ms() / 1000) if table.table in self._outages else None
            if lasted is not None:
                log.warning("commit %s to %s landed; the outage is over after %.0fs (from the start of the first "
                            "cycle that failed)", state.commit_id, table.table, lasted)
            # no snapshot of this call's: the commit id was there (a takeover, a restart), or every
            # range was (landed by an earlier commit): counted apart, so committed is one per snapshot
            self._count(_counted_as(result))
            if result.replaced and self._metrics is not None:
                self._metrics.rows_replaced(table.table, result.replaced)
            if result.index_bytes and self._metrics is not None:
                self._metrics.key_index(table.table, result.index_keys, result.index_bytes)
            results.append(result)
            held = held_before and _holds(result, table)
            await self._send_landed(state.commit_id, table, result)
            events.append(CommitToTable(state.commit_id, table.table, result.snapshot_id, vtts))
        landed = state.progress(landed=True)
        if keeps_landed and results and not (results[-1].found or results[-1].already_committed):
            self._kept = merge_progress(self._kept, landed)   # the cycle's last commit stored it
        elif not tables and self._keep_progress is not None and any(
                o > self._kept.get(tp, -1) for tp, o in landed.items()):
            await self._keep(state.commit_id, landed)
        for table in state.seals():
            result = await self._seal(state.commit_id, table)
            if result.found:
                self._count("already_landed")
                results.append(result)
                await self._send_landed(state.commit_id, table, result)
                events.append(CommitToTable(state.commit_id, table.table, result.snapshot_id, vtts))
            else:
                self._count("sealed")
        if len(tables) > 1:
            log.info("commit %s: %d of %d table(s) committed (%d failed, %d refused), %d rows, in %.0f ms",
                     state.commit_id, len(results), len(tables), len(failed), len(tables) - len(results) - len(failed),
                     sum(r.rows for r in results), 1000 * (time.monotonic() - began))
        faults.hit("coordinator.after_catalog_commits")
        await self._channel.send([*events, CommitComplete(state.commit_id, vtts, tuple(failed))])
        faults.hit("coordinator.after_commit_complete")
        if self._last_offset is not None:
            await self._channel.commit_position(self._last_offset + 1)
        return results


    async def _keep(self, commit_id: str, progress: dict[TopicPartition, int]) -> None:
        """A cycle whose records all went to no table (routing took none of them) landed nothing,
        so no commit carried the watermark past them: store it on its own (a table property, no
        snapshot). It is only a hint for restarts (rule 2 with several tables): failing to store it
        costs reading those records again, so a failure is logged, not raised."""
        assert self._keep_progress is not None
        try:
            table = await asyncio.to_thread(self._keep_progress, progress)
        except Exception as exc:  # noqa: BLE001 - a hint that could not be stored: the next cycle tries again
            log.warning("commit %s: landed no data; could not store the pipeline's watermark (%s: %s); a restart "
                        "reads those records again", commit_id, type(exc).__name__, exc)
            return
        if table is not None:
            self._kept = merge_progress(self._kept, progress)
            log.info("commit %s landed no data; the pipeline's watermark is kept in %s: %s", commit_id, table,
                     encode(progress))

    async def _seal(self, commit_id: str, table: TableCommit) -> CommitResult:
        """Seal ``commit_id`` in ``table`` (``CommitState.seals``). Retried through a catalog outage
        while the cycle stays open (closing it unsealed would leave the hole the seal closes), up to
        ``outage_timeout_s``; then the coordinator stops and the next one takes the cycle over again."""
        def expired(exc: BaseException, failing: float) -> BaseException:
            return OutageTimeout(f"commit {commit_id}: could not seal it in {table.table} for {failing:.0f}s ({exc}); "
                                 "stopping the coordinator before the cycle is closed: the next one takes it "
                                 "over again")

        try:
            return await retry.wait_out(
                lambda: _finished(self._commit_table, table, commit_id, None,
                                  on_stop=functools.partial(self._send_landed, commit_id, table)),
                what=f"commit {commit_id}: sealing it in {table.table} failed", timeout_s=self._outage_timeout_s,
                backoff=SEAL_BACKOFF, clock=lambda: self._clock_ms() / 1000, expired=expired,
                retriable=lambda exc: isinstance(exc, FrazilError) and exc.retriable)
        except FrazilError as exc:
            if not isinstance(exc, OutageTimeout):
                log.error("commit %s: could not seal it in %s (%s); stopping the coordinator before the cycle is "
                          "closed: the next one takes it over again", commit_id, table.table, exc)
            raise

    async def _landed_as_it_stops(self, commit_id: str, table: TableCommit, result: CommitResult) -> None:
        """A table commit that ended after this coordinator began to stop: counted as the cycle
        counts one (the metrics say what the table holds: one committed per snapshot), and its bad
        records sent."""
        self._count(_counted_as(result))
        await self._send_landed(commit_id, table, result)

    async def _send_landed(self, commit_id: str, table: TableCommit, result: CommitResult) -> None:
        """The bad records of ``table`` that its landed commit counts as consumed: only the ranges the
        table holds (a coordinator finishing an open cycle may have collected late replies the landed
        commit did not take); sent once even if another commit landed them. When this commit id was
        found landed, also those of replies this coordinator dropped as an older generation: the
        coordinator that landed it (then stopped or died before sending them) may have taken them,
        and a bad record below the table's offsets was consumed as bad whoever read it."""
        letters = {(d.topic, d.partition, d.offset): d for d in (*table.dead_letters,
                                                                   *(table.stale_letters if result.found else ()))}
        landed = [d for key, d in sorted(letters.items()) if d.offset < result.offsets.get((d.topic, d.partition), -1)]
        if landed:
            # landed now by this call: nobody sent its letters yet; found (or all its ranges were in the
            # table): someone may have, and the sink looks for them past where the commit says
            again = result.found or result.already_committed
            await self._send_dead_letters(commit_id, table.table, landed, again=again, since=result.letters_from)

    async def _send_dead_letters(self, commit_id: str, table: str, letters: Sequence[DeadLetter], *,
                                 again: bool = False, since: str = "") -> None:
        """A landed commit's bad records to the dead-letter topic (exactly once: the sink skips
        what is there), then noted in the log. A failure stops the coordinator: CommitComplete is
        not sent, and whoever coordinates next finishes the cycle, sending them. ``again``: the
        commit may have been finished before (a restart, a takeover), so some may be out already;
        ``since``: where the dead-letter topic stood before the commit (kept with it)."""
        assert self._dead_letters is not None
        await self._dead_letters.send(commit_id, table, letters, again=again, since=since)
        faults.hit("dead_letter.after_commit", table)
        if self._journal is not None:
            await asyncio.to_thread(self._journal.append, [txrecords.dead_lettered(commit_id, table)])

    def _count(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.table_commit(result)


def _counted_as(result: CommitResult) -> str:
    """A landed table commit's result label: ``already_landed`` when this call made no snapshot (the
    commit id was there, after a takeover or a restart, or every range was), so that ``committed``
    counts one per snapshot."""
    return "already_landed" if result.found or result.already_committed else "committed"


def _holds(result: CommitResult, table: TableCommit) -> bool:
    """Whether the table, as ``result`` left it, holds every range ``table`` asked it to commit."""
    return all(result.offsets.get((r.topic, r.partition), -1) >= r.end for r in table.ranges)


async def _finished(commit: CommitTable, table: TableCommit, commit_id: str, vtts: int | None, *,
                    on_stop: Callable[[CommitResult], Awaitable[None]] | None = None) -> CommitResult:
    """One table commit in a thread. A cancel (SIGTERM, or the role moving to another process)
    waits for the catalog call and its outcome record to end (and, if it landed, for ``on_stop``:
    its dead letters) before it takes effect: cancelling
    only the await would leave the thread committing after the process closed its transaction
    log, and a clean stop with an intent whose outcome the next start must look up. The wait is
    bounded by the committer's own bounded retries."""
    running = asyncio.ensure_future(asyncio.to_thread(commit, table, commit_id, vtts))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        if not running.done():
            log.info("commit %s to %s: stopping once this table's commit has an outcome", commit_id, table.table)
            await asyncio.wait([running])
        if not running.cancelled() and running.exception() is not None:
            log.warning("commit %s to %s ended as the coordinator stopped: %s", commit_id, table.table,
                        running.exception())
        elif on_stop is not None and not running.cancelled():
            # landed: its bad records go out before the stop takes effect. The next coordinator may
            # not hold them (it drops the replies of a generation the rebalance replaced), and once a
            # later commit moves the dead-letter position past them they would never be sent.
            try:
                await on_stop(running.result())
            except Exception as exc:  # noqa: BLE001 - the stop goes on; said loudly
                log.error("commit %s to %s landed, but its bad records could not be sent as the coordinator "
                          "stopped (%s: %s)", commit_id, table.table, type(exc).__name__, exc)
        raise
