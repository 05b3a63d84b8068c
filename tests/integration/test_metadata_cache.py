"""Parsed metadata kept by location (``iceberg/pyiceberg_patches/metadata_cache.py``) changes no result: against a real
SQLite catalog, on a tested pyiceberg release. What another process commits is seen at once."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg import serializers
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import LongType, NestedField, StringType

from frazil.config import CatalogConfig
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import pyiceberg_patches
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range
from frazil.iceberg.pyiceberg_patches import metadata_cache

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))


@pytest.fixture
def props(tmp_path: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/wh"}


@pytest.fixture
def catalog(props: dict[str, str]) -> Catalog:
    catalog = iceberg_catalog.load(CatalogConfig("t", props))
    assert metadata_cache.installed()
    catalog.create_namespace("db")
    return catalog


def parsed(location: str, catalog: Catalog) -> TableMetadata:
    """The file at ``location`` parsed by pyiceberg itself, past the kept copies."""
    data = catalog.load_table("db.t").io.new_input(location).open().read()
    return serializers.FromByteStream.table_metadata(io.BytesIO(data))


def test_the_pyiceberg_version_is_the_one_whose_serializers_were_checked() -> None:
    """An upgrade fails here: check that every file catalog still reads and writes table metadata
    through FromInputFile / ToOutputFile and that metadata files are still never rewritten in place;
    then add the release to pyiceberg_patches.TESTED."""
    assert pyiceberg.__version__ in pyiceberg_patches.TESTED


def test_every_kept_metadata_is_what_its_file_holds(catalog: Catalog) -> None:
    """Appends, frazil commits, properties, a schema change, a rollback: for every metadata file the
    table went through, the kept object equals pyiceberg's own parse of the file, and serializes to
    the same JSON."""
    table = catalog.create_table("db.t", SCHEMA)
    table.append(pa.table({"id": [1], "s": ["a"]}))
    committer = Committer(catalog, "db.t", "p")
    for i in range(3):
        committer.commit(pa.table({"id": [10 + i], "s": [str(i)]}), {("topic", 0): Range(i, i + 1)}, f"c-{i}")
    table = catalog.load_table("db.t")
    with table.transaction() as tx:
        tx.set_properties({"k": "v"})
        with tx.update_schema() as update:
            update.add_column("extra", LongType())
    table = catalog.load_table("db.t")
    first = table.snapshots()[0].snapshot_id
    table.manage_snapshots().rollback_to_snapshot(first).commit()
    table = catalog.load_table("db.t")
    locations = [entry.metadata_file for entry in table.metadata.metadata_log] + [table.metadata_location]
    assert len(locations) >= 7
    checked = 0
    for location in locations:
        kept = metadata_cache.kept.get(location)
        if kept is None:
            continue
        fresh = parsed(location, catalog)
        assert kept == fresh, location
        assert kept.model_dump_json() == fresh.model_dump_json(), location
        checked += 1
    assert checked >= 6
    current = table.current_snapshot()
    assert current is not None and current.snapshot_id == first and table.scan().to_arrow().num_rows == 1


def test_a_written_metadata_file_is_pyiceberg_json_with_each_snapshot_serialized_once(
        catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON frazil writes is the object pyiceberg's own write makes (with and without None
    values: ``legacy-current-snapshot-id``), and a commit serializes only its new snapshot. A v1
    table is written by pyiceberg's serializer as it is (v1 drops the snapshots' sequence numbers)."""
    table = catalog.create_table("db.t", SCHEMA)
    table.append(pa.table({"id": [1], "s": ["a"]}))
    committer = Committer(catalog, "db.t", "p")
    for i in range(3):
        committer.commit(pa.table({"id": [10 + i], "s": [str(i)]}), {("topic", 0): Range(i, i + 1)}, f"c-{i}")
    catalog.load_table("db.t").delete("id = 10")
    metadata = catalog.load_table("db.t").metadata
    assert len(metadata.snapshots) >= 5
    for exclude_none in (True, False):
        mine = json.loads(metadata_cache.metadata_json(metadata, exclude_none))
        assert mine == json.loads(metadata.model_dump_json(exclude_none=exclude_none))

    made: list[int] = []
    original = Snapshot.model_dump_json

    def counted(self: Snapshot, **kwargs: Any) -> str:
        made.append(self.snapshot_id)
        return original(self, **kwargs)

    monkeypatch.setattr(Snapshot, "model_dump_json", counted)
    result = committer.commit(pa.table({"id": [20], "s": ["x"]}), {("topic", 0): Range(3, 4)}, "c-3")
    assert made == [result.snapshot_id]
    table = catalog.load_table("db.t")
    assert parsed(table.metadata_location, catalog) == table.metadata

    # the oldest snapshots expired: the next write's history no longer extends the last one's
    oldest = [s.snapshot_id for s in table.snapshots()[:2]]
    table.maintenance.expire_snapshots().by_ids(oldest).commit()
    committer.commit(pa.table({"id": [21], "s": ["y"]}), {("topic", 0): Range(4, 5)}, "c-4")
    table = catalog.load_table("db.t")
    assert not {s.snapshot_id for s in table.snapshots()} & set(oldest)
    assert parsed(table.metadata_location, catalog) == table.metadata
    for exclude_none in (True, False):
        mine = json.loads(metadata_cache.metadata_json(table.metadata, exclude_none))
        assert mine == json.loads(table.metadata.model_dump_json(exclude_none=exclude_none))

    v1 = catalog.create_table("db.v1", SCHEMA, properties={"format-version": "1"})
    v1.append(pa.table({"id": [1], "s": ["a"]}))
    metadata = catalog.load_table("db.v1").metadata
    assert metadata.format_version == 1
    assert metadata_cache.metadata_json(metadata, True) == metadata.model_dump_json(exclude_none=True)


