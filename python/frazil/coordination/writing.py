"""Writing a batch's data files (blocking, in a worker thread): each part's table loaded, its rows
written once as Parquet (through Spark when it is a bulk flush), a keyed table's part as its
latest change per key (upserts as data files, deletes as a key file), and the files logged in the
transaction log, together, before anything is reported."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

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

WRITE_THREADS = max(1, os.cpu_count() or 1)   # tables' parts written at once


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
        loaded_s = 0.0
        failures: dict[str, FrazilError | OSError] = {}
        todo: list[tuple[str, Target, Table, Part]] = []
        for name, part in sorted(batch.parts.items()):
            target = self._targets[name]
            try:
                began = self._clock()
                tables[name] = table = target.load()
                loaded_s += self._clock() - began
            except (FrazilError, OSError) as exc:
                failures[name] = exc
                continue
            # held files are reported as they are; rows taken since wait in ``later``
            if not part.files and part.rows:
                assert part.data is not None
                todo.append((name, target, table, part))
        began = self._clock()
        outcomes = self._write_parts(todo, commit_id)
        wrote_s = self._clock() - began
        written: list[txrecords.Record] = []   # logged together (one fsync), before anything is reported
        for (name, _, _, part), outcome in zip(todo, outcomes, strict=True):
            if not isinstance(outcome, tuple):
                failures[name] = outcome
                continue
            files, took = outcome
            self._metrics.flushed(name, took, [f.file_size_in_bytes for f in files])
            part = dataclasses.replace(part, data=None, files=tuple(files), nbytes=0, deletes=None)
            written.append(txrecords.files(name, part.paths, part.ranges))
            batch = dataclasses.replace(batch, parts={**batch.parts, name: part})
        if written:
            self._journal.append(written)
            for record in written:
                try:
                    faults.hit("worker.after_files_written", record["table"])
                except OSError as exc:   # as a storage error after the write would: reported next cycle
                    failures.setdefault(record["table"], exc)
        return batch, tables, loaded_s, wrote_s, failures

    def _write_parts(self, todo: list[tuple[str, Target, Table, Part]], commit_id: str
                     ) -> list[tuple[list[DataFile], float] | FrazilError | OSError]:
        """Each part's files and the seconds they took, or why they could not be written; the parts
        of several tables at once, on up to one thread per core. A Parquet file is encoded and
        compressed on one thread (without the GIL): one table after the other, a cycle of ten
        routed tables kept one core busy for most of a second while the other waited. Spark's
        bulk writes stay one at a time (one session)."""
        def one(job: tuple[str, Target, Table, Part]) -> tuple[list[DataFile], float] | FrazilError | OSError:
            _, target, table, part = job
            began = self._clock()
            try:
                files = self._files(target, table, part, commit_id)
            except (FrazilError, OSError) as exc:
                return exc
            return files, self._clock() - began

        threads = min(len(todo), WRITE_THREADS)
        if threads <= 1 or self._bulk is not None:
            return [one(job) for job in todo]
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="frazil-write") as pool:
            return list(pool.map(one, todo))

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
