"""The Spark Structured Streaming peer: Kafka source, ``from_json``, Iceberg sink, checkpointed.

The table is created by Spark with the same columns (all nullable) and partitioning as the
others, on the same catalog. The query reads from the earliest offsets, writes with the same
trigger interval as every other system, and runs until SIGTERM; the checkpoint makes a restart
resume exactly once (the Iceberg sink skips an epoch it already committed).

    python benches/e2e_systems/spark_ss.py --job job.json
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path
from typing import Any

from frazil.spark import jars, session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, required=True)
    job: dict[str, Any] = json.loads(parser.parse_args().job.read_text())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    spark = session.get(session.conf(job["catalog_name"], job["catalog_properties"], jars=jars.jars(kafka=True),
                                     master=job.get("spark_master", "local[2]"), app_name="bench-spark-ss",
                                     extra={"spark.driver.memory": "3g", "spark.ui.showConsoleProgress": "false"}))
    from pyspark.sql import functions as F

    namespace = job["table"].split(".")[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    parts = [f"days({column})" for column in job["day_partitions"]]
    spark.sql(f"""CREATE TABLE IF NOT EXISTS {job['table']} ({job['spark_ddl']}, _kafka_topic STRING,
                  _kafka_partition INT, _kafka_offset BIGINT, _kafka_timestamp TIMESTAMP, _kafka_key BINARY)
                  USING iceberg {f"PARTITIONED BY ({', '.join(parts)})" if parts else ""}
                  TBLPROPERTIES ('format-version' = '2')""")
    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", job["bootstrap"])
              .option("subscribe", job["topic"])
              .option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true")
              .load())
    rows = source.select(
        F.from_json(F.col("value").cast("string"), job["spark_ddl"]).alias("v"),
        F.col("topic").alias("_kafka_topic"), F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"), F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").alias("_kafka_key"),
    ).select("v.*", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")
    query = (rows.writeStream.format("iceberg").outputMode("append")
             .trigger(processingTime=f"{int(job['interval_s'] * 1000)} milliseconds")
             .option("checkpointLocation", job["checkpoint"])
             .option("fanout-enabled", "true")
             .toTable(job["table"]))
    try:
        while not stop.is_set() and query.isActive:
            query.awaitTermination(0.2)
        if query.exception() is not None:
            raise SystemExit(f"the streaming query failed: {query.exception()}")
    finally:
        query.stop()
        session.stop()


if __name__ == "__main__":
    main()
