"""Table maintenance as Spark jobs: Iceberg's own procedures and actions on the shared catalog.

Each job commits to the table by itself, concurrently with ingestion. Nothing here touches
frazil's offsets: they live in table properties, and a Spark commit re-applies its change on the
latest metadata, properties included. A conflict with an ingestion commit fails one side's
compare-and-swap; frazil's committer re-reads and retries, Spark retries its commit (with
Iceberg's commit retry inside Spark, which re-validates the rewrite on the refreshed table;
``catalog.REQUIRED_PROPERTIES`` gives it enough retries to get past frequent ingestion commits).

Blocking (py4j waits on the JVM): call from a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from frazil.config import MaintenanceConfig
from frazil.errors import MaintenanceError
from frazil.flow import retry
from frazil.spark import schedule
from frazil.spark.schedule import Job

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobResult:
    job: Job
    seconds: float
    attempts: int
    counts: dict[str, int] = field(default_factory=dict)   # the procedure's own output columns


def describe(exc: BaseException) -> str:
    """One line on what went wrong, the Java exception's own message when Spark raised one."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    text = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {text[:500]}"


def _timestamp(ms: int) -> str:
    """A Spark SQL timestamp literal (the session's time zone is UTC, see session.conf)."""
    return "TIMESTAMP '" + datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f") + "'"


class TableJobs:
    """The maintenance jobs of one table. ``spark`` is a session from ``session.get``."""

    def __init__(self, spark: Any, catalog_name: str, table_name: str, cfg: MaintenanceConfig, *,
                 attempts: int = 3, backoff_s: float = 1.0, sleep: Callable[[float], None] = time.sleep,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._spark, self._catalog, self._table, self._cfg = spark, catalog_name, table_name, cfg
        self._attempts, self._sleep, self._clock_ms = attempts, sleep, clock_ms
        self._backoff = retry.Backoff(backoff_s, 8 * backoff_s)
        self.cancelled = False

    def cancel(self) -> None:
        """Stop: cancel the running Spark job (a half-done job commits nothing) and run no more."""
        self.cancelled = True
        self._spark.sparkContext.cancelAllJobs()

    def run(self, jobs: tuple[Job, ...]) -> tuple[list[JobResult], list[Job]]:
        """Run ``jobs`` in order; a failing job is logged and the next one still runs. Returns
        the results and the jobs that failed every attempt."""
        results, failed = [], []
        for job in jobs:
            if self.cancelled:
                break
            try:
                results.append(self.one(job))
            except MaintenanceError as exc:
                if self.cancelled:
                    log.info("%s", exc)
                    break
                log.error("%s", exc)
                failed.append(job)
        if failed:
            log.error("maintenance of %s: %s failed; ingestion goes on and they run again at their next turn",
                      self._table, ", ".join(j.value for j in failed))
        return results, failed

    def one(self, job: Job) -> JobResult:
        action: Callable[[], dict[str, int] | None] = {
            Job.COMPACT: self._compact, Job.POSITION_DELETES: self._rewrite_position_deletes,
            Job.MANIFESTS: self._rewrite_manifests, Job.EXPIRE: self._expire, Job.ORPHANS: self._remove_orphans,
        }[job]
        started = time.monotonic()
        for attempt in retry.attempts(self._attempts, self._backoff, self._sleep):
            try:
                counts = action()
            except Exception as exc:  # py4j and Spark raise many kinds; all are retried
                summary = describe(exc)
                if self.cancelled:
                    raise MaintenanceError(f"{job.value} on {self._table} was cancelled (frazil is stopping)") from exc
                if attempt == self._attempts:
                    raise MaintenanceError(f"{job.value} on {self._table} failed {attempt} times; last error: "
                                           f"{summary}") from exc
                log.warning("%s on %s: attempt %d/%d failed (%s); retrying", job.value, self._table, attempt,
                            self._attempts, summary)
                continue
            result = JobResult(job, time.monotonic() - started, attempt, counts or {})
            log.info("maintenance %s on %s took %.1fs: %s", job.value, self._table, result.seconds,
                     ", ".join(f"{k}={v}" for k, v in result.counts.items()) or "nothing to do")
            return result
        raise AssertionError("unreachable")

    def _call(self, procedure: str, **args: str) -> dict[str, int]:
        rendered = ", ".join(f"{name} => {value}" for name, value in args.items())
        # fully qualified: a namespace named like the catalog would otherwise be read as the catalog
        rows = self._spark.sql(f"CALL {self._catalog}.system.{procedure}(table => '{self._catalog}.{self._table}'"
                               f"{', ' + rendered if rendered else ''})").collect()
        return {k: int(v) for k, v in rows[0].asDict().items() if isinstance(v, int)} if rows else {}

    def _compact(self) -> dict[str, int]:
        options = {"target-file-size-bytes": str(self._cfg.target_file_size_mb * 1024 * 1024),
                   "min-input-files": str(self._cfg.min_input_files)}
        rendered = "map(" + ", ".join(f"'{k}', '{v}'" for k, v in options.items()) + ")"
        if self._cfg.sort_order:
            return self._call("rewrite_data_files", strategy="'sort'", sort_order=f"'{self._cfg.sort_order}'",
                              options=rendered)
        return self._call("rewrite_data_files", options=rendered)

    def _rewrite_position_deletes(self) -> dict[str, int]:
        return self._call("rewrite_position_delete_files")

    def _rewrite_manifests(self) -> dict[str, int]:
        return self._call("rewrite_manifests")

    def snapshot_times_ms(self) -> list[int]:
        rows = self._spark.sql(f"SELECT unix_millis(committed_at) AS ms FROM {self._catalog}.{self._table}.snapshots")
        return [int(r.ms) for r in rows.collect()]

    def _expire(self) -> dict[str, int] | None:
        cutoff = schedule.expire_before(self.snapshot_times_ms(), self._clock_ms(), self._cfg)
        if cutoff is None:
            return None
        # The data files of expired snapshots that no kept snapshot references are deleted too.
        return self._call("expire_snapshots", older_than=_timestamp(cutoff), retain_last="1")

    def _remove_orphans(self) -> dict[str, int]:
        """Files under the table's location that no snapshot references and that are older than
        ``orphan_min_age_s`` (left by crashed cycles). The SQL procedure refuses ages below a day;
        the action it wraps does not, and config.py keeps the age above the longest time a written
        file can wait for its commit."""
        jvm, jsession = self._spark._jvm, self._spark._jsparkSession
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(jsession, f"{self._catalog}.{self._table}")
        older_than = self._clock_ms() - int(self._cfg.orphan_min_age_s * 1000)
        action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(jsession).deleteOrphanFiles(table)
        if not str(table.location()).startswith(("file:", "/", "hdfs:")):
            # object storage: list through the table's FileIO (S3FileIO), not a Hadoop FileSystem the
            # classpath lacks ("No FileSystem for scheme s3")
            action = action.usePrefixListing(True)
        result = action.olderThan(older_than).execute()
        removed = [str(path) for path in result.orphanFileLocations()]
        for path in removed[:20]:
            log.info("removed orphan file %s", path)
        if len(removed) > 20:
            log.info("... and %d more orphan files", len(removed) - 20)
        return {"orphan_files_count": len(removed)}
