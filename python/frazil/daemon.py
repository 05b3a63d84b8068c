"""Lifecycle of ``frazil run``: event loop, signals, graceful drain, exit status.

What a run needs (the catalog and pyiceberg, Arrow, the coordination and ingest parts, Spark's
modules) is imported by the functions that use it, as the run starts: importing this module, as
``frazil --help`` and every other command does, loads none of it (tests/unit/test_startup_imports.py).
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from frazil import faults, systemd
from frazil.errors import CatalogUnavailable, ConfigError, FrazilError, first_line

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from frazil.config import Config
    from frazil.iceberg.offsets import TopicPartition
    from frazil.ingest.loop import Pipeline, Source
    from frazil.metrics import Stats
    from frazil.spark.maintainer import Maintainer, Maintainers
    from frazil.txlog import Journal

log = logging.getLogger(__name__)

# The hot loop makes one short-lived object per record (aiokafka's ConsumerRecord) and almost no
# reference cycles. With CPython's default thresholds (700, 10, 10) the cycle collector took 16%
# of the loop thread's samples while landing 1M records (py-spy, see docs/benchmarks.md).
GC_THRESHOLDS = (100_000, 50, 100)


def tune_gc() -> None:
    """Move what start-up built out of the collector's sight and collect young objects less often
    (``frazil`` sets the thresholds as it starts, cli/__init__.py; this sets them for other callers).
    Nothing is collected first: start-up leaves next to no cyclic garbage to freeze (a full
    collection here found 23 of some 140,000 objects and took 0.1 s before the first fetch)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# glibc gives each thread that allocates its own malloc arena (up to 8 per core) and seldom returns
# their free pages; the commit, Parquet and catalog threads each hold one. Two arenas kept the
# catalog-outage run's steady RSS about 30 MiB lower and its peak about 25 MiB lower (make outage).
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8   # glibc's mallopt parameter number


