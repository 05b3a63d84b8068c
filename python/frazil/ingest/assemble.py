"""One process's ingest side, put together: the buffers, the Kafka source, intake with its roles
(routing fan-out, opening tables, schema changes, bad records), the worker and the loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from frazil.buffers.state import Buffers
from frazil.buffers.targets import Targets
from frazil.config import Config
from frazil.coordination.worker import Worker, WorkerChannel
from frazil.ingest.bad_records import BadRecords
from frazil.ingest.evolve import Evolver
from frazil.ingest.fanout import Fanout
from frazil.ingest.formats import ValueFormats
from frazil.ingest.intake import Intake
from frazil.ingest.loop import Pipeline, Source
from frazil.ingest.opening import Opener
from frazil.ingest.routing import Router
from frazil.ingest.source import KafkaSource
from frazil.kafka.copies import SourceCopies
from frazil.metrics import Metrics, Stats
from frazil.spark.bulk import SparkWriter
from frazil.txlog import Journal


def metrics(cfg: Config) -> Metrics:
    """The pipeline's metrics, labelled with its one table, or "several"."""
    return Metrics(cfg.pipeline, cfg.tables[0].name if len(cfg.tables) == 1 and cfg.dynamic is None else "several")


def pipeline(cfg: Config, catalog: Catalog, tables: Mapping[str, Table], *, channel: WorkerChannel, journal: Journal,
             metrics: Metrics, bulk: SparkWriter | None = None, drain_on_stop: bool = True,
             on_new_table: Callable[[str], None] | None = None, source: Source | None = None,
             copies: SourceCopies | None = None) -> Pipeline:
    """The loop over ``tables`` (every configured table as ``catalog.ensure_table`` left it);
    ``journal``: the process's transaction log, already settled; flushes of at least
    ``spark.bulk_min_rows`` rows are written by ``bulk`` when given; ``on_new_table``: told the
    name of each table opened while running; ``source``: the Kafka source (default: a
    consumer-group member for ``cfg.kafka``); ``copies``: where bad records are kept for this
    process's dead-letter sink. Build on the loop."""
    router = Router(cfg.tables, cfg.dynamic)
    formats = ValueFormats(cfg.values)   # each topic's, and the schemas each format reads by
    buffers = Buffers(Targets(cfg, catalog, tables, takers=router.takers, formats=formats))
    stats = Stats()
    kafka = source if source is not None else KafkaSource(cfg.kafka, outage_timeout_s=cfg.outage_timeout_s,
                                                          on_lost=metrics.records_lost.inc)
    worker = Worker(cfg, buffers=buffers, channel=channel, journal=journal, source=kafka, metrics=metrics,
                    stats=stats, bulk=bulk)
    bad = BadRecords(cfg, buffers, metrics, stats, copies=copies)
    evolver = Evolver(cfg, buffers, metrics, formats)
    opener = Opener(cfg, catalog, buffers, formats=formats, on_new_table=on_new_table)
    fanout = Fanout(cfg, buffers, router, opener=opener, evolver=evolver, bad=bad, metrics=metrics, stats=stats)
    intake = Intake(cfg, buffers, router, kafka, fanout=fanout, opener=opener, evolver=evolver, bad=bad,
                    metrics=metrics, stats=stats, letters_elsewhere=lambda: worker.dead_letters)
    return Pipeline(cfg, buffers=buffers, source=kafka, intake=intake, worker=worker, channel=channel,
                    metrics=metrics, stats=stats, drain_on_stop=drain_on_stop)
