"""When table maintenance is due, and what snapshot expiry keeps. Pure: the clock is passed in.

Two triggers:
- every ``interval_s``, the full run: compaction, position-delete rewrite, manifest rewrite,
  snapshot expiry, orphan-file removal, in that order (expiry after compaction removes the files
  compaction replaced in the same run);
- as soon as a commit reports more than ``max_snapshots`` snapshots, expiry alone, because
  pyiceberg's commit cost grows with the snapshot count;
- as soon as a commit reports ``max_delete_files`` more delete files than the last position-delete
  rewrite left (a keyed table adds one per partition it changes, each commit, and every reader
  matches them against the data files of their partition), the position-delete rewrite alone.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from frazil.config import MaintenanceConfig


class Job(enum.Enum):
    COMPACT = "rewrite_data_files"
    POSITION_DELETES = "rewrite_position_delete_files"
    MANIFESTS = "rewrite_manifests"
    EXPIRE = "expire_snapshots"
    ORPHANS = "remove_orphan_files"


FULL_RUN = (Job.COMPACT, Job.POSITION_DELETES, Job.MANIFESTS, Job.EXPIRE, Job.ORPHANS)
# After a run with a failure (Spark cannot start, the catalog is down), nothing is due for this
# long, so a table over max_snapshots does not restart a failing Spark every second.
PAUSE_AFTER_FAILURE_S = 60.0


@dataclass
class Schedule:
    """The daemon's maintenance clock. ``started`` and ``now`` are ``time.monotonic()`` values."""

    cfg: MaintenanceConfig
    started: float
    last_full: float | None = None
    snapshots: int = 0          # the count the last commit reported
    paused_until: float = 0.0
    delete_files: int = 0       # the count the last commit reported
    delete_files_left: int = 0  # what the last position-delete rewrite left (one per partition, at best)

    def due(self, now: float) -> tuple[Job, ...]:
        if now < self.paused_until:
            return ()
        if now - (self.last_full if self.last_full is not None else self.started) >= self.cfg.interval_s:
            return FULL_RUN
        jobs = []
        if self.delete_files - self.delete_files_left > self.cfg.max_delete_files:
            jobs.append(Job.POSITION_DELETES)
        if self.snapshots > self.cfg.max_snapshots:
            jobs.append(Job.EXPIRE)
        return tuple(jobs)

    def ran(self, jobs: Sequence[Job], now: float, snapshots_after: int, *, failed: bool = False,
            delete_files_after: int | None = None) -> None:
        """Record a run. A failing full run waits for its next interval; after any failure nothing
        runs for ``PAUSE_AFTER_FAILURE_S``."""
        if tuple(jobs) == FULL_RUN:
            self.last_full = now
        self.snapshots = snapshots_after
        if delete_files_after is not None:
            self.delete_files = delete_files_after
            if Job.POSITION_DELETES in jobs:
                self.delete_files_left = delete_files_after
        if failed:
            self.paused_until = now + PAUSE_AFTER_FAILURE_S


def expire_before(snapshot_ms: Sequence[int], now_ms: int, cfg: MaintenanceConfig) -> int | None:
    """The cut-off (epoch ms) for ``expire_snapshots``: snapshots older than it go, the newest
    always stays. Old ones go after ``snapshot_max_age_s``; over ``max_snapshots``, only the
    newest half is kept. ``None`` when nothing would be expired."""
    newest_first = sorted(snapshot_ms, reverse=True)
    cutoff = now_ms - int(cfg.snapshot_max_age_s * 1000)
    if len(newest_first) > cfg.max_snapshots:
        keep = max(1, cfg.max_snapshots // 2)
        cutoff = max(cutoff, newest_first[keep - 1])
    if not any(ts < cutoff for ts in newest_first[1:]):
        return None
    return cutoff