def test_a_commit_parses_no_metadata_file(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog.create_table("db.t", SCHEMA)
    committer = Committer(catalog, "db.t", "p")
    committer.commit(pa.table({"id": [0], "s": ["0"]}), {("topic", 0): Range(0, 1)}, "c-0")
    parses: list[object] = []
    original = serializers.FromByteStream.table_metadata

    def counted(*args: object, **kwargs: object) -> TableMetadata:
        parses.append(args)
        return original(*args, **kwargs)   # type: ignore[arg-type]

    monkeypatch.setattr(serializers.FromByteStream, "table_metadata", staticmethod(counted))
    for i in range(1, 4):
        result = committer.commit(pa.table({"id": [i], "s": [str(i)]}), {("topic", 0): Range(i, i + 1)}, f"c-{i}")
        assert result.snapshot_id is not None
    assert parses == []
    assert catalog.load_table("db.t").scan().to_arrow().num_rows == 4


def test_a_commit_by_another_process_is_seen_at_once(catalog: Catalog, props: dict[str, str]) -> None:
    """The catalog's pointer is read on every load; only the parse of a file is saved. Another
    process's commit (a real one, in a subprocess) is in the next load, and frazil's next commit
    builds on it: no data of either is lost."""
    catalog.create_table("db.t", SCHEMA)
    committer = Committer(catalog, "db.t", "p")
    committer.commit(pa.table({"id": [0], "s": ["0"]}), {("topic", 0): Range(0, 1)}, "c-0")
    before = catalog.load_table("db.t")
    script = textwrap.dedent(f"""
        import pyarrow as pa
        from pyiceberg.catalog.sql import SqlCatalog
        catalog = SqlCatalog("t", uri={props['uri']!r}, warehouse={props['warehouse']!r})
        catalog.load_table("db.t").append(pa.table({{"id": [100], "s": ["other"]}}))
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    after = catalog.load_table("db.t")
    assert after.metadata_location != before.metadata_location
    assert len(after.snapshots()) == len(before.snapshots()) + 1
    assert sorted(after.scan().to_arrow().column("id").to_pylist()) == [0, 100]
    committer.commit(pa.table({"id": [1], "s": ["1"]}), {("topic", 0): Range(1, 2)}, "c-1")
    assert sorted(catalog.load_table("db.t").scan().to_arrow().column("id").to_pylist()) == [0, 1, 100]


def test_kept_metadata_is_bounded_by_count_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = metadata_cache._Kept()
    monkeypatch.setattr(metadata_cache, "MAX_ENTRIES", 3)
    monkeypatch.setattr(metadata_cache, "MAX_BYTES", 100)
    marker = object()
    for i in range(5):
        kept.put(f"m{i}", marker, 10)   # type: ignore[arg-type]
    assert len(kept) == 3 and kept.get("m0") is None and kept.get("m4") is marker
    kept.get("m2")   # used: m3 and m4 go first
    kept.put("big", marker, 90)   # type: ignore[arg-type]
    assert kept.get("big") is marker and kept.get("m2") is marker and kept.get("m3") is None and kept.get("m4") is None
    kept.put("huge", marker, 101)   # type: ignore[arg-type]
    assert kept.get("huge") is None and kept.get("big") is marker
