"""``frazil backfill``: land everything the topics hold now in big flushes written by Spark, through
the same exactly-once path as ``frazil run``, then stop."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal

import uvloop
from pyiceberg.exceptions import NoSuchTableError

from frazil.config import Config
from frazil.daemon import limit_malloc_arenas, serve
from frazil.errors import CommitOutcomeUnknown, ConfigError
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg.committer import Committer
from frazil.metrics import Stats
from frazil.status import end_offsets

log = logging.getLogger(__name__)


def backfill(cfg: Config, *, batch_rows: int, memory_mb: int) -> Stats:
    """Land everything the topics hold now (from the table's offsets to the current end offsets)
    in big flushes written by Spark, through the same exactly-once path as ``run``, then stop.
    Stop ``frazil run`` for the pipeline first: both would share its consumer group."""
    if (len(cfg.tables) != 1 or cfg.table.routed or cfg.kafka.topic_pattern or cfg.dynamic is not None
            or not cfg.table.columns):
        raise ConfigError("frazil backfill lands one table with declared columns that takes every record of a "
                          "kafka.topics list; otherwise (several tables, routing, [dynamic], a topic_pattern, "
                          "inferred columns) run `frazil run`: it lands the backlog the same way, in process")
    cfg = dataclasses.replace(
        cfg, max_buffer_records=batch_rows, memory_budget_bytes=memory_mb * 1024 * 1024,
        commit_interval_s=max(cfg.commit_interval_s, 600.0),   # flush on size, not time
        # a Spark flush of a whole batch may take minutes: the cycle waits for it
        coordination=dataclasses.replace(cfg.coordination, mode="single",
                                        commit_timeout_s=max(cfg.coordination.commit_timeout_s, 3600.0)),
        spark=dataclasses.replace(cfg.spark, bulk_min_rows=1),
        maintenance=dataclasses.replace(cfg.maintenance, enabled=False))

    limit_malloc_arenas()

    async def main() -> Stats:
        ends = await end_offsets(cfg.kafka, cfg.kafka.topics)
        catalog = await asyncio.to_thread(iceberg_catalog.load, cfg.catalog)
        try:
            table = await asyncio.to_thread(catalog.load_table, cfg.table.name)
            stored = Committer(catalog, cfg.table.name, cfg.pipeline).held(table).offsets   # after a rollback, the data's
        except NoSuchTableError:
            stored = {}
        todo = sum(max(0, end - stored.get(tp, 0)) for tp, end in ends.items())
        log.info("backfill %s: %d records to land from %d partition(s), in flushes of up to %d rows written by Spark",
                 cfg.pipeline, todo, len(ends), batch_rows)
        stop = asyncio.Event()
        if todo == 0:
            return Stats()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        stats = await serve(cfg, stop, until=ends, from_offsets=stored)
        table = await asyncio.to_thread(catalog.load_table, cfg.table.name)
        landed = Committer(catalog, cfg.table.name, cfg.pipeline).held(table).offsets
        short = {tp: (landed.get(tp, 0), end) for tp, end in ends.items() if landed.get(tp, 0) < end}
        if short:
            raise CommitOutcomeUnknown(
                f"backfill {cfg.pipeline} stopped before landing everything: (table offset, target) per partition "
                f"{ {f'{t}/{p}': v for (t, p), v in sorted(short.items())} }. Nothing is lost or doubled; run it again")
        return stats

    return uvloop.run(main())
