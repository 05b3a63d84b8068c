"""The short chaos run inside ``make test``: every fault kind of ``make chaos`` at least once (a
SIGKILLed worker and coordinator, a process killed at a named fault point, zombies stopped past
the session timeout, a broker restart, the catalog locked, failing mid-commit and its server
killed or stopped, compaction and snapshot expiry, bad records, a schema change, a rebalance
storm), on a cluster of three brokers and the PostgreSQL catalog, up to three at once, then the
independent verifier: every (topic, partition, offset) once in its table by pyiceberg and by
Spark SQL, the upsert table equal to the latest change of every key, every bad record once in
the dead-letter topic, the stored offsets at the topics' ends. A failure prints its seed: replay
it with ``make chaos CHAOS_ARGS='--seed N --faults 15 --catalog postgresql --brokers 3'``."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from frazil_dev.kafka_broker import KafkaCluster
from frazil_dev.postgres import PostgresServer
from harness import chaos

pytestmark = [pytest.mark.chaos, pytest.mark.spark, pytest.mark.integration]


def test_every_fault_kind_combined_loses_and_duplicates_nothing(tmp_path: Path, spark: Any,
                                                               postgres: PostgresServer) -> None:
    seed = int(os.environ.get("FRAZIL_CHAOS_SEED", str(random.randrange(1 << 30))))
    print(f"chaos seed {seed}")
    # its own brokers, a cluster of three: this run restarts them, one at a time (the partitions it
    # led move to another), and every topic has three replicas, writes needing two. The catalog is a
    # database of its own on the session's PostgreSQL server, which the run kills or stops, and starts
    kinds = chaos.kinds_of("postgresql")
    with KafkaCluster.start(tmp_path / "kafka") as broker:
        result = chaos.run(tmp_path, broker, faults=len(kinds) + 1, seed=seed, maintenance=False,
                           events_per_tick=100, changes_per_tick=40, keys=3000, spark_session=spark, progress=print,
                           catalog="postgresql", postgres=postgres)
    print({k: v for k, v in result.items() if k not in ("verify", "log")})
    print("\n".join(result["log"]))
    assert set(result["faults"]) == set(kinds), f"seed {seed}: a kind never happened: {result['faults']}"
    assert result["faults"]["catalog_restart"] >= 1 and result["catalog"] == "postgresql", result
    assert result["dead_lettered"] >= 1 and result["schema_changes"] >= 1, result
    assert result["lost"] == 0 and result["duplicates"] == 0, (seed, result["verify"])
    assert not result["verify"]["stored_offsets_off"] and not result["bad_exits"], (seed, result)
    assert result["landed"] + result["dead_lettered"] == result["produced"], (seed, result)
