"""The Spark merge flush of a keyed table (``merge = "spark"``).

The pipeline lands each cycle's changes (the latest per key: upsert rows, delete keys, the change
in ``_frazil_op``) in the table's *staging table* (``<table>__changes``) with the source offsets,
exactly like an append. Every ``merge_interval_s``, or as soon as ``merge_min_changes`` are
waiting, this service MERGEs what is waiting into the table with Spark (merge-on-read: position
deletes, readable by pyiceberg):

- What is waiting: per source partition, the staging rows from the table's *merged mark* up to
  the offsets the staging table holds, read at one staging snapshot. The latest change per key
  wins by (partition, offset), so batches merge in order.
- The merged mark moves in the same commit as the MERGE: the MERGE's snapshot summary carries
  ``frazil.merged.<pipeline>`` (Iceberg's ``spark.sql.iceberg.snapshot-property.*``, set on a
  session of its own). It is copied into a table property afterwards, so snapshot expiry never
  loses it. A merge killed before its commit merged nothing; after it, the mark says so.
- Replaying a batch gives the same table: each key ends as its latest change, whatever was
  merged before.
- Merged staging rows are deleted from the staging table afterwards (they are below the mark).
  The staging table deletes with snapshot isolation (``write.delete.isolation-level``): frazil's
  appends of newer changes, meanwhile, do not make the DELETE fail; a DELETE that fails anyway is
  a warning, and the next merge deletes those rows too.
- A failed merge is logged as an error and counted (``frazil_maintenance_runs_total{job="merge"}``),
  and tried again at the next turn; ingestion into the staging table goes on, other tables too.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from frazil import faults
from frazil.config import OP_COLUMN, TableConfig
from frazil.iceberg import offsets
from frazil.iceberg.catalog import META_COLUMNS
from frazil.iceberg.offsets import TopicPartition
from frazil.metrics import Metrics
from frazil.spark.jobs import describe

log = logging.getLogger(__name__)

CHECK_EVERY_S = 2.0


def merged_key(pipeline: str) -> str:
    return f"frazil.merged.{pipeline}"


def merged_mark(table: Table, pipeline: str) -> dict[TopicPartition, int]:
    """Per source partition, the staging offset below which every change is in ``table``: the
    higher of the last MERGE's snapshot summary in the table's history and the table property."""
    key = merged_key(pipeline)
    marks = [offsets.decode(table.properties[key])] if key in table.properties else []
    current = table.current_snapshot()
    for snapshot in ancestors_of(current, table.metadata) if current else ():
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if key in summary:
            marks.append(offsets.decode(summary[key]))
            break
    return offsets.merge_progress(*marks)


@dataclass(frozen=True)
class Waiting:
    """What a merge would take: per partition ``[start, end)`` of staging offsets, at one snapshot."""

    snapshot_id: int
    ranges: dict[TopicPartition, tuple[int, int]]
    ends: dict[TopicPartition, int]

    @property
    def changes(self) -> int:
        """At most this many changes wait (offsets: tombstones and bad records count too)."""
        return sum(end - start for start, end in self.ranges.values())


def waiting(staging: Table, target: Table, pipeline: str) -> Waiting | None:
    """Pure over the two tables as loaded."""
    snapshot = staging.current_snapshot()
    if snapshot is None:
        return None
    ends = offsets.stored_offsets(staging.properties, pipeline)
    mark = merged_mark(target, pipeline)
    ranges = {tp: (mark.get(tp, 0), end) for tp, end in ends.items() if end > mark.get(tp, 0)}
    return Waiting(snapshot.snapshot_id, ranges, ends) if ranges else None


def _condition(ranges: Mapping[TopicPartition, tuple[int, int]]) -> str:
    def quoted(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " OR ".join(f"(_kafka_topic = {quoted(t)} AND _kafka_partition = {p} AND _kafka_offset >= {a} AND "
                       f"_kafka_offset < {b})" for (t, p), (a, b) in sorted(ranges.items()))


@dataclass(frozen=True)
class MergeResult:
    ranges: dict[TopicPartition, tuple[int, int]]
    changes: int            # staged changes read (before the latest per key)
    seconds: float


def merge(spark: Any, catalog_name: str, catalog: Catalog, staging_cfg: TableConfig,
          pipeline: str) -> MergeResult | None:
    """Blocking. One merge of what waits in ``staging_cfg``'s staging table into its table; None
    when nothing waits."""
    assert staging_cfg.changes is not None and staging_cfg.changes.target
    target_name = staging_cfg.changes.target
    staging, target = catalog.load_table(staging_cfg.name), catalog.load_table(target_name)
    found = waiting(staging, target, pipeline)
    if found is None:
        return None
    started = time.monotonic()
    ids = list(staging_cfg.identifier_columns)
    columns = [c.name for c in staging_cfg.columns] + ([m[0] for m in META_COLUMNS]
                                                       if staging_cfg.metadata_columns else [])
    mark = {**merged_mark(target, pipeline), **found.ends}
    session = spark.newSession()   # its own SQL conf: the mark goes into this MERGE's snapshot only
    session.conf.set(f"spark.sql.iceberg.snapshot-property.{merged_key(pipeline)}", offsets.encode(mark))
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    batch = (session.read.format("iceberg").option("versionAsOf", str(found.snapshot_id))
             .load(f"{catalog_name}.{staging_cfg.name}").where(_condition(found.ranges)))
    changes = batch.count()
    order = Window.partitionBy(*ids).orderBy(F.col("_kafka_partition").desc(), F.col("_kafka_offset").desc())
    view = f"frazil_merge_{uuid.uuid4().hex[:12]}"
    (batch.withColumn("_frazil_rank", F.row_number().over(order)).where("_frazil_rank = 1").drop("_frazil_rank")
     .createOrReplaceTempView(view))
    on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in ids)
    sets = ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
    names = ", ".join(f"`{c}`" for c in columns)
    values = ", ".join(f"s.`{c}`" for c in columns)
    faults.hit("merge.before_commit", target_name)
    session.sql(f"""MERGE INTO {catalog_name}.{target_name} t USING {view} s ON {on}
                    WHEN MATCHED AND s.{OP_COLUMN} = 'd' THEN DELETE
                    WHEN MATCHED THEN UPDATE SET {sets}
                    WHEN NOT MATCHED AND s.{OP_COLUMN} = 'u' THEN INSERT ({names}) VALUES ({values})""")
    faults.hit("merge.after_commit", target_name)
    session.catalog.dropTempView(view)
    _keep_mark(catalog, target_name, pipeline, mark)
    try:
        _expire_merged(spark.newSession(), catalog_name, staging_cfg.name, mark)
    except Exception as exc:  # noqa: BLE001 - merged all the same: the next merge deletes these rows too
        log.warning("merge table=%s: merged, but deleting the merged rows from %s failed (%s); the next merge deletes "
                    "them", target_name, staging_cfg.name, describe(exc))
    result = MergeResult(found.ranges, changes, time.monotonic() - started)
    log.info("merge table=%s from %s: %d staged change(s) merged in %.1fs; merged through %s", target_name,
             staging_cfg.name, changes, result.seconds, offsets.encode(mark))
    return result


def _keep_mark(catalog: Catalog, target_name: str, pipeline: str, mark: Mapping[TopicPartition, int]) -> None:
    """The mark as a table property too (snapshot expiry would drop the MERGE's summary)."""
    key = merged_key(pipeline)
    table = catalog.load_table(target_name)
    kept = offsets.merge_progress(merged_mark(table, pipeline), mark)
    if table.properties.get(key) != offsets.encode(kept):
        with table.transaction() as tx:
            tx.set_properties({key: offsets.encode(kept)})


def _expire_merged(session: Any, catalog_name: str, staging_name: str, mark: Mapping[TopicPartition, int]) -> None:
    """Staging rows below the mark are in the table: deleted from the staging table."""
    below = {tp: (0, end) for tp, end in mark.items() if end > 0}
    if below:
        session.sql(f"DELETE FROM {catalog_name}.{staging_name} WHERE {_condition(below)}")


class Merger:
    """The merge flush of every staging table of the pipeline, in the process that holds the
    coordinator role (``leading``), off the event loop."""

    def __init__(self, tables: Sequence[TableConfig], spark: Callable[[], Any], catalog: Catalog, catalog_name: str,
                 pipeline: str, metrics: Metrics, leading: Callable[[], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._tables, self._spark, self._catalog, self._catalog_name = list(tables), spark, catalog, catalog_name
        self._pipeline, self._metrics, self._leading, self._clock = pipeline, metrics, leading, clock
        self._last: dict[str, float] = {t.name: clock() for t in tables}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self._leading():
                for table in self._tables:
                    if stop.is_set():
                        break
                    await self._maybe_merge(table)
            try:
                await asyncio.wait_for(stop.wait(), CHECK_EVERY_S)
            except TimeoutError:
                pass

    async def _maybe_merge(self, table: TableConfig) -> None:
        assert table.changes is not None
        now = self._clock()
        due = now - self._last[table.name] >= table.changes.merge_interval_s
        if not due and table.changes.merge_min_changes:
            try:
                staging, target = await asyncio.to_thread(self._load, table)
            except Exception as exc:  # noqa: BLE001 - the catalog is down: the next turn tries again
                log.warning("merge of %s: cannot read the tables (%s)", table.changes.target, exc)
                return
            found = waiting(staging, target, self._pipeline)
            due = found is not None and found.changes >= table.changes.merge_min_changes
        if not due:
            return
        self._last[table.name] = now
        try:
            # Spark starts (the first time) in the worker thread too: never on the event loop, which
            # keeps the Kafka heartbeats and the commit cycle going meanwhile
            result = await asyncio.to_thread(lambda: merge(self._spark(), self._catalog_name, self._catalog, table,
                                                           self._pipeline))
        except Exception as exc:  # noqa: BLE001 - Spark and the catalog raise many kinds: loud, and again next turn
            self._metrics.maintenance("merge", "failed")
            log.error("merge of %s into %s failed: %s; its changes wait in the staging table and are merged at the "
                      "next turn (in %.0fs); other tables go on", table.name, table.changes.target, describe(exc),
                      table.changes.merge_interval_s)
            return
        if result is not None:
            self._metrics.maintenance("merge", "ok", result.seconds)

    def _load(self, table: TableConfig) -> tuple[Table, Table]:
        assert table.changes is not None
        return self._catalog.load_table(table.name), self._catalog.load_table(table.changes.target)
