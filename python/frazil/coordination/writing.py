"""Writing a batch's data files (blocking, in a worker thread): each part's table loaded, its rows
written once as Parquet (through Spark when it is a bulk flush), a keyed table's part as its
latest change per key (upserts as data files, deletes as a key file), and the files logged in the
transaction log, together, before anything is reported."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from frazil import faults
from frazil.buffers import changes
from frazil.buffers.targets import Target, Targets
from frazil.config import Config
from frazil.coordination.batch import Batch, Part
from frazil.errors import FrazilError
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import mutations
from frazil.metrics import Metrics
from frazil.spark.bulk import SparkWriter
from frazil.txlog import Journal
from frazil.txlog import records as txrecords

log = logging.getLogger(__name__)


class PartWriter:
    def __init__(self, cfg: Config, targets: Targets, journal: Journal, metrics: Metrics,
                 bulk: SparkWriter | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """``bulk``: writes flushes of at least ``spark.bulk_min_rows`` rows."""
        self._cfg, self._targets, self._journal, self._metrics = cfg, targets, journal, metrics
        self._bulk, self._clock = bulk, clock

    def write(self, batch: Batch, commit_id: str) -> tuple[
            Batch, dict[str, Table], float, float, dict[str, FrazilError | OSError]]:
        """Blocking. Each part's table loaded, and its new rows written as data files and logged
        (once); the batch with what was written, the tables, the seconds loading and writing, and
        the failure of each table that could not be loaded or written (the others go on)."""
        tables: dict[str, Table] = {}
        loaded_s = wrote_s = 0.0
        written: list[txrecords.Record] = []   # logged together (one fsync), before anything is reported
        failures: dict[str, FrazilError | OSError] = {}
        for name, part in sorted(batch.parts.items()):
            target = self._targets[name]
            try:
                began = self._clock()
                tables[name] = table = target.load()
                loaded_s += self._clock() - began
                # held files are reported as they are; rows taken since wait in ``later``
                if not part.files and part.rows:
                    assert part.data is not None
                    began = self._clock()
                    files = self._files(target, table, part, commit_id)
                    took = self._clock() - began
                    wrote_s += took
                    self._metrics.flushed(name, took, [f.file_size_in_bytes for f in files])
                    part = dataclasses.replace(part, data=None, files=tuple(files), nbytes=0, deletes=None)
                    written.append(txrecords.files(name, part.paths, part.ranges))
                    batch = dataclasses.replace(batch, parts={**batch.parts, name: part})
            except (FrazilError, OSError) as exc:
                failures[name] = exc
        if written:
            self._journal.append(written)
            for record in written:
                try:
                    faults.hit("worker.after_files_written", record["table"])
                except OSError as exc:   # as a storage error after the write would: reported next cycle
                    failures.setdefault(record["table"], exc)
        return batch, tables, loaded_s, wrote_s, failures

    def _files(self, target: Target, table: Table, part: Part, commit_id: str) -> list[DataFile]:
        """Data files for a part: through Spark when it is a bulk flush, else in process. A keyed
        table's part is its latest change per key: the upserts as data files, the deletes as a
        key file (the coordinator turns both into position deletes of the rows they replace)."""
        data = part.data
        assert data is not None
        keys = None
        if target.cfg.changes is not None:
            latest = mutations.latest(data, part.deletes, target.cfg.identifier_columns)
            if latest.replaced:
                self._metrics.changes_replaced(target.name, latest.replaced, latest.split_keys)
            if latest.split_keys:
                log.warning("table %s: %d key(s) changed from more than one partition in one batch; the change with "
                            "the highest (partition, offset) won. Keep each key in one partition", target.name,
                            latest.split_keys)
            if target.cfg.changes.target:   # a staging table: upserts and deletes as rows, merged by Spark
                data, keys = changes.staged(latest.rows, latest.deletes, iceberg_catalog.arrow_schema(table)), None
            else:
                data, keys = latest.rows if latest.rows is not None else data.slice(0, 0), latest.deletes
        files: list[DataFile] = []
        if data.num_rows:
            if self._bulk is not None and data.num_rows >= self._cfg.spark.bulk_min_rows:
                # a fresh folder per attempt: a failed attempt's files are left for orphan removal
                files = self._bulk.write(table, data, f"{commit_id}-{uuid.uuid4().hex[:8]}")
            else:
                files = target.committer.write_files(data, table)
        if keys is not None and keys.num_rows:
            files.append(target.committer.write_keys(keys, table))
        return files