def limit_malloc_arenas() -> None:
    """Cap glibc's malloc arenas before the worker threads start, unless MALLOC_ARENA_MAX says otherwise."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)
        if libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS) != 1:
            log.debug("mallopt(M_ARENA_MAX) refused; malloc arenas are not capped")
    except (OSError, AttributeError):   # not glibc (musl has no mallopt): nothing to cap
        pass


def check_spark(cfg: Config) -> None:
    """Fail at start, not at the first bulk flush or maintenance run, when Spark cannot run here."""
    from frazil.spark import session as spark_session

    merged = [t.changes.target for t in cfg.tables if t.changes is not None and t.changes.target]
    uses = [what for what, on in (("[maintenance] enabled", cfg.maintenance.enabled),
                                  ("[spark] bulk_min_rows", cfg.spark.bulk_min_rows > 0),
                                  (f"merge = \"spark\" ({', '.join(merged)})", bool(merged))) if on]
    missing = spark_session.available() if uses else None
    if missing:
        raise ConfigError(f"{' and '.join(uses)} need Spark, but {missing}; install it or set "
                          "[maintenance] enabled = false, [spark] bulk_min_rows = 0 and merge = \"native\"")


async def check_sources(cfg: Config) -> None:
    """Before anything is created or changed (the catalog, a table): the brokers answer with the
    configured security (else KafkaUnavailable, exit status 3) and every listed topic exists (else
    NotFound, exit status 5), in both modes. A topic pattern may match no topic yet: its topics
    are picked up as they appear."""
    from frazil.status import partitions, source_topics

    if cfg.kafka.topics:
        await partitions(cfg.kafka, cfg.kafka.topics)
    else:
        await source_topics(cfg.kafka)


async def open_tables(cfg: Config) -> tuple[Catalog, dict[str, Table]]:
    """The catalog and the configured tables (created where they may be), as the daemon starts.
    A catalog that cannot answer meanwhile (locked, down, refusing) is one line and exit status 4,
    as it is when the catalog itself cannot be loaded: nothing has been read yet, and a supervisor
    starts the process again (the chaos run: a SQLite lock while a starting process loaded its
    tables ended it with a traceback and status 1)."""
    from frazil import config
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg import catalog_errors

    try:
        catalog = await asyncio.to_thread(iceberg_catalog.load, cfg.catalog)
        tables = {}
        for t in cfg.tables:
            if not t.columns and t.create and not await asyncio.to_thread(catalog.table_exists, t.name):
                log.info("table %s: created on its first records, with a schema inferred from them", t.name)
                continue   # opened by the pipeline when a record goes there
            tables[t.name] = await asyncio.to_thread(iceberg_catalog.ensure_table, catalog, t,
                                                     iceberg_catalog.maintenance_properties(cfg.maintenance))
            if t.changes is not None and t.changes.target:   # merge = "spark": the table Spark merges it into
                target = config.merge_target(t)
                tables[target.name] = await asyncio.to_thread(iceberg_catalog.ensure_table, catalog, target,
                                                              iceberg_catalog.maintenance_properties(cfg.maintenance))
        if cfg.dynamic is not None:   # tables earlier runs created from the records: their offsets and watermark count
            found = await asyncio.to_thread(iceberg_catalog.dynamic_tables, catalog, cfg.dynamic, cfg.pipeline)
            for name in found:
                if name not in tables:
                    tables[name] = await asyncio.to_thread(
                        iceberg_catalog.ensure_table, catalog, cfg.dynamic.table_config(name),
                        iceberg_catalog.maintenance_properties(cfg.maintenance))
            if found:
                log.info("%d table(s) named by the records already exist: %s", len(found), ", ".join(found[:10])
                         + (", ..." if len(found) > 10 else ""))
    except FrazilError:
        raise
    except catalog_errors.aws_setup_missing() as exc:   # no credentials: found at the first call
        raise catalog_errors.aws_setup_error(cfg.catalog, exc) from None
    except Exception as exc:  # noqa: BLE001 - locked, down, refused: say so in one line
        unserved = catalog_errors.unserved_call(cfg.catalog, exc)
        if unserved is not None:
            raise unserved from None
        raise CatalogUnavailable(f"catalog {cfg.catalog.name} ({catalog_errors.describe(cfg.catalog)}) did not answer "
                                 f"while the tables were opened: {type(exc).__name__}: "
                                 f"{first_line(exc)}. "
                                 "Nothing was read; "
                                 "start again once it answers") from None
    return catalog, tables


async def serve(cfg: Config, stop: asyncio.Event, *, until: Mapping[TopicPartition, int] | None = None,
                from_offsets: Mapping[TopicPartition, int] | None = None,
                notifier: systemd.Notifier | None = None, source: Source | None = None) -> Stats:
    """Run the pipeline (and table maintenance, when on) until ``stop`` is set, or until every
    partition of ``until`` was read up to its offset; in single mode the buffered rows are
    committed before returning.

    One commit path in both modes: the worker role (in the pipeline) answers the coordinator role
    over a channel, in process in single mode, on the control topic in distributed mode. The
    process's transaction log is settled first, before anything is read from Kafka. ``source``:
    where records come from (default: the consumer group of ``cfg.kafka``)."""
    from frazil.coordination.recovery import open_and_settle
    from frazil.iceberg.committer import Committer
    from frazil.txlog import JournalPolicy

    check_spark(cfg)
    if source is None:
        await check_sources(cfg)
    catalog, tables = await open_tables(cfg)
    journal = await asyncio.to_thread(
        open_and_settle, cfg.txlog_dir, JournalPolicy(fsync=cfg.txlog_fsync),
        lambda name: Committer(catalog, name, cfg.pipeline, max_attempts=cfg.max_commit_attempts))
    try:
        return await _serve(cfg, catalog, tables, journal, stop, until, from_offsets, notifier or systemd.Notifier({}),
                            source)
    finally:
        journal.close()


async def _serve(cfg: Config, catalog: Catalog, tables: Mapping[str, Table], journal: Journal, stop: asyncio.Event,
                 until: Mapping[TopicPartition, int] | None, from_offsets: Mapping[TopicPartition, int] | None,
                 notifier: systemd.Notifier, source: Source | None) -> Stats:
    from frazil.coordination import mode as modes
    from frazil.coordination.service import CoordinatorService
    from frazil.ingest import assemble
    from frazil.kafka.copies import SourceCopies
    from frazil.metrics import serve as serve_metrics
    from frazil.spark import session as spark_session
    from frazil.spark.bulk import SparkWriter
    from frazil.spark.maintainer import Maintainer, Maintainers
    from frazil.spark.merge import Merger

    # the Spark session's settings, worked out once when first needed (they look for the jars on disk)
    spark_settings = functools.cache(lambda: spark_session.for_config(cfg))
    bulk = SparkWriter(spark_settings(), cfg.catalog.name) if cfg.spark.bulk_min_rows else None
    mode = modes.for_config(cfg)
    fence = not faults.off("fencing")   # off only under a fault-injection test that shows what fencing prevents
    channel = mode.worker_channel(cfg)
    await channel.start()
    metrics = assemble.metrics(cfg)
    # bad records as the worker fetched them, for this process's dead-letter sink
    copies = SourceCopies() if cfg.on_bad_record == "dead_letter" else None

    def maintainer_for(name: str) -> Maintainer:
        return Maintainer.for_table(catalog, name, cfg.maintenance, spark_settings(), cfg.catalog.name, metrics)

    maintainer = Maintainers({name: maintainer_for(name) for name in tables}) if cfg.maintenance.enabled else None
    pipeline = assemble.pipeline(cfg, catalog, tables, bulk=bulk, channel=channel, journal=journal, metrics=metrics,
                                 drain_on_stop=mode.drain_on_stop,
                                 on_new_table=None if maintainer is None
                                 else lambda name: maintainer.add(name, maintainer_for(name)), source=source,
                                 copies=copies)
    coordinator_stop = asyncio.Event()   # set once the worker has drained: single mode drains through it
    service = CoordinatorService(cfg, catalog, pipeline.assignment, pipeline.metrics, journal=journal, mode=mode,
                                 fence=fence, copies=copies,
                                 on_committed=maintainer.committed if maintainer is not None else None)
    coordination = asyncio.create_task(service.run(coordinator_stop))
    staged = [t for t in cfg.tables if t.changes is not None and t.changes.target]
    merger = Merger(staged, lambda: spark_session.get(spark_settings()), catalog, cfg.catalog.name,
                    cfg.pipeline, pipeline.metrics, leading=lambda: service.leading) if staged else None
    merging = asyncio.create_task(merger.run(stop)) if merger is not None else None
    coordination.add_done_callback(lambda _: stop.set())  # a failed coordinator stops the process (raised below)
    pipeline.coordinator = coordination
    tune_gc()
    server = serve_metrics(pipeline.metrics, cfg.metrics.host, cfg.metrics.port) if cfg.metrics.port else None
    if server is not None:
        log.info("metrics at http://%s:%d/metrics", cfg.metrics.host, cfg.metrics.port)
    maintenance = asyncio.create_task(maintainer.run(stop)) if maintainer is not None else None
    watcher = (asyncio.create_task(_stop_when_read(pipeline, until, from_offsets or {}, stop))
               if until is not None else None)
    finished = asyncio.Event()

    def service_status() -> str:
        s = pipeline.stats
        return (f"{len(pipeline.assignment())} partition(s), {s.rows_committed} rows committed in {s.commits} "
                f"commit(s)" + (", paused by backpressure" if pipeline.paused else ""))

    notifying = asyncio.create_task(systemd.serve(notifier, stop, finished, ready=lambda: pipeline.joined,
                                                  status=service_status))
    try:
        await pipeline.run(stop)
    finally:
        if watcher is not None:
            watcher.cancel()
        coordinator_stop.set()
        stop.set()
        await asyncio.wait([coordination])
        await channel.stop()
        if not coordination.cancelled() and coordination.exception() is not None:
            raise coordination.exception()  # type: ignore[misc]
        if maintenance is not None and maintainer is not None:
            stop.set()
            await _stop_maintenance(maintainer, maintenance)
        if merging is not None:
            await merging   # a merge under way ends first: its MERGE commits whole or not at all
        await asyncio.to_thread(spark_session.stop)  # if bulk writes or maintenance started it
        if server is not None:
            server.shutdown()
            server.server_close()
        finished.set()
        await notifying
    return pipeline.stats


async def _stop_when_read(pipeline: Pipeline, until: Mapping[TopicPartition, int], start: Mapping[TopicPartition, int],
                          stop: asyncio.Event) -> None:
    """Set ``stop`` once every partition was read up to ``until``; say how far it got every 10 s."""
    total = sum(max(0, end - start.get(tp, 0)) for tp, end in until.items())
    last_report = time.monotonic()
    while not stop.is_set():
        positions = pipeline.positions()
        if all(positions.get(tp, -1) >= end for tp, end in until.items() if end > 0):
            log.info("read every partition up to its end offset; committing what is buffered and stopping")
            stop.set()
        elif time.monotonic() - last_report >= 10:
            last_report = time.monotonic()
            read = sum(min(end, positions.get(tp, start.get(tp, 0))) - start.get(tp, 0) for tp, end in until.items())
            log.info("backfill: read %d of %d records (%.0f%%), %d rows committed", read, total,
                     100 * read / max(total, 1), pipeline.stats.rows_committed)
        await asyncio.sleep(0.2)


async def _stop_maintenance(maintainer: Maintainers, task: asyncio.Task[None]) -> None:
    """Cancel the running Spark job (a half-done rewrite commits nothing) and wait for it."""
    if not task.done():
        await asyncio.to_thread(maintainer.cancel)
    await asyncio.wait([task])
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


def _rearm_faults() -> None:
    try:
        faults.rearm_from_file()
    except (OSError, ValueError) as exc:
        log.error("re-arming fault points from $%s failed: %s", faults.FILE_ENV, exc)
        return
    log.warning("fault points re-armed: %s", faults.armed() or "none")


def run(cfg: Config) -> Stats:
    """Run in the foreground. SIGTERM or SIGINT drains and stops; a second one exits at once
    (nothing is lost: uncommitted records are read again from the table's offsets)."""
    import uvloop

    limit_malloc_arenas()

    async def main() -> Stats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if stop.is_set():
                log.warning("second %s: exiting now without draining", signal.Signals(signum).name)
                os._exit(128 + signum)
            log.info("%s: draining, then stopping (send it again to exit at once)", signal.Signals(signum).name)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        if os.environ.get(faults.FILE_ENV):
            log.warning("%s is set: SIGUSR1 re-arms fault points from it (a fault-injection test)", faults.FILE_ENV)
            loop.add_signal_handler(signal.SIGUSR1, _rearm_faults)
        notifier = systemd.Notifier()
        if notifier.enabled:
            log.info("under systemd: READY once partitions are assigned%s", "" if notifier.watchdog_interval_s is None
                     else f", WATCHDOG every {notifier.watchdog_interval_s:g}s")
        log.info("frazil pipeline %s -> %s, commit every %.1fs (pid %d)", cfg.pipeline,
                 ", ".join([*(t.name for t in cfg.tables), *([cfg.dynamic.table] if cfg.dynamic else [])]),
                 cfg.commit_interval_s, os.getpid())
        if faults.armed():
            log.warning("FRAZIL_FAULTS is set (%s): this process is under a fault-injection test%s", faults.armed(),
                        "; FENCING IS OFF: zombie writes and overlapping offset ranges are committed"
                        if faults.off("fencing") else "")
        try:
            return await serve(cfg, stop, notifier=notifier)
        finally:
            notifier.close()

    return uvloop.run(main())
