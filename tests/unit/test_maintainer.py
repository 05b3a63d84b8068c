"""The daemon's maintenance service with a fake Spark side (pure logic, no JVM)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from frazil.config import MaintenanceConfig
from frazil.iceberg.committer import CommitResult
from frazil.iceberg.expiry import Expired
from frazil.metrics import Metrics
from frazil.spark.jobs import JobResult, TableJobs
from frazil.spark.maintainer import Maintainer, Maintainers
from frazil.spark.schedule import Job, Schedule


class FakeJobs:
    def __init__(self) -> None:
        self.ran: list[tuple[Job, ...]] = []

    def run(self, jobs: tuple[Job, ...]) -> tuple[list[JobResult], list[Job]]:
        self.ran.append(jobs)
        return ([JobResult(j, 0.5, 1, {"x": 1}) for j in jobs if j is not Job.ORPHANS],
                [j for j in jobs if j is Job.ORPHANS])


def result(snapshots: int) -> CommitResult:
    return CommitResult("c", 1, 10, {}, 1, 0.01, snapshots=snapshots)


@pytest.mark.asyncio
async def test_a_commit_over_max_snapshots_runs_expiry_once_and_failures_are_counted_not_raised() -> None:
    now = [0.0]
    fake = FakeJobs()
    metrics = Metrics("p", "db.t")
    counts = iter([5, 5, 5])
    m = Maintainer(Schedule(MaintenanceConfig(interval_s=100, max_snapshots=10), 0.0), lambda: fake,  # type: ignore[arg-type, return-value]
                   metrics, snapshot_count=lambda: next(counts), clock=lambda: now[0])
    stop = asyncio.Event()
    task = asyncio.create_task(m.run(stop))
    m.committed(result(11))
    m.committed(result(0))   # a cycle that landed nothing says nothing about the count
    await asyncio.sleep(1.2)
    assert fake.ran == [(Job.EXPIRE,)]
    assert metrics.value("frazil_table_snapshots") == 5
    now[0] = 100.0   # the full run: the failing orphan removal is counted, the loop goes on
    await asyncio.sleep(1.2)
    stop.set()
    await task
    assert len(fake.ran) == 2 and metrics.value("frazil_maintenance_runs_total", job="remove_orphan_files",
                                                result="failed") == 1
    assert metrics.value("frazil_maintenance_runs_total", job="rewrite_data_files", result="ok") == 1


@pytest.mark.asyncio
async def test_spark_that_cannot_start_is_logged_and_tried_again_later() -> None:
    def broken() -> TableJobs:
        raise RuntimeError("no java")

    metrics = Metrics("p", "db.t")
    m = Maintainer(Schedule(MaintenanceConfig(interval_s=100, max_snapshots=10), 0.0), broken, metrics,
                   snapshot_count=lambda: 20, clock=lambda: 1.0)
    m.committed(result(20))
    stop = asyncio.Event()
    task = asyncio.create_task(m.run(stop))
    await asyncio.sleep(2.5)
    stop.set()
    await task
    assert metrics.value("frazil_maintenance_runs_total", job="expire_snapshots", result="failed") == 1


@pytest.mark.asyncio
async def test_expiry_runs_in_process_when_it_can_and_on_spark_when_it_cannot() -> None:
    """Over max_snapshots: the in-process expiry first; Spark never starts while it does the job.
    When it cannot (a compaction in the history: None) or fails, Spark's expiry runs instead."""
    outcomes: list[Expired | None | Exception] = [
        Expired(snapshots=6, kept=5, manifest_lists=6, manifests=2, failed_deletes=0, seconds=0.01),
        None, RuntimeError("catalog down")]
    calls: list[int] = []

    def expire() -> Expired | None:
        calls.append(1)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    fake = FakeJobs()
    started: list[int] = []

    def jobs() -> FakeJobs:
        started.append(1)
        return fake

    metrics = Metrics("p", "db.t")
    m = Maintainer(Schedule(MaintenanceConfig(interval_s=1000, max_snapshots=10), 0.0), jobs,  # type: ignore[arg-type]
                   metrics, snapshot_count=lambda: 5, clock=lambda: 1.0, expire_in_process=expire)
    for _ in range(3):
        m.committed(result(11))
        await m.run_due()
    assert len(calls) == 3 and fake.ran == [(Job.EXPIRE,), (Job.EXPIRE,)] and len(started) == 1
    assert m.runs[0][0].counts["in_process"] == 1 and m.runs[0][0].counts["expired_snapshots"] == 6
    assert metrics.value("frazil_maintenance_runs_total", job="expire_snapshots_in_process", result="ok") == 1
    assert metrics.value("frazil_maintenance_runs_total", job="expire_snapshots_in_process", result="failed") == 1
    assert metrics.value("frazil_maintenance_runs_total", job="expire_snapshots", result="ok") == 2


@pytest.mark.asyncio
async def test_a_commit_that_makes_expiry_due_wakes_the_service_at_once() -> None:
    """Commits back to back took a second's worth of snapshots past max_snapshots before the next
    check; a commit that makes a job due now runs it at once, in one table's service and in the
    pipeline's (``Maintainers``)."""
    for wrapped in (False, True):
        fake = FakeJobs()
        m = Maintainer(Schedule(MaintenanceConfig(interval_s=1000, max_snapshots=10), 0.0), lambda fake=fake: fake,  # type: ignore[arg-type, return-value]
                       Metrics("p", "db.t"), snapshot_count=lambda: 5, clock=lambda: 1.0)
        service = Maintainers({"db.t": m}) if wrapped else m
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        await asyncio.sleep(0.05)   # past its first check: the next is CHECK_EVERY_S away
        m.committed(result(9))
        await asyncio.sleep(0.05)
        assert fake.ran == []
        service.committed(dataclasses.replace(result(11), table="db.t"))
        await asyncio.sleep(0.2)
        assert fake.ran == [(Job.EXPIRE,)], wrapped
        stop.set()
        await task
