"""Snapshot expiry in process, for tables whose expired history only ever appended.

A commit that takes a table over ``maintenance.max_snapshots`` makes expiry due
(``spark/schedule.py``). Spark's ``expire_snapshots`` needs a JVM: started for it alone between
full runs, it took two cores for tens of seconds while commits went on, and could not keep up with
commits seconds apart (snapshots reached 244 over a bound of 100 in ``make bench-maintenance``).
When the history to expire only ever appended, the same result is cheap here:

- ``plan`` (pure) picks the snapshots: those of the main branch's history older than the cut-off
  ``schedule.expire_before`` gives (the newest half is kept over ``max_snapshots``), never the
  current snapshot or any branch or tag head. It refuses (``None``) unless every snapshot to expire,
  and the oldest kept one after them, is an ``append``: then every data and delete file any of them
  holds is still live in the kept history, and only manifests and manifest lists can become
  unreferenced. A replace (compaction), overwrite or delete (keyed tables) in that window, or a
  statistics file of an expired snapshot, is left to Spark's expiry, which deletes the files the
  expired snapshots alone held.
- ``expire`` commits the removal of those snapshots in one catalog commit that requires the main
  branch to be where the plan saw it (a commit landed meanwhile: nothing is removed, the next turn
  plans again), then deletes the manifest lists of the removed snapshots and the manifests that no
  kept snapshot lists (any branch). A file that cannot be deleted is logged and left to the orphan
  removal of the full run; a crash between the two leaves the same.

The removal commit holds the table's commit lock (``committer.table_lock``), so it never takes a
compare-and-swap from this process's own commits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot, ancestors_of
from pyiceberg.table.update import AssertRefSnapshotId, RemoveSnapshotsUpdate

from frazil import faults
from frazil.config import MaintenanceConfig
from frazil.iceberg.commits import table_lock
from frazil.iceberg.pyiceberg_patches import manifest_lists
from frazil.spark.schedule import expire_before

log = logging.getLogger(__name__)

MAIN = "main"


@dataclass(frozen=True)
class Plan:
    snapshot_ids: tuple[int, ...]   # oldest first
    main_at: int                    # the main branch's snapshot the plan was made against


@dataclass(frozen=True)
class Expired:
    snapshots: int          # removed from the table's metadata
    kept: int               # snapshots left
    manifest_lists: int     # files deleted
    manifests: int
    failed_deletes: int     # files that could not be deleted (left to orphan removal)
    seconds: float


def _operation(snapshot: Snapshot) -> Operation | None:
    return snapshot.summary.operation if snapshot.summary is not None else None


def plan(metadata: TableMetadata, cfg: MaintenanceConfig, now_ms: int) -> Plan | None:
    """The snapshots to expire in process, or None: nothing to expire, or not only appends (Spark's)."""
    main = metadata.refs.get(MAIN)
    current = metadata.snapshot_by_id(main.snapshot_id) if main is not None else None
    if current is None:
        return None
    cutoff = expire_before([s.timestamp_ms for s in metadata.snapshots], now_ms, cfg)
    if cutoff is None:
        return None
    heads = {ref.snapshot_id for ref in metadata.refs.values()}
    lineage = list(reversed(list(ancestors_of(current, metadata))))   # oldest first, the current one last
    chosen = [i for i, s in enumerate(lineage[:-1]) if s.timestamp_ms < cutoff and s.snapshot_id not in heads]
    if not chosen:
        return None
    # every snapshot up to the kept one right after the newest expired: all appends, so no file any of
    # them holds has left the kept history
    if any(_operation(s) != Operation.APPEND for s in lineage[:chosen[-1] + 2]):
        return None
    ids = {lineage[i].snapshot_id for i in chosen}
    if any(f.snapshot_id in ids for f in [*metadata.statistics, *metadata.partition_statistics]):
        return None
    return Plan(tuple(lineage[i].snapshot_id for i in chosen), current.snapshot_id)


def _listed(io: FileIO, manifest_list: str) -> frozenset[str]:
    """The manifests a manifest list names, from the lists ``manifest_lists`` keeps (a list is
    read from its file once)."""
    return frozenset(m.manifest_path for m in manifest_lists.read(io, manifest_list))


def unreferenced(io: FileIO, removed: Iterable[Snapshot], kept: Iterable[Snapshot]) -> tuple[list[str], list[str]]:
    """The manifest lists of ``removed`` and the manifests they list that no snapshot of ``kept`` lists."""
    removed = list(removed)
    live: set[str] = set()
    for snapshot in kept:
        live |= _listed(io, snapshot.manifest_list)
    gone: set[str] = set()
    for snapshot in removed:
        gone |= _listed(io, snapshot.manifest_list)
    return [s.manifest_list for s in removed], sorted(gone - live)


def expire(catalog: Catalog, table_name: str, cfg: MaintenanceConfig, *, now_ms: int | None = None) -> Expired | None:
    """Expire in process what ``plan`` allows; None when it allows nothing (Spark's expiry then
    decides) or a commit landed meanwhile (the next turn plans again). Blocking."""
    started = time.monotonic()
    with table_lock(table_name):
        table = catalog.load_table(table_name)
        chosen = plan(table.metadata, cfg, now_ms if now_ms is not None else int(time.time() * 1000))
        if chosen is None:
            return None
        before = table.metadata
        try:
            # pydantic models populated by field name (pyiceberg's own code does the same); mypy knows the aliases only
            requirement = AssertRefSnapshotId(ref=MAIN, snapshot_id=chosen.main_at)   # type: ignore[call-arg]
            removal = RemoveSnapshotsUpdate(snapshot_ids=list(chosen.snapshot_ids))   # type: ignore[call-arg]
            response = catalog.commit_table(table, (requirement,), (removal,))
        except CommitFailedException as exc:
            log.info("table %s: snapshot expiry skipped, the table changed meanwhile (%s); the next turn plans again",
                     table_name, exc)
            return None
    faults.hit("expiry.after_catalog", table_name)
    after = response.metadata
    ids = set(chosen.snapshot_ids)
    lists, manifests = unreferenced(table.io, (s for s in before.snapshots if s.snapshot_id in ids), after.snapshots)
    failed = 0
    for path in [*lists, *manifests]:
        try:
            table.io.delete(path)
            manifest_lists.forget(path)
        except Exception as exc:  # noqa: BLE001 - left for the full run's orphan removal
            failed += 1
            log.warning("table %s: could not delete %s after expiring its snapshots (%s: %s); the full "
                        "maintenance run's orphan removal takes it", table_name, path, type(exc).__name__, exc)
    result = Expired(len(ids), len(after.snapshots), len(lists), len(manifests), failed, time.monotonic() - started)
    log.info("table %s: expired %d snapshot(s) in process (%d kept); %d manifest list(s) and %d manifest(s) no longer "
             "referenced, %d of them not deleted; %.0f ms", table_name, result.snapshots, result.kept,
             result.manifest_lists, result.manifests, failed, 1000 * result.seconds)
    return result
