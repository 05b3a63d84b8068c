"""``frazil backfill``: land everything the topics hold now in big flushes written by Spark, through
the same exactly-once path as ``frazil run``, then stop.

It lands every table of the pipeline, wherever routing sends the records: the configured tables
and those ``[dynamic]`` names. It is done when a restart would read no record a table still
needs: for each partition of a topic some table may take, where the worker's own rule
(``buffers.positions.resume_at``) starts it again is at or past the end offset the backfill
started with. Either the pipeline's watermark reached the end (every record below it is in every
table that takes it; the final drain cycle keeps it with its last commit), or every table that may
take the topic holds the end (and no ``[dynamic]`` field names further ones). A table that takes a
topic by a route field need not hold the end itself: the last records may not be its, and its
offset moves only with a record it takes.

Nothing is refused for its shape: a ``kafka.topic_pattern`` is read as ``run`` reads it, and the
target is the end offsets of the topics it matches when the backfill starts (a topic created
meanwhile is read too, not waited for); tables without declared columns are created from their
first records as ``run`` creates them, and written by Spark like the others.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from collections.abc import Mapping
from typing import Any, TypeVar

import uvloop
from pyiceberg.catalog import Catalog

from frazil.config import Config
from frazil.daemon import limit_malloc_arenas, serve
from frazil.errors import BackfillIncomplete
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import TopicPartition
from frazil.ingest.routing import Router
from frazil.metrics import Stats
from frazil.status import Restart, end_offsets, load_tables, restart, source_topics, table_names

log = logging.getLogger(__name__)
S = TypeVar("S")
# serve runs, at most: a pass that read everything yet left records unlanded (a rebalance dropped its
# buffers after the end check) is followed by another from where the tables stand
PASSES = 3


def backfill(cfg: Config, *, batch_rows: int, memory_mb: int) -> Stats:
    """Land everything the topics hold now (from where a restart would resume to the current end
    offsets) in big flushes written by Spark, through the same exactly-once path as ``run``, then
    stop. With ``kafka.topic_pattern``, the topics it matches when the backfill starts. Stop
    ``frazil run`` for the pipeline first: both would share its consumer group."""
    cfg = _changed(
        cfg, max_buffer_records=batch_rows, memory_budget_bytes=memory_mb * 1024 * 1024,
        commit_interval_s=max(cfg.commit_interval_s, 600.0),   # flush on size, not time
        # a Spark flush of a whole batch may take minutes: the cycle waits for it
        coordination=_changed(cfg.coordination, mode="single",
                              commit_timeout_s=max(cfg.coordination.commit_timeout_s, 3600.0)),
        spark=_changed(cfg.spark, bulk_min_rows=1),   # every table's part of every flush
        maintenance=_changed(cfg.maintenance, enabled=False))
    router = Router(cfg.tables, cfg.dynamic)
    limit_malloc_arenas()

    async def main() -> Stats:
        topics = await source_topics(cfg.kafka)
        if not topics:
            log.warning("backfill %s: no topic matches kafka.topic_pattern %r yet; nothing to land", cfg.pipeline,
                        cfg.kafka.topic_pattern)
            return Stats()
        ends = await end_offsets(cfg.kafka, topics)
        catalog = await asyncio.to_thread(iceberg_catalog.load, cfg.catalog)
        before = await asyncio.to_thread(_restart, catalog, cfg, router, ends)
        if not not_landed(ends, before.resume, router):
            log.info("backfill %s: every table holds what it takes of %d partition(s) up to their end offsets; "
                     "nothing to land", cfg.pipeline, len(ends))
            return Stats()
        todo = sum(max(0, end - before.resume.get(tp, 0)) for tp, end in ends.items())
        log.info("backfill %s: %d records to read from %d partition(s), in flushes of up to %d rows written by Spark",
                 cfg.pipeline, todo, len(ends), batch_rows)
        asked = asyncio.Event()   # SIGTERM or SIGINT: stop, and say how far it got
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, asked.set)
        stats = Stats()
        resume = before.resume
        for run in range(1, PASSES + 1):
            stop = asyncio.Event()
            relay = asyncio.create_task(_relay(asked, stop))
            try:
                ran = await serve(cfg, stop, until=ends, from_offsets=resume)
            finally:
                relay.cancel()
                await asyncio.gather(relay, return_exceptions=True)
            stats = _summed(stats, ran)
            after = await asyncio.to_thread(_restart, catalog, cfg, router, ends)
            short = not_landed(ends, after.resume, router)
            moved = any(after.resume.get(tp, -1) > resume.get(tp, -1) for tp in short)
            if (not short or asked.is_set() or ran.failed_commits or ran.assignments < 2 or not moved
                    or run == PASSES):
                # done; stopped on request; commits failed (another pass would fail the same way); no
                # rebalance to blame, or a pass that moved nothing (records no table takes, left below
                # the watermark): another pass would end the same
                break
            # read to the end, no commit failed, reassigned meanwhile, and yet short: a rebalance after the
            # end check (the group's session lost during a long flush, another member joining) dropped
            # what was buffered. Read it again
            left = sum(end - (0 if at is None else at) for at, end in short.values())
            log.warning("backfill %s: read every partition to its end, but %d record(s) of %d partition(s) did not "
                        "land (a rebalance dropped what was buffered: nothing is lost or doubled); reading them again "
                        "from where the tables stand (pass %d of %d)", cfg.pipeline, left, len(short), run + 1, PASSES)
            resume = after.resume
        if short:
            by_value = sorted({t for t, _ in short if router.for_topic(t).by_value})
            raise BackfillIncomplete(
                f"backfill {cfg.pipeline} stopped before landing everything: (where a restart resumes, target) per "
                f"partition { {f'{t}/{p}': v for (t, p), v in sorted(short.items())} }. Nothing is lost or doubled; "
                "run it again" + (
                    f". On {', '.join(by_value)} a field of each record decides which tables take it: the last "
                    "records, when no table takes them, stay below the watermark until a later record lands "
                    "(`frazil offsets` shows where each table stands)" if by_value else ""))
        return stats

    return uvloop.run(main())


async def _relay(asked: asyncio.Event, stop: asyncio.Event) -> None:
    await asked.wait()
    stop.set()


def _summed(a: Stats, b: Stats) -> Stats:
    """Two passes' counts added up (the first pass's start kept)."""
    return dataclasses.replace(b, started=a.started, **{f.name: getattr(a, f.name) + getattr(b, f.name)
                                                        for f in dataclasses.fields(Stats) if f.name != "started"})


def not_landed(ends: Mapping[TopicPartition, int], resume: Mapping[TopicPartition, int],
               router: Router) -> dict[TopicPartition, tuple[int | None, int]]:
    """The partitions of topics some table may take whose records below ``ends`` are not all in
    every table that takes them: where a restart resumes (``resume``, from ``status.restart``;
    missing: nothing known) is below the end. Each with (where it resumes, the end). A topic no
    table takes has nothing to land."""
    out: dict[TopicPartition, tuple[int | None, int]] = {}
    for tp, end in sorted(ends.items()):
        takers = router.takers(tp[0])
        if not takers.tables and not takers.by_values:
            continue
        at = resume.get(tp)
        if (0 if at is None else at) < end:
            out[tp] = (at, end)
    return out


def _restart(catalog: Catalog, cfg: Config, router: Router, ends: Mapping[TopicPartition, int]) -> Restart:
    """Blocking. Where a restart would read each partition from, by what every table holds now."""
    tables = load_tables(catalog, table_names(catalog, cfg))
    held = {name: Committer(catalog, name, cfg.pipeline).held(table) for name, table in tables.items()
            if table is not None}
    return restart(sorted(ends), held, router)


def _changed(section: S, **changes: Any) -> S:
    """A copy of a frozen config section with ``changes``, validated again."""
    return dataclasses.replace(section, **changes)  # type: ignore[type-var]
