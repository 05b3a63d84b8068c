"""What a keyed table's key index costs at a restart and after another writer's commit, side by side.

For each size, one run builds a keyed table of N distinct long keys (data files of 1M rows, a
SQLite catalog in a temporary folder), then measures on it:

- ``build_s``: the index built from every data file's key column (what every start did before
  checkpoints, and what the first start still does);
- ``checkpoint_write_s`` / ``checkpoint_mb``: the index written as a checkpoint (at each stop);
- ``checkpoint_read_s``: a start that reads the checkpoint back (manifests planned, no data read);
- after another writer appends one file of 100k new keys: ``update_s`` (the index moved by that
  file alone) beside ``rebuild_s`` (built again from every file, what it did before);
- ``index_mb``: the native index's own estimate of its heap.

Writes ``benches/results/keyindex.json``.

    python benches/keyindex.py [--keys 1000000 10000000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import _results
from frazil.iceberg import mutations
from frazil.iceberg.index_store import IndexStore

FILE_ROWS = 1_000_000
APPENDED = 100_000


def rows(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "name": pa.compute.cast(ids, pa.string())},
                    schema=pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())]))


def measure(keys: int) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="frazil-keyindex-bench-"))
    try:
        catalog = SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
        catalog.create_namespace("db")
        schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
                        identifier_field_ids=[1])
        table = catalog.create_table("db.keyed", schema)
        for start in range(0, keys, FILE_ROWS):
            table.append(rows(start, min(FILE_ROWS, keys - start)))
        table = catalog.load_table("db.keyed")
        began = time.perf_counter()
        index = mutations.build_index(table, ("id",))
        build_s = time.perf_counter() - began
        assert len(index) == keys, (len(index), keys)
        store = IndexStore(root / "key-index")
        began = time.perf_counter()
        store.save("db.keyed", index)
        write_s = time.perf_counter() - began
        size_mb = store.path("db.keyed").stat().st_size / 2**20
        began = time.perf_counter()
        loaded = store.load("db.keyed", table, ("id",))
        read_s = time.perf_counter() - began
        assert loaded is not None and len(loaded) == keys
        table.append(rows(keys, APPENDED))   # another writer
        table = catalog.load_table("db.keyed")
        began = time.perf_counter()
        update = mutations.update_index(table, loaded)
        update_s = time.perf_counter() - began
        assert update is not None and update.read == 1 and len(loaded) == keys + APPENDED
        began = time.perf_counter()
        rebuilt = mutations.build_index(table, ("id",))
        rebuild_s = time.perf_counter() - began
        assert len(rebuilt) == keys + APPENDED
        row = {"keys": keys, "data_files": -(-keys // FILE_ROWS), "build_s": round(build_s, 3),
               "checkpoint_write_s": round(write_s, 3), "checkpoint_mb": round(size_mb, 1),
               "checkpoint_read_s": round(read_s, 3), "read_vs_build": round(build_s / read_s, 2),
               "update_s": round(update_s, 3), "rebuild_s": round(rebuild_s, 3),
               "update_vs_rebuild": round(rebuild_s / update_s, 2),
               "index_mb": round(index.native.memory_bytes / 2**20, 1)}
        print(row, flush=True)
        return row
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 10_000_000])
    args = parser.parse_args()
    _results.write("keyindex", [measure(n) for n in args.keys],
                   note="one run, one process; times are wall seconds on this machine")


if __name__ == "__main__":
    main()
