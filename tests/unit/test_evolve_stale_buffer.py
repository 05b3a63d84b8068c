"""A worker whose buffer predates a schema change another process made: the worker's writes load
the table (with the new column) while the buffer keeps the schema it was made with, so records
with the new field fail the buffer against a table that already has it. They land, under a buffer
made again for the table; before, they went to the dead-letter topic as "no such column" (the
chaos run's lost records). SQLite catalog in a temporary folder; no broker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pyiceberg.types import StringType

import support
from frazil.buffers.positions import Takers
from frazil.buffers.state import Buffers
from frazil.buffers.targets import Targets
from frazil.iceberg import catalog as iceberg_catalog
from frazil.ingest.evolve import Evolver
from frazil.ingest.formats import ValueFormats
from frazil.kafka.fetch import Record
from frazil.metrics import Metrics

TABLE = "db.events"


def test_records_with_a_column_another_process_added_land_after_a_write_loaded_the_table(tmp_path: Path) -> None:
    path = support.write_config(tmp_path, "127.0.0.1:1", ["t"], extra="")
    path.write_text(path.read_text().replace(f'name = "{TABLE}"\n', f'name = "{TABLE}"\nunknown_fields = "evolve"\n'))
    cfg = support.load(path)
    catalog = iceberg_catalog.load(cfg.catalog)
    try:
        table = iceberg_catalog.ensure_table(catalog, cfg.table, {})
        buffers = Buffers(Targets(cfg, catalog, {TABLE: table}, takers=lambda topic: Takers((TABLE,))))
        target = buffers.targets[TABLE]
        with catalog.load_table(TABLE).update_schema() as update:   # another process's change
            update.add_column("x1", StringType())
        target.load()   # as the worker's write step does before writing its files
        records = [Record("t", 0, i, 1_700_000_000_000, None, json.dumps({"id": i, "x1": f"v{i}"}).encode(), ())
                   for i in range(3)]
        errors = target.buffer.append("t", 0, records)
        assert [e.field for e in errors] == ["x1"] * 3   # the buffer predates the column
        evolver = Evolver(cfg, buffers, Metrics(cfg.pipeline, TABLE), ValueFormats(cfg.values))
        still = asyncio.run(evolver.rescue(TABLE, ("t", 0), records, errors, target.buffer))
        assert still == []
        drained = buffers.targets[TABLE].buffer.drain()
        assert drained is not None and drained.column("x1").to_pylist() == ["v0", "v1", "v2"]
    finally:
        support.close_catalog(catalog)
