"""Snapshot expiry in process (``iceberg/expiry.py``) against a real SQLite catalog: what it removes,
what it deletes, what it refuses to touch. Every file the kept history references must still be
there, and every row still read back."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from frazil import faults
from frazil.config import CatalogConfig, MaintenanceConfig
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import expiry
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range
from frazil.iceberg.pyiceberg_patches import manifest_lists

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))
CFG = MaintenanceConfig(max_snapshots=6)


def make(props: dict[str, str], name: str = "db.t") -> Catalog:
    catalog = iceberg_catalog.load(CatalogConfig("t", props))
    catalog.create_namespace(name.split(".")[0])
    # merges every 3 manifests, so manifests that only expired snapshots list exist
    catalog.create_table(name, SCHEMA, properties={"commit.manifest-merge.enabled": "true",
                                                   "commit.manifest.min-count-to-merge": "3"})
    return catalog


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return make({"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/wh"})


@pytest.fixture(params=["sqlite", "rest", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Catalog, str]:
    """SQLite with a local warehouse; the Iceberg REST catalog server (one per session: a namespace
    per test); SQLite with its warehouse in S3 (a bucket per test)."""
    unique = tmp_path.name.replace("-", "_").lower()
    if request.param == "sqlite":
        return make({"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/wh"}), "db.t"
    if request.param == "rest":
        name = f"expiry_{unique}.t"
        return make({"type": "rest", "uri": request.getfixturevalue("rest_catalog").uri}, name), name
    props = request.getfixturevalue("s3").catalog_properties(f"expiry-{unique}".replace("_", "-")[:60])
    return make({"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", **props}), "db.t"


def commit(catalog: Catalog, n: int, start: int = 0, name: str = "db.t") -> None:
    committer = Committer(catalog, name, "p")
    for i in range(start, start + n):
        committer.commit(pa.table({"id": [i], "s": [str(i)]}), {("topic", 0): Range(i, i + 1)}, f"c-{i}")


def referenced(table: Table) -> set[str]:
    """Every manifest list, manifest and live data file the table's snapshots (all of them) reference."""
    files: set[str] = set()
    for snapshot in table.metadata.snapshots:
        files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            files.add(manifest.manifest_path)
            files |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}
    return files


def exists(table: Table, path: str) -> bool:
    return table.io.new_input(path).exists()


def ids(table: Table) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def test_an_append_only_history_is_expired_to_the_newest_half_and_only_unreferenced_files_go(
        where: tuple[Catalog, str]) -> None:
    catalog, name = where
    commit(catalog, 12, name=name)
    before = catalog.load_table(name)
    old = list(before.metadata.snapshots)
    done = expiry.expire(catalog, name, CFG)
    assert done is not None and done.snapshots >= 6 and done.failed_deletes == 0
    after = catalog.load_table(name)
    kept = {s.snapshot_id for s in after.metadata.snapshots}
    assert len(kept) == done.kept <= CFG.max_snapshots and before.current_snapshot() == after.current_snapshot()
    removed = [s for s in old if s.snapshot_id not in kept]
    assert len(removed) == done.snapshots
    # the removed snapshots' manifest lists are gone, and some manifests only they listed
    assert not any(exists(after, s.manifest_list) for s in removed)
    assert done.manifest_lists == len(removed) and done.manifests >= 1
    # and no longer kept in memory; the kept history's lists are (read without their files)
    assert not any(manifest_lists.kept(s.manifest_list) for s in removed)
    assert all(manifest_lists.kept(s.manifest_list) for s in after.metadata.snapshots)
    # nothing the kept history references was deleted, and every row reads back, offsets included
    assert all(exists(after, path) for path in referenced(after))
    assert ids(after) == list(range(12))
    assert Committer(catalog, name, "p").stored_offsets() == {("topic", 0): 12}
    # commits go on on top of the expired table
    commit(catalog, 3, start=12, name=name)
    assert ids(catalog.load_table(name)) == list(range(15))


def test_nothing_is_expired_in_process_when_the_history_holds_a_delete(catalog: Catalog) -> None:
    """A delete (or a compaction's replace) means data files only the old snapshots hold: Spark's
    expiry deletes those, so the in-process one leaves the table alone."""
    commit(catalog, 4)
    catalog.load_table("db.t").delete("id = 0")
    commit(catalog, 6, start=4)
    table = catalog.load_table("db.t")
    assert expiry.plan(table.metadata, CFG, now_ms=2**62) is None
    assert expiry.expire(catalog, "db.t", CFG) is None
    assert len(catalog.load_table("db.t").metadata.snapshots) == len(table.metadata.snapshots)


def test_a_tag_on_an_old_snapshot_is_never_expired(catalog: Catalog) -> None:
    commit(catalog, 3)
    table = catalog.load_table("db.t")
    tagged = table.metadata.snapshots[1].snapshot_id
    table.manage_snapshots().create_tag(tagged, "audit").commit()
    commit(catalog, 9, start=3)
    done = expiry.expire(catalog, "db.t", CFG)
    assert done is not None
    after = catalog.load_table("db.t")
    assert after.metadata.snapshot_by_id(tagged) is not None
    assert all(exists(after, path) for path in referenced(after))
    assert ids(after) == list(range(12))


def test_a_commit_landing_between_the_plan_and_the_removal_wins(catalog: Catalog,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The removal requires the main branch where the plan saw it: a commit of another process in
    between makes the expiry give up (the next turn plans again), and takes nothing from that commit."""
    commit(catalog, 12)
    stale = catalog.load_table("db.t")
    commit(catalog, 1, start=12)   # lands after `stale` was read
    monkeypatch.setattr(catalog, "load_table", lambda name: stale)
    assert expiry.expire(catalog, "db.t", CFG) is None
    monkeypatch.undo()
    table = catalog.load_table("db.t")
    assert len(table.metadata.snapshots) == 13 and ids(table) == list(range(13))


def test_a_crash_after_the_removal_leaves_unreferenced_files_and_a_whole_table(catalog: Catalog) -> None:
    commit(catalog, 12)
    before = catalog.load_table("db.t")
    faults.arm("expiry.after_catalog", "raise")
    try:
        with pytest.raises(faults.InjectedFault):
            expiry.expire(catalog, "db.t", CFG)
    finally:
        faults.disarm()
    after = catalog.load_table("db.t")
    assert len(after.metadata.snapshots) < len(before.metadata.snapshots)
    assert all(exists(after, s.manifest_list) for s in before.metadata.snapshots)   # left for orphan removal
    assert ids(after) == list(range(12))


def test_the_plan_keeps_the_newest_half_and_refuses_a_young_table(catalog: Catalog) -> None:
    commit(catalog, 5)
    table = catalog.load_table("db.t")
    assert expiry.plan(table.metadata, CFG, now_ms=table.metadata.last_updated_ms) is None   # 5 <= 6, all young
    commit(catalog, 3, start=5)
    table = catalog.load_table("db.t")
    chosen = expiry.plan(table.metadata, CFG, now_ms=table.metadata.last_updated_ms)
    assert chosen is not None
    current = table.current_snapshot()
    assert current is not None and chosen.main_at == current.snapshot_id
    assert (current.snapshot_id not in chosen.snapshot_ids
            and len(table.metadata.snapshots) - len(chosen.snapshot_ids) >= 3)
