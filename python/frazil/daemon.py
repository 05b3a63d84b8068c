"""Lifecycle of ``frazil run``: event loop, signals, graceful drain, exit status."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal

import uvloop

from frazil.config import Config
from frazil.iceberg import catalog as iceberg_catalog
from frazil.ingest.pipeline import Pipeline, Stats
from frazil.metrics import serve as serve_metrics

log = logging.getLogger(__name__)

# The hot loop makes one short-lived object per record (aiokafka's ConsumerRecord) and almost no
# reference cycles. With CPython's default thresholds (700, 10, 10) the cycle collector took 16%
# of the loop thread's samples while landing 1M records (py-spy, see docs/benchmarks.md).
GC_THRESHOLDS = (100_000, 50, 100)


def tune_gc() -> None:
    """Move what start-up built out of the collector's sight and collect young objects less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def serve(cfg: Config, stop: asyncio.Event) -> Stats:
    """Run the pipeline until ``stop`` is set; the buffered rows are committed before returning."""
    catalog = await asyncio.to_thread(iceberg_catalog.load, cfg.catalog)
    table = await asyncio.to_thread(iceberg_catalog.ensure_table, catalog, cfg.table)
    pipeline = Pipeline(cfg, catalog, table)
    tune_gc()
    server = serve_metrics(pipeline.metrics, cfg.metrics.host, cfg.metrics.port) if cfg.metrics.port else None
    if server is not None:
        log.info("metrics at http://%s:%d/metrics", cfg.metrics.host, cfg.metrics.port)
    try:
        await pipeline.run(stop)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return pipeline.stats


def run(cfg: Config) -> Stats:
    """Run in the foreground. SIGTERM or SIGINT drains and stops; a second one exits at once
    (nothing is lost: uncommitted records are read again from the table's offsets)."""

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
        log.info("frazil pipeline %s -> %s, commit every %.1fs (pid %d)", cfg.pipeline, cfg.table.name,
                 cfg.commit_interval_s, os.getpid())
        return await serve(cfg, stop)

    return uvloop.run(main())
