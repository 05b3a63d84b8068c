"""The daemon's maintenance service: runs the due Spark jobs off the event loop while ingestion goes on.

Ingestion never waits for it: jobs run in a worker thread (py4j blocks on the JVM, not on the
GIL), and their commits meet ingestion's only at the catalog's compare-and-swap, where the
loser re-reads and retries. A failing job is logged and counted, and runs again at its next turn;
it never stops ingestion. The Spark session starts on the first due job, not at start-up; snapshot
expiry due between full runs runs in process, without Spark, when the history it removes only
appended (``iceberg/expiry.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from pyiceberg.catalog import Catalog

from frazil.config import MaintenanceConfig
from frazil.iceberg import expiry
from frazil.iceberg.commits import delete_files
from frazil.iceberg.committer import CommitResult
from frazil.iceberg.expiry import Expired
from frazil.metrics import Metrics
from frazil.spark import session
from frazil.spark.jobs import JobResult, TableJobs
from frazil.spark.schedule import PAUSE_AFTER_FAILURE_S, Job, Schedule

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0
EXPIRE_IN_PROCESS = "expire_snapshots_in_process"   # its metrics' job label


class Maintainer:
    def __init__(self, schedule: Schedule, jobs: Callable[[], TableJobs], metrics: Metrics, *,
                 snapshot_count: Callable[[], int], clock: Callable[[], float] = time.monotonic,
                 delete_file_count: Callable[[], int] | None = None,
                 expire_in_process: Callable[[], Expired | None] | None = None) -> None:
        """``jobs`` builds the table's jobs (starting Spark) on first use; ``snapshot_count``
        reads the table's snapshot count (blocking); ``expire_in_process`` (blocking) expires
        without Spark when it can (``iceberg/expiry.py``), None when Spark's expiry must run."""
        self._schedule, self._make_jobs, self._metrics = schedule, jobs, metrics
        self._snapshot_count, self._clock = snapshot_count, clock
        self._delete_file_count = delete_file_count
        self._expire_in_process = expire_in_process
        self._jobs: TableJobs | None = None
        self.runs: list[list[JobResult]] = []
        # set by a commit that made a job due: the running loop goes on at once, not at its next
        # check; one event for every table of a pipeline (Maintainers shares its own)
        self.wake = asyncio.Event()

    @classmethod
    def for_table(cls, catalog: Catalog, table_name: str, cfg: MaintenanceConfig, spark_settings: Mapping[str, str],
                  catalog_name: str, metrics: Metrics) -> Maintainer:
        """The service for one table: Spark (started on the first due job) with ``spark_settings``
        on the catalog ``catalog_name``, the snapshot count from ``catalog``."""
        def jobs() -> TableJobs:
            return TableJobs(session.get(spark_settings), catalog_name, table_name, cfg)

        def snapshot_count() -> int:
            return len(catalog.load_table(table_name).metadata.snapshots)

        def delete_file_count() -> int:
            return delete_files(catalog.load_table(table_name))

        def expire_in_process() -> Expired | None:
            return expiry.expire(catalog, table_name, cfg)

        return cls(Schedule(cfg, time.monotonic()), jobs, metrics, snapshot_count=snapshot_count,
                   delete_file_count=delete_file_count,
                   expire_in_process=expire_in_process if cfg.expire_in_process else None)

    def committed(self, result: CommitResult) -> None:
        """Called (on the event loop) after every commit cycle with the snapshot count it saw (0:
        it landed nothing and did not look). A job it makes due runs at once rather than at the
        next check (commits back to back outran expiry by a second's worth of snapshots)."""
        if not result.snapshots:
            return
        self._schedule.snapshots = result.snapshots
        self._schedule.delete_files = result.delete_files
        self._metrics.snapshots.set(result.snapshots)
        if self._schedule.due(self._clock()):
            self.wake.set()

    def cancel(self) -> None:
        """Blocking: cancel the running job, if Spark has started (called once ingestion has stopped)."""
        if self._jobs is not None:
            self._jobs.cancel()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.run_due()
            await _pause(stop, self.wake)

    async def run_due(self) -> None:
        """Run the jobs that are due now, if any."""
        due = self._schedule.due(self._clock())
        if due:
            await self._run(due)

    async def _run(self, due: tuple[Job, ...]) -> None:
        if due == (Job.EXPIRE,) and self._expire_in_process is not None and await self._expired_in_process():
            return
        log.info("maintenance: running %s", ", ".join(j.value for j in due))
        results: list[JobResult] = []
        failed = True
        try:
            results, failed = await asyncio.to_thread(self._blocking_run, due)
        except Exception as exc:  # noqa: BLE001 - e.g. Spark cannot start: loud, counted, retried later
            log.error("maintenance could not run (%s: %s); ingestion goes on, it is tried again in %.0fs at the "
                      "earliest", type(exc).__name__, exc, PAUSE_AFTER_FAILURE_S)
            for job in due:
                self._metrics.maintenance(job.value, "failed")
        snapshots, deletes = self._schedule.snapshots, None
        try:
            snapshots = await asyncio.to_thread(self._snapshot_count)
            if self._delete_file_count is not None:
                deletes = await asyncio.to_thread(self._delete_file_count)
        except Exception as exc:  # noqa: BLE001 - the catalog may be down; the next commit reports it
            log.warning("maintenance: cannot read the snapshot count (%s)", exc)
        self._schedule.ran(due, self._clock(), snapshots, failed=failed, delete_files_after=deletes)
        self._metrics.snapshots.set(snapshots)
        if results:
            self.runs.append(results)

    async def _expired_in_process(self) -> bool:
        """Expiry without Spark; False when it cannot (Spark's expiry runs instead)."""
        expire = self._expire_in_process
        assert expire is not None
        try:
            done = await asyncio.to_thread(expire)
        except Exception as exc:  # noqa: BLE001 - e.g. the catalog is down: Spark's expiry tries next
            log.warning("maintenance: snapshot expiry in process failed (%s: %s); Spark's expiry runs instead",
                        type(exc).__name__, exc)
            self._metrics.maintenance(EXPIRE_IN_PROCESS, "failed")
            return False
        if done is None:
            return False
        self._metrics.maintenance(EXPIRE_IN_PROCESS, "ok", done.seconds)
        self._schedule.ran((Job.EXPIRE,), self._clock(), done.kept)
        self._metrics.snapshots.set(done.kept)
        self.runs.append([JobResult(Job.EXPIRE, done.seconds, 1, {
            "in_process": 1, "expired_snapshots": done.snapshots, "deleted_manifest_lists_count": done.manifest_lists,
            "deleted_manifest_files_count": done.manifests, "failed_deletes": done.failed_deletes})])
        return True

    def _blocking_run(self, due: tuple[Job, ...]) -> tuple[list[JobResult], bool]:
        if self._jobs is None:
            self._jobs = self._make_jobs()
        results, failed = self._jobs.run(due)
        for result in results:
            self._metrics.maintenance(result.job.value, "ok", result.seconds)
        for job in failed:
            self._metrics.maintenance(job.value, "failed")
        return results, bool(failed)


class Maintainers:
    """The maintenance of every table of a pipeline: one schedule per table, one table's jobs at a
    time (they share one Spark session on a small machine)."""

    def __init__(self, by_table: Mapping[str, Maintainer]) -> None:
        self._wake = asyncio.Event()
        self._by_table: dict[str, Maintainer] = {}
        for table, maintainer in by_table.items():
            self.add(table, maintainer)

    def add(self, table: str, maintainer: Maintainer) -> None:
        """A table opened while running (named by the records)."""
        if self._by_table.setdefault(table, maintainer) is maintainer:
            maintainer.wake = self._wake

    def committed(self, result: CommitResult) -> None:
        maintainer = self._by_table.get(result.table)
        if maintainer is not None:
            maintainer.committed(result)

    def cancel(self) -> None:
        for maintainer in self._by_table.values():
            maintainer.cancel()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for maintainer in self._by_table.values():
                if stop.is_set():
                    break
                await maintainer.run_due()
            await _pause(stop, self._wake)


async def _pause(stop: asyncio.Event, wake: asyncio.Event) -> None:
    """Until ``stop`` or ``wake`` is set, ``CHECK_EVERY_S`` at most; clears ``wake``."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waits, timeout=CHECK_EVERY_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    wake.clear()
