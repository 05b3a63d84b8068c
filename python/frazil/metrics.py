"""Prometheus metrics: what the pipeline did, counted where it happens.

``serve`` exposes them over HTTP (``[metrics] port``); the names are documented in
docs/operations.md. Labels carry the pipeline and the table, never unbounded values.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


@dataclass
class Stats:
    """What one run did, summed up in its last log line and the service status (the metrics count
    the same events for Prometheus)."""

    records_in: int = 0
    records_skipped: int = 0
    records_unrouted: int = 0     # read, and taken by no table (routing)
    records_filtered: int = 0     # taken by a table whose transforms left them out (filter)
    records_tombstones: int = 0   # read with a null value (append mode: landed nowhere)
    records_skipped_on_request: int = 0   # left out of a table because an operator said so (frazil offsets --skip)
    records_bad: int = 0          # could not become a row; held for the dead-letter topic
    rows_committed: int = 0
    commits: int = 0
    failed_commits: int = 0
    pauses: int = 0
    assignments: int = 0
    started: float = field(default_factory=time.monotonic)



class Metrics:
    """One set of metrics per pipeline, in its own registry (so tests and several pipelines in
    one process do not collide)."""

    def __init__(self, pipeline: str, table: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = {"pipeline": pipeline, "table": table}
        names = list(labels)
        r = self.registry
        self.records_consumed = Counter("frazil_records_consumed", "Records taken from Kafka into the buffer",
                                        names, registry=r).labels(**labels)
        self.records_unrouted = Counter("frazil_records_unrouted", "Records read that no table takes (routing); "
                                        "accounted as read, landed nowhere", names, registry=r).labels(**labels)
        self.tombstones = Counter("frazil_records_tombstones", "Records with a null value (tombstones) read: "
                                  "deletes in a keyed table with tombstones = \"delete\", else accounted as read and "
                                  "landed nowhere", names, registry=r).labels(**labels)
        self.records_skipped = Counter("frazil_records_skipped", "Records left out of a table because an operator "
                                       "said so (frazil offsets --skip)", names, registry=r).labels(**labels)
        self.records_lost = Counter("frazil_records_lost_to_retention", "Records deleted by a topic's retention "
                                    "before they were read, skipped (kafka.on_retention_gap = \"skip\")", names,
                                    registry=r).labels(**labels)
        self.fields_ignored = Counter("frazil_fields_ignored", "Record fields dropped because the table has no column "
                                      "for them (unknown_fields = \"ignore\")", names, registry=r).labels(**labels)
        self.records_bad = Counter("frazil_records_bad", "Records that could not become a row, found by this process's "
                                   "worker (on_bad_record = \"dead_letter\": held for the dead-letter topic)", names,
                                   registry=r).labels(**labels)
        self.dead_lettered = Counter("frazil_records_dead_lettered", "Bad records this process's coordinator sent to "
                                     "the dead-letter topic, once their table's commit landed", names,
                                     registry=r).labels(**labels)
        self.schema_changes = Counter("frazil_schema_changes", "Columns this process's workers added or widened "
                                      "(unknown_fields = \"evolve\")", names, registry=r).labels(**labels)
        self.rows_committed = Counter("frazil_rows_committed", "Rows committed to the table", names,
                                      registry=r).labels(**labels)
        self._commits = Counter("frazil_commits", "Commit cycles by result (committed, failed, abandoned)",
                                [*names, "result"], registry=r)
        self._labels = labels
        self.commit_seconds = Histogram("frazil_commit_seconds", "Catalog commit latency (landed commits)", names,
                                        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                                        registry=r).labels(**labels)
        self.bytes_in_use = Gauge("frazil_memory_bytes", "Bytes held: native buffer plus the pending batch", names,
                                  registry=r).labels(**labels)
        self.budget_bytes = Gauge("frazil_memory_budget_bytes", "The memory budget", names, registry=r).labels(**labels)
        self.paused = Gauge("frazil_paused", "1 while consumption is paused by backpressure", names,
                            registry=r).labels(**labels)
        self.pauses = Counter("frazil_pauses", "Times consumption was paused by backpressure", names,
                              registry=r).labels(**labels)
        self.failing_seconds = Gauge("frazil_commit_failing_seconds",
                                     "How long commits have been failing (0 when the last one landed)", names,
                                     registry=r).labels(**labels)
        self.assignments = Counter("frazil_partition_assignments", "Partition assignments (the first, then rebalances)",
                                   names, registry=r).labels(**labels)

        self.snapshots = Gauge("frazil_table_snapshots", "Snapshots in the table's metadata (after the last commit "
                               "or maintenance run)", names, registry=r).labels(**labels)
        self._maintenance_runs = Counter("frazil_maintenance_runs", "Maintenance jobs by job and result (ok, failed)",
                                         [*names, "job", "result"], registry=r)
        self._maintenance_seconds = Gauge("frazil_maintenance_last_seconds", "How long each job's last "
                                          "successful run took", [*names, "job"], registry=r)

        # distributed mode: the coordinator role, counted by the process that holds it
        self.coordinator = Gauge("frazil_coordinator", "1 while this process runs the pipeline's coordinator", names,
                                 registry=r).labels(**labels)
        self._cycles = Counter("frazil_coordinator_cycles", "Commit cycles the coordinator ended, by kind (full: "
                               "every partition answered; partial: the timeout passed; empty: nothing to commit)",
                               [*names, "kind"], registry=r)
        self._table_commits = Counter("frazil_coordinator_table_commits", "The coordinator's table commits by result "
                                      "(committed, failed: carried to the next cycle, refused: read again, "
                                      "already_landed: its records were in the table already, landed by another "
                                      "coordinator or an earlier commit, sealed: a taken-over "
                                      "cycle closed in a table its old coordinator may still commit to)",
                                      [*names, "result"], registry=r)
        self.dropped_replies = Counter("frazil_coordinator_dropped_replies", "Worker replies that did not count "
                                       "(late, repeated, or a zombie's)", names, registry=r).labels(**labels)

        # per table (label: the table's real name) and per source partition
        self._pipeline = pipeline
        per_table = ["pipeline", "table"]
        self._table_records_in = Counter("frazil_table_records_in", "Records taken into a table's buffer (bad ones "
                                         "not counted)", per_table, registry=r)
        self._table_filtered = Counter("frazil_table_records_filtered", "Records a table's transforms left out "
                                       "(filter): taken in, landed nowhere", per_table, registry=r)
        self._table_bytes_in = Counter("frazil_table_value_bytes_in", "Bytes of the record values taken into a "
                                       "table's buffer", per_table, registry=r)
        self._table_rows_landed = Counter("frazil_table_rows_landed", "Rows landed in a table (counted when this "
                                          "process's commit settles)", per_table, registry=r)
        self._table_bytes_landed = Counter("frazil_table_file_bytes_landed", "Bytes of the data files landed in a "
                                           "table", per_table, registry=r)
        self._file_bytes = Histogram("frazil_data_file_bytes", "Size of each data file this process wrote", per_table,
                                     buckets=tuple(float(2 ** n) for n in range(16, 31, 2)), registry=r)
        self._flush_seconds = Histogram("frazil_flush_seconds", "Time to write one table's data files for a reply",
                                        per_table, buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120),
                                        registry=r)
        self._changes_superseded = Counter("frazil_table_changes_superseded", "Changes to a keyed table's rows that "
                                           "a later change of the same key in the same batch replaced before "
                                           "landing", per_table, registry=r)
        self._split_keys = Counter("frazil_table_split_keys", "Keys of a keyed table changed from more than one "
                                   "source partition in one batch (the highest partition, offset wins; keep a key "
                                   "in one partition)", per_table, registry=r)
        self._rows_replaced = Counter("frazil_table_rows_replaced", "Committed rows of a keyed table that this "
                                      "process's commits replaced or deleted (position deletes)", per_table, registry=r)
        self._index_keys = Gauge("frazil_table_key_index_keys", "Keys in a keyed table's key index (this process's "
                                 "coordinator role)", per_table, registry=r)
        self._index_bytes = Gauge("frazil_table_key_index_bytes", "Heap held by a keyed table's key index (about "
                                  "55 bytes a long key)", per_table, registry=r)
        self._lag = Gauge("frazil_partition_lag_records", "Records in a source partition past the next one this "
                          "process takes (the partition's high watermark as last fetched, minus that offset)",
                          ["pipeline", "topic", "partition"], registry=r)
        self._lag_partitions: set[tuple[str, int]] = set()

    def cycle(self, kind: str) -> None:
        self._cycles.labels(**self._labels, kind=kind).inc()

    def table_commit(self, result: str) -> None:
        self._table_commits.labels(**self._labels, result=result).inc()

    def maintenance(self, job: str, result: str, seconds: float | None = None) -> None:
        self._maintenance_runs.labels(**self._labels, job=job, result=result).inc()
        if seconds is not None:
            self._maintenance_seconds.labels(**self._labels, job=job).set(seconds)

    def taken(self, table: str, records: int, value_bytes: int) -> None:
        self._table_records_in.labels(self._pipeline, table).inc(records)
        self._table_bytes_in.labels(self._pipeline, table).inc(value_bytes)

    def filtered(self, table: str, records: int) -> None:
        self._table_filtered.labels(self._pipeline, table).inc(records)

    def landed(self, table: str, rows: int, file_bytes: int) -> None:
        self._table_rows_landed.labels(self._pipeline, table).inc(rows)
        self._table_bytes_landed.labels(self._pipeline, table).inc(file_bytes)

    def changes_replaced(self, table: str, superseded: int, split_keys: int) -> None:
        self._changes_superseded.labels(self._pipeline, table).inc(superseded)
        self._split_keys.labels(self._pipeline, table).inc(split_keys)

    def rows_replaced(self, table: str, rows: int) -> None:
        self._rows_replaced.labels(self._pipeline, table).inc(rows)

    def key_index(self, table: str, keys: int, heap_bytes: int) -> None:
        self._index_keys.labels(self._pipeline, table).set(keys)
        self._index_bytes.labels(self._pipeline, table).set(heap_bytes)

    def flushed(self, table: str, seconds: float, file_sizes: list[int]) -> None:
        self._flush_seconds.labels(self._pipeline, table).observe(seconds)
        for size in file_sizes:
            self._file_bytes.labels(self._pipeline, table).observe(size)

    def lag(self, lags: dict[tuple[str, int], int]) -> None:
        """Set each owned partition's lag; partitions no longer owned stop being reported."""
        for topic, partition in self._lag_partitions - set(lags):
            self._lag.remove(self._pipeline, topic, str(partition))
        for (topic, partition), value in lags.items():
            self._lag.labels(self._pipeline, topic, str(partition)).set(value)
        self._lag_partitions = set(lags)

    def commit(self, result: str) -> None:
        self._commits.labels(**self._labels, result=result).inc()

    def value(self, name: str, **extra: str) -> float:
        """A sample's current value (for tests and the status output)."""
        found = self.registry.get_sample_value(name, {**self._labels, **extra})
        return 0.0 if found is None else found


def serve(metrics: Metrics, host: str, port: int) -> WSGIServer:
    """Serve ``/metrics`` on ``host:port`` from a background thread; ``shutdown()`` stops it."""
    server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    return server
