"""Commits data and source offsets to one Iceberg table in one catalog commit, exactly once.

For each attempt the committer reloads the table, checks the ranges against the offsets the
table holds now (rule 3), and commits data plus offsets in one transaction whose requirements
pin the table's current snapshot, so the catalog's compare-and-swap fails if anything landed in
between. pyiceberg's own retry is never used for these commits (``no_inner_retry``): a retry
here re-reads and re-checks. An error other than a clean conflict leaves the outcome
unknown; it is resolved by looking for the commit id in the table's snapshots (rule 5) before
anything is retried.

Blocking (pyiceberg holds the GIL while it copies metadata): call it with ``asyncio.to_thread``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from frazil import faults
from frazil.errors import (
    CommitFailed,
    CommitOutcomeUnknown,
    FrazilError,
    OffsetGapError,
    OffsetOverlapError,
    TopicMismatchError,
)
from frazil.flow import retry
from frazil.iceberg import index_store, mutations, offsets, writes
from frazil.iceberg.commits import (
    delete_files,
    find_commit,
    seal_of,
    table_lock,
    transaction,
)
from frazil.iceberg.index_store import IndexStore
from frazil.iceberg.offsets import Range, TopicPartition, Verdict
from frazil.iceberg.pyiceberg_patches import manifest_merge
from frazil.iceberg.pyiceberg_patches.row_delta import RowDelta

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitResult:
    commit_id: str
    snapshot_id: int | None   # None when everything was already in the table
    rows: int
    offsets: dict[TopicPartition, int]
    attempts: int
    seconds: float
    already_committed: bool = False
    snapshots: int = 0        # the table's snapshot count after this commit (for maintenance)
    table: str = ""
    # the commit id was in the table before this call sent anything to the catalog: landed by
    # another process (a coordinator that took over the cycle) or before a restart. Not landed now.
    found: bool = False
    replaced: int = 0         # keyed tables: committed rows this commit replaced or deleted
    delete_files: int = 0     # the table's live delete files after this commit (for maintenance)
    index_keys: int = 0       # keyed tables: keys in the key index after this commit, and its heap
    index_bytes: int = 0
    # where the dead-letter topic stood when this commit was made (its snapshot summary): its bad
    # records are at or past it ("": not said, or every range was in the table already)
    letters_from: str = ""


class Committer:
    def __init__(self, catalog: Catalog, table_name: str, pipeline: str, *, max_attempts: int = 5,
                 backoff_s: float = 0.2, sleep: Callable[[float], None] = time.sleep,
                 indexes: dict[str, mutations.KeyIndex] | None = None, fence: bool = True,
                 store: IndexStore | None = None) -> None:
        """``indexes``: key indexes of keyed tables by table name, shared by the committers of one
        coordinator role (an index is moved to each snapshot it has not seen); ``store``: where an
        index missing from them is read from, when its checkpoint still describes the table.
        ``fence=False`` only for the fault-injection test that shows what the contiguity check
        prevents (overlapping ranges are then committed)."""
        self._catalog, self._table_name, self._pipeline = catalog, table_name, pipeline
        self._said: str | None = None   # the rollback last warned about
        self._max_attempts, self._backoff, self._sleep = max_attempts, retry.Backoff(backoff_s), sleep
        self._fence = fence
        self._indexes = indexes if indexes is not None else {}
        self._store = store

    @property
    def table_name(self) -> str:
        return self._table_name

    @property
    def pipeline(self) -> str:
        return self._pipeline

    def load(self) -> Table:
        return self._catalog.load_table(self._table_name)

    def stored_offsets(self) -> dict[TopicPartition, int]:
        return self.held(self.load()).offsets

    def stored(self) -> offsets.Held:
        """The table's offsets, the pipeline watermark and the topic ids it keeps, from one load."""
        return self.held(self.load())

    def held(self, table: Table) -> offsets.Held:
        """What ``table`` holds for this pipeline: the data's truth when the table was rolled
        back (said once per divergence, loudly), else its offsets property."""
        current = table.current_snapshot()
        ancestry = (s.summary.additional_properties for s in (ancestors_of(current, table.metadata) if current else ())
                    if s.summary is not None)
        found = offsets.held(table.properties, ancestry, self._pipeline)
        if found.rolled_back is not None and found.rolled_back != self._said:
            log.warning("table %s: %s", self._table_name, found.rolled_back)
        self._said = found.rolled_back
        return found

    def write_files(self, data: pa.Table, table: Table | None = None) -> list[DataFile]:
        """Write ``data`` as Parquet data files of ``table`` (default: loaded now), not committed.
        A failure here (catalog or storage down) is retriable: nothing was committed."""
        try:
            table = table or self.load()
            return writes.data_files(table.metadata, data, table.io)
        except Exception as exc:
            raise CommitFailed(f"could not write data files for {self._table_name}: "
                                       f"{type(exc).__name__}: {exc}; nothing was committed") from exc

    def write_keys(self, keys: pa.Table, table: Table) -> DataFile:
        """A keyed table's deletes as a key file (travels like a data file, never committed)."""
        try:
            return mutations.key_file(table, keys)
        except Exception as exc:
            raise CommitFailed(f"could not write the key file of deletes for {self._table_name}: "
                                       f"{type(exc).__name__}: {exc}; nothing was committed") from exc

    def files_at(self, paths: Sequence[str]) -> list[DataFile]:
        """Data files (and key files) written earlier (listed in the transaction log), read back from their footers."""
        table = self.load()
        return [mutations.key_file_ref(table, path) if mutations.is_key_file(path)
                else parquet_file_to_data_file(table.io, table.metadata, path) for path in paths]

    def commit(self, data: pa.Table, ranges: Mapping[TopicPartition, Range], commit_id: str) -> CommitResult:
        """Write ``data`` (the rows of exactly ``ranges``) and commit it with the advanced offsets."""
        return self.commit_files(self.write_files(data), ranges, commit_id)

    def commit_files(self, files: Sequence[DataFile], ranges: Mapping[TopicPartition, Range],
                     commit_id: str, *, valid_through_ms: int | None = None, loaded: Table | None = None,
                     progress: Mapping[TopicPartition, int] | None = None,
                     topic_ids: Mapping[str, str] | None = None, letters_from: str = "") -> CommitResult:
        """Commit ``files`` (holding the rows of exactly ``ranges``) with the advanced offsets;
        ``valid_through_ms`` (VTTS) goes into the snapshot summary when given. ``loaded``: the
        table as just loaded, used by the first attempt (a stale one only loses the compare-and-swap).
        ``progress``: the pipeline's watermark as the cycle's workers reported it, kept with the
        offsets (the higher of it and the one stored, per partition). A keyed table's commit also
        deletes the rows its changes replace (position deletes, planned anew on every attempt
        against the table as loaded); key files in ``files`` carry its deletes. ``topic_ids``: the id
        of each topic the ranges were read from, as the workers saw it; one other than the table
        keeps for that topic (it was deleted and created again) refuses the commit, a new one is kept
        with the offsets. ``letters_from``: where the dead-letter topic stood before this commit,
        whose bad records go there once it lands; kept in its snapshot summary, so whoever finds
        the commit id landed looks for them there, whatever became of consumer group offsets."""
        keys = [f for f in files if mutations.is_key_file(f.file_path)]
        read_from = {t: i for t, i in (topic_ids or {}).items() if i}
        files = [f for f in files if not mutations.is_key_file(f.file_path)]
        rows = sum(f.record_count for f in files)
        changes: mutations.NewKeys | None = None   # a keyed table's new keys, read once
        started = time.monotonic()
        last_error: Exception | None = None
        sent = False   # a catalog commit was attempted by this call
        lock = table_lock(self._table_name)
        for attempt in retry.attempts(self._max_attempts, self._backoff, self._sleep):
            lock.acquire()   # released before the backoff: the in-process expiry may run then
            try:
                try:
                    table, loaded = (loaded, None) if loaded is not None else (self.load(), None)
                except Exception as exc:  # noqa: BLE001 - catalog unreachable: nothing was attempted
                    last_error = exc
                    log.warning("commit %s table=%s: cannot load the table on attempt %d/%d (%s: %s)", commit_id,
                                self._table_name, attempt, self._max_attempts, type(exc).__name__, exc)
                    continue
                landed = find_commit(table, commit_id)
                if landed is not None:  # an earlier attempt landed after all, or someone else landed it
                    self._refuse_sealed(table, landed, commit_id)
                    return self.result_of(commit_id, landed, rows, table, attempt, started, found=not sent)
                found = self.held(table)
                refused = offsets.recreated_refusal(found.topic_ids, read_from, commit_id=commit_id,
                                                    table=self._table_name, pipeline=self._pipeline)
                if refused:
                    raise TopicMismatchError(refused)
                stored = found.offsets
                decision = offsets.plan(stored, ranges)
                if found.rolled_back is not None and decision.where(Verdict.GAP):
                    # ranges read before the rollback: refused, so the workers read again from the data's offsets
                    raise OffsetOverlapError(f"commit {commit_id} to {self._table_name}: {found.rolled_back}. "
                                             "Nothing was committed; the partitions are read again from there")
                if self._fence:
                    self._check(decision, stored, ranges, commit_id)
                if decision.all_committed:
                    log.info("commit %s table=%s: every range is already in the table, dropping %d rows",
                             commit_id, self._table_name, rows)
                    return CommitResult(commit_id, None, 0, dict(stored), attempt, time.monotonic() - started, True,
                                        table=self._table_name)
                new_offsets = offsets.advance(stored, ranges)
                encoded = offsets.encode(new_offsets)
                summary = {offsets.COMMIT_ID_KEY: commit_id, offsets.PIPELINE_KEY: self._pipeline,
                           offsets.property_key(self._pipeline): encoded}
                properties = {offsets.property_key(self._pipeline): encoded}
                ids = {**found.topic_ids, **read_from}
                if ids:   # in the summary too: a rollback's truth keeps them
                    summary[offsets.topic_ids_key(self._pipeline)] = offsets.encode_topic_ids(ids)
                    if ids != offsets.stored_topic_ids(table.properties, self._pipeline):
                        properties[offsets.topic_ids_key(self._pipeline)] = offsets.encode_topic_ids(ids)
                if progress:
                    mark = offsets.encode(offsets.merge_progress(found.progress,
                                                                 progress))
                    properties[offsets.progress_key(self._pipeline)] = \
                        summary[offsets.progress_key(self._pipeline)] = mark
                if valid_through_ms is not None:
                    summary[offsets.VTTS_KEY] = str(valid_through_ms)
                if letters_from:   # found again with the commit id (the summary), or in the transaction log
                    summary[offsets.letters_key(self._pipeline)] = letters_from
                delta: mutations.Plan | None = None
                try:
                    identifiers = mutations.keyed(table)
                    if identifiers or keys:
                        if not identifiers:
                            raise FrazilError(f"commit {commit_id}: {self._table_name} is not keyed "
                                              f"({mutations.MODE_PROPERTY} is not upsert or cdc) but the commit "
                                              "carries deletes; nothing was committed")
                        changes = changes or mutations.NewKeys.read(table, files, keys, identifiers)
                        delta, deletes = self._plan(table, identifiers, changes)
                    else:
                        deletes = []
                    tx = transaction(table)
                    if deletes:
                        row_delta = RowDelta(tx, summary)
                        with row_delta:
                            for data_file in files:
                                row_delta.append_data_file(data_file)
                            for delete_file in deletes:
                                row_delta.add_delete_file(delete_file)
                    else:
                        # merges manifests by tiers (manifest_merge), as the commit.manifest-merge.* properties say
                        with manifest_merge.TieredAppend(tx, summary) as append:
                            for data_file in files:
                                append.append_data_file(data_file)
                    tx.set_properties(properties)
                    faults.hit("commit.before_catalog", self._table_name)
                    sent = True
                    committed = tx.commit_transaction()
                    faults.hit("commit.after_catalog", self._table_name)
                except FrazilError:
                    raise
                except CommitFailedException as exc:
                    # A clean conflict: the catalog refused the compare-and-swap, nothing landed.
                    last_error = exc
                    log.warning("commit %s table=%s: conflict on attempt %d/%d (%s); re-reading the table",
                                commit_id, self._table_name, attempt, self._max_attempts, exc)
                except Exception as exc:  # noqa: BLE001 - any other failure leaves the outcome unknown
                    last_error = exc
                    landed = self._resolve(commit_id)
                    if landed is not None:
                        table = self.load()
                        self._refuse_sealed(table, landed, commit_id)
                        log.warning("commit %s table=%s: %s, but the commit landed as snapshot %d",
                                    commit_id, self._table_name, exc, landed)
                        return self.result_of(commit_id, landed, rows, table, attempt, started)
                    log.warning("commit %s table=%s: attempt %d/%d failed and did not land (%s: %s)",
                                commit_id, self._table_name, attempt, self._max_attempts, type(exc).__name__, exc)
                else:
                    if delta is not None:
                        self._landed(delta, committed)
                    result = self.result_of(commit_id, None, rows, committed, attempt, started,
                                          replaced=delta.replaced if delta else 0)
                    index = self._indexes.get(self._table_name) if delta is not None else None
                    if index is not None:
                        result = dataclasses.replace(result, index_keys=len(index),
                                                     index_bytes=index.native.memory_bytes)
                    return result
            finally:
                lock.release()
        raise CommitFailed(
            f"commit {commit_id} to {self._table_name} failed {self._max_attempts} times; last error: "
            f"{type(last_error).__name__}: {last_error}. Nothing was committed; check the catalog and restart."
        ) from last_error

    def keep_progress(self, progress: Mapping[TopicPartition, int]) -> bool:
        """Store the pipeline's watermark in this table's properties without data (no snapshot: the
        offsets do not move), merged with what it holds (a watermark only moves up). For a cycle
        that landed no data anywhere. Whether it was stored (False: the table already held it)."""
        last_error: Exception | None = None
        for attempt in retry.attempts(self._max_attempts, self._backoff, self._sleep):
            table = self.load()
            held = self.held(table).progress
            merged = offsets.merge_progress(held, progress)
            if merged == held:
                return False
            tx = transaction(table)
            tx.set_properties({offsets.progress_key(self._pipeline): offsets.encode(merged)})
            try:
                tx.commit_transaction()
                return True
            except CommitFailedException as exc:   # another commit landed meanwhile: merge with it
                last_error = exc
                log.info("table %s: the watermark's commit met another one (attempt %d/%d); again", self._table_name,
                         attempt, self._max_attempts)
        raise CommitFailed(f"could not store the watermark in {self._table_name}: {last_error}") from last_error

    def seal(self, commit_id: str, *, reason: str) -> CommitResult:
        """Close ``commit_id`` in this table for good: once this returns, no commit of that id can
        land here. A coordinator that takes over an open cycle and ends it without committing it
        to a table that replies it dropped (an older generation) named, seals it there: the
        coordinator it took over from may be a zombie (paused, not dead) holding those replies,
        and its catalog commit would land after the cycle was closed, with bad records nobody
        sends any more. The seal is an empty snapshot carrying the commit id (``frazil.sealed``:
        why), so the zombie's commit loses the compare-and-swap, finds the commit id, and is
        refused as sealed. Returns ``found`` when the commit id was in the table already (the
        zombie landed first: its bad records are the caller's to send); the offsets do not move."""
        started = time.monotonic()
        last_error: Exception | None = None
        for attempt in retry.attempts(self._max_attempts, self._backoff, self._sleep):
            try:
                table = self.load()
                landed = find_commit(table, commit_id)
                if landed is not None:
                    return self.result_of(commit_id, landed, 0, table, attempt, started,
                                        found=seal_of(table, landed) is None)
                summary = {offsets.COMMIT_ID_KEY: commit_id, offsets.PIPELINE_KEY: self._pipeline,
                           offsets.SEALED_KEY: reason}
                tx = transaction(table)
                with tx.update_snapshot(snapshot_properties=summary).fast_append():
                    pass   # no data, no offsets: only the commit id, closed
                faults.hit("commit.before_catalog", self._table_name)
                committed = tx.commit_transaction()
                faults.hit("commit.after_catalog", self._table_name)
            except CommitFailedException as exc:
                last_error = exc   # something landed meanwhile (perhaps that very commit): look again
                log.warning("seal %s table=%s: conflict on attempt %d/%d (%s); re-reading the table", commit_id,
                            self._table_name, attempt, self._max_attempts, exc)
            except Exception as exc:  # noqa: BLE001 - unknown outcome: the next attempt looks for the id first
                last_error = exc
                log.warning("seal %s table=%s: attempt %d/%d failed (%s: %s)", commit_id, self._table_name, attempt,
                            self._max_attempts, type(exc).__name__, exc)
            else:
                snapshot = committed.current_snapshot()
                log.warning("commit %s table=%s: sealed as snapshot %s (%s); it can no longer land here", commit_id,
                            self._table_name, snapshot.snapshot_id if snapshot else None, reason)
                return CommitResult(commit_id, None, 0, self.held(committed).offsets, attempt,
                                    time.monotonic() - started, snapshots=len(committed.metadata.snapshots),
                                    table=self._table_name, delete_files=delete_files(committed))
        unknown = not isinstance(last_error, CommitFailedException)   # the last attempt may have landed
        raise (CommitOutcomeUnknown if unknown else CommitFailed)(
            f"could not seal commit {commit_id} in {self._table_name} in {self._max_attempts} attempts; last error: "
            f"{type(last_error).__name__}: {last_error}") from last_error

    def _refuse_sealed(self, table: Table, snapshot_id: int, commit_id: str) -> None:
        reason = seal_of(table, snapshot_id)
        if reason is not None:
            raise OffsetOverlapError(f"commit {commit_id} to {self._table_name} was sealed as snapshot {snapshot_id} "
                                     f"by the coordinator that took the cycle over ({reason}); nothing was committed, "
                                     "the partitions are read again from the stored offsets")

    def _plan(self, table: Table, identifiers: tuple[str, ...], changes: mutations.NewKeys
              ) -> tuple[mutations.Plan, list[DataFile]]:
        """The position deletes of a keyed table's commit, planned against ``table`` as loaded."""
        index = index_store.current_index(self._indexes, self._store, self._table_name, table, identifiers)
        for path, spec_partition in changes.files.items():
            index.files[path] = spec_partition
        delta = mutations.plan(index, changes.rows, changes.deletes)
        if delta.split_keys:
            log.warning("table %s: %d key(s) changed from more than one partition in one cycle; the change with the "
                        "highest (partition, offset) won. Keep each key in one partition (produce with the key as "
                        "the Kafka key)", self._table_name, delta.split_keys)
        deletes = mutations.write_position_deletes(table, delta.deletes, index.files) if delta.deletes else []
        faults.hit("commit.after_deletes_written", self._table_name)
        return delta, deletes

    def _landed(self, delta: mutations.Plan, committed: Table) -> None:
        """The index after a commit this process made: in step with ``committed``'s snapshot."""
        index = self._indexes.get(self._table_name)
        current = committed.current_snapshot()
        if index is None or current is None:
            return
        index.forget(delta.changed)
        for path, keys, positions in delta.added:
            index.add(keys, path, positions)
        index.snapshot_id = current.snapshot_id

    def _resolve(self, commit_id: str) -> int | None:
        """Rule 5: reload and look for the commit id, retrying the reload a few times."""
        for attempt in retry.attempts(self._max_attempts, self._backoff, self._sleep):
            try:
                return find_commit(self.load(), commit_id)
            except Exception as exc:  # noqa: BLE001
                log.warning("commit %s: cannot reload %s to resolve the outcome (%s); try %d/%d",
                            commit_id, self._table_name, exc, attempt, self._max_attempts)
        raise CommitOutcomeUnknown(
            f"commit {commit_id} to {self._table_name}: outcome unknown and the table cannot be reloaded; "
            "restart frazil once the catalog is reachable, it resumes from the table's offsets")

    def _check(self, decision: offsets.CommitPlan, stored: Mapping[TopicPartition, int],
               ranges: Mapping[TopicPartition, Range], commit_id: str) -> None:
        def describe(tps: list[TopicPartition]) -> str:
            return "; ".join(f"{t}[{p}] stored={stored.get((t, p))} "
                             f"range=[{ranges[(t, p)].start}, {ranges[(t, p)].end})"
                             for t, p in tps)

        gaps = decision.where(Verdict.GAP)
        if gaps:
            raise OffsetGapError(
                f"commit {commit_id} to {self._table_name} would skip records: {describe(gaps)}. Nothing was "
                "committed. Someone moved offsets outside frazil or this is a bug; check the topic and the "
                f"table property {offsets.property_key(self._pipeline)}"
            )
        mixed = decision.where(Verdict.OVERLAP)
        if not mixed and not decision.committable and not decision.all_committed:
            mixed = decision.where(Verdict.ALREADY_COMMITTED)
        if mixed:
            raise OffsetOverlapError(
                f"commit {commit_id} to {self._table_name}: part of it is already in the table: {describe(mixed)}. "
                "Nothing was committed; the partitions are read again from the stored offsets"
            )

    def result_of(self, commit_id: str, snapshot_id: int | None, rows: int, table: Table, attempt: int,
                started: float, *, found: bool = False, replaced: int = 0) -> CommitResult:
        if snapshot_id is None:
            snapshot_id = find_commit(table, commit_id)
        stored = self.held(table).offsets
        key = offsets.letters_key(self._pipeline)
        snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
        # that commit's own (a later commit with bad records keeps a later one)
        letters_from = (snapshot.summary.additional_properties.get(key, "") if snapshot is not None
                        and snapshot.summary is not None else "")
        result = CommitResult(commit_id, snapshot_id, rows, stored, attempt, time.monotonic() - started,
                              snapshots=len(table.metadata.snapshots), table=self._table_name, found=found,
                              replaced=replaced, delete_files=delete_files(table), letters_from=letters_from)
        if found:
            log.info("commit %s table=%s: already in the table as snapshot %s (landed by another process, or before a "
                     "restart); nothing committed now", commit_id, self._table_name, snapshot_id)
            return result
        log.info("commit %s table=%s snapshot=%s rows=%d%s attempts=%d took=%.0fms offsets=%s",
                 commit_id, self._table_name, snapshot_id, rows, f" replaced={replaced}" if replaced else "", attempt,
                 result.seconds * 1000, offsets.encode(stored))
        return result
