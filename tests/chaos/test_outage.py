"""The catalog is unavailable for 30 s (`make outage`: 60 s) under steady load (an exclusive lock on the real SQLite
catalog), in both coordination modes. Ingestion must slow to a stop within the memory budget, the
group must not rebalance, and afterwards every record must be in the table exactly once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from frazil_dev.kafka_broker import KafkaBroker
from harness.outage import MODES, run

pytestmark = [pytest.mark.chaos]


# single mode is `make test-matrix`'s (and `make chaos-tests`'): the same backpressure and commit
# path with the coordinator in-process, where distributed mode adds the control topic's
@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.matrix) if m == "single" else m for m in MODES])
def test_a_catalog_outage_slows_ingestion_to_a_stop_and_loses_nothing(kafka: KafkaBroker, tmp_path: Path,
                                                                     mode: str) -> None:
    budget_mb = 32
    result = run(kafka.bootstrap, tmp_path, mode=mode, outage_s=float(os.environ.get("FRAZIL_OUTAGE_S", "30")),
                 budget_mb=budget_mb)
    assert result["lost"] == 0 and result["duplicates"] == 0, result
    assert result["rows"] == result["records_produced"], result
    assert result["rebalances"] == 0, result
    assert result["pauses"] >= 1, f"the budget never paused ingestion, so this run did not test backpressure: {result}"
    assert result["failed_commit_cycles"] >= 1, f"no commit failed: the outage did not happen: {result}"
    assert result["rss_peak_mb"] < budget_mb + 300, result
    # the metrics tell the same story as the log and the table
    metrics = result["metrics"]
    assert metrics["paused_seen"] == 1 and metrics["pauses_total"] == result["pauses"], result
    assert metrics["failed_commits_total"] == result["failed_commit_cycles"], result
    assert metrics["commit_failing_seconds_max"] >= 10, result
    assert metrics["rows_committed_total"] == result["records_produced"], result
    assert metrics["partition_assignments_total"] == 1, result
