"""The upsert peer: Spark Structured Streaming, Kafka source, ``foreachBatch`` with ``MERGE INTO``.

What an engineer writes for a keyed Iceberg table on Spark: each micro-batch is reduced to the
latest change per key by (partition, offset), then merged into the table, a format-v2 table whose
MERGE, UPDATE and DELETE are merge-on-read (position deletes, no rewritten data files):

    WHEN MATCHED AND deleted THEN DELETE
    WHEN MATCHED THEN UPDATE
    WHEN NOT MATCHED AND NOT deleted THEN INSERT

A change's key is the Kafka key (the id as text); a null value (a tombstone) deletes the key.
The table is created by Spark on the same catalog as the others (all columns nullable). The
query reads from the earliest offsets, with the same trigger interval as every other system,
checkpointed; it runs until SIGTERM. ``foreachBatch`` is at-least-once: a batch replayed after a
crash merges the same latest changes again, which leaves the same table. The committed offsets
are Spark's own: ``commits/<n>`` and ``offsets/<n>`` in the checkpoint (``committed_offsets``).
Each batch's progress (Spark's ``StreamingQueryProgress``: trigger start, input rows, durations)
is appended as a JSON line to ``job["progress"]``, for the harness to find when reading began.

    python benches/e2e_systems/spark_ss_merge.py --job job.json
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path
from typing import Any

VALUE_DDL = "id BIGINT, name STRING, amount DOUBLE, version BIGINT"
COLUMNS = ("id", "name", "amount", "version", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp",
           "_kafka_key")
VIEW = "bench_upsert_changes"


def committed_offsets(checkpoint: Path) -> dict[tuple[str, int], int]:
    """The next offset per (topic, partition) of the last batch the query committed: the offsets
    log entry of the highest batch id in the commit log (empty before the first commit)."""
    batches = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not batches:
        return {}
    lines = (checkpoint / "offsets" / str(max(batches))).read_text().splitlines()
    # "v1", the batch metadata, then one line per source: {"topic": {"0": next_offset, ...}}
    return {(topic, int(p)): int(o) for topic, parts in json.loads(lines[2]).items() for p, o in parts.items()}


def merge_sql(table: str) -> str:
    updates = ", ".join(f"t.{c} = s.{c}" for c in COLUMNS[1:])
    return f"""MERGE INTO {table} t USING {VIEW} s ON t.id = s.id
               WHEN MATCHED AND s.deleted THEN DELETE
               WHEN MATCHED THEN UPDATE SET {updates}
               WHEN NOT MATCHED AND NOT s.deleted THEN INSERT ({", ".join(COLUMNS)})
                    VALUES ({", ".join(f"s.{c}" for c in COLUMNS)})"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, required=True)
    job: dict[str, Any] = json.loads(parser.parse_args().job.read_text())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    from frazil.spark import jars, session

    spark = session.get(session.conf(job["catalog_name"], job["catalog_properties"], jars=jars.jars(kafka=True),
                                     master=job.get("spark_master", "local[2]"), app_name="bench-spark-ss-merge",
                                     extra={"spark.driver.memory": "3g", "spark.ui.showConsoleProgress": "false"}))
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    table = job["table"]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.split('.')[0]}")
    spark.sql(f"""CREATE TABLE IF NOT EXISTS {table} ({VALUE_DDL}, _kafka_topic STRING, _kafka_partition INT,
                  _kafka_offset BIGINT, _kafka_timestamp TIMESTAMP, _kafka_key BINARY)
                  USING iceberg
                  TBLPROPERTIES ('format-version' = '2', 'write.merge.mode' = 'merge-on-read',
                                 'write.update.mode' = 'merge-on-read', 'write.delete.mode' = 'merge-on-read')""")
    statement = merge_sql(table)

    def merge(batch: DataFrame, batch_id: int) -> None:
        change = F.struct(
            F.col("value").isNull().alias("deleted"),
            F.from_json(F.col("value").cast("string"), VALUE_DDL).alias("v"),
            F.col("topic").alias("_kafka_topic"), F.col("partition").alias("_kafka_partition"),
            F.col("offset").alias("_kafka_offset"), F.col("timestamp").alias("_kafka_timestamp"),
            F.col("key").alias("_kafka_key"))
        latest = (batch.groupBy(F.col("key").cast("string").cast("bigint").alias("id"))
                  # the latest change of each key by (partition, offset), never by arrival
                  .agg(F.max_by(change, F.struct(F.col("partition"), F.col("offset"))).alias("c"))
                  .select("id", "c.deleted", "c.v.name", "c.v.amount", "c.v.version", "c._kafka_topic",
                          "c._kafka_partition", "c._kafka_offset", "c._kafka_timestamp", "c._kafka_key"))
        latest.createOrReplaceTempView(VIEW)
        latest.sparkSession.sql(statement)

    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", job["bootstrap"])
              .option("subscribe", job["topic"])
              .option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true"))
    if job.get("max_offsets_per_trigger"):
        source = source.option("maxOffsetsPerTrigger", str(job["max_offsets_per_trigger"]))
    query = (source.load().writeStream.foreachBatch(merge)
             .trigger(processingTime=f"{int(job['interval_s'] * 1000)} milliseconds")
             .option("checkpointLocation", job["checkpoint"])
             .start())
    progress = open(job["progress"], "a") if job.get("progress") else None
    last_batch = -1
    try:
        while not stop.is_set() and query.isActive:
            query.awaitTermination(0.2)
            p = query.lastProgress   # one py4j call; a batch lasts longer than this loop's 0.2 s
            if progress is not None and p is not None and p.batchId > last_batch and p.numInputRows > 0:
                last_batch = p.batchId   # (an idle trigger reports the next batch id with no rows)
                progress.write(p.json + "\n")
                progress.flush()
        if query.exception() is not None:
            raise SystemExit(f"the streaming query failed: {query.exception()}")
    finally:
        query.stop()
        session.stop()
        if progress is not None:
            progress.close()


if __name__ == "__main__":
    main()
