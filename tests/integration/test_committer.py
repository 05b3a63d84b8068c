"""The committer against a real SQLite catalog: rules 1, 3, 5 and the compare-and-swap."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog

import support
from frazil import config, faults
from frazil.errors import CommitFailed, OffsetGapError, OffsetOverlapError, TopicMismatchError
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import offsets
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range

TP = ("events", 0)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Catalog, config.Config]:
    cfg = support.load(support.write_config(tmp_path, "127.0.0.1:1", ["events"]))
    catalog = iceberg_catalog.load(cfg.catalog)
    iceberg_catalog.ensure_table(catalog, cfg.table)
    return catalog, cfg


@pytest.fixture(autouse=True)
def _disarm() -> None:
    yield
    faults.disarm()


def rows(cfg: config.Config, catalog: Catalog, start: int, end: int) -> pa.Table:
    schema = iceberg_catalog.arrow_schema(catalog.load_table(cfg.table.name))
    n = end - start
    return pa.Table.from_pydict({
        "id": list(range(start, end)), "name": ["x"] * n, "amount": [1.0] * n, "at": [None] * n,
        "_kafka_topic": [TP[0]] * n, "_kafka_partition": [TP[1]] * n, "_kafka_offset": list(range(start, end)),
        "_kafka_timestamp": [0] * n, "_kafka_key": [None] * n}, schema=schema)


def once_before_catalog(monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]) -> list[object]:
    """Runs ``action`` the first time a commit reaches ``commit.before_catalog`` (after its checks,
    before the catalog call; an inner commit of ``action`` passes that point too). Returns what it
    returned, once it has run."""
    original, done = faults.hit, []

    def hook(point: str, scope: str | None = None) -> None:
        if point == "commit.before_catalog" and not done:
            done.append(None)
            done[0] = action()
        original(point, scope)

    monkeypatch.setattr(faults, "hit", hook)
    return done


def data_snapshots(catalog: Catalog, cfg: config.Config) -> int:
    return sum(1 for s in catalog.load_table(cfg.table.name).snapshots()
               if s.summary and s.summary.operation.value == "append")


def test_offsets_move_only_with_data_and_ranges_must_be_contiguous(setup) -> None:
    catalog, cfg = setup
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    first = committer.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "c1")
    assert first.offsets == {TP: 10} and first.rows == 10
    table = catalog.load_table(cfg.table.name)
    summary = table.current_snapshot().summary.additional_properties
    assert summary[offsets.COMMIT_ID_KEY] == "c1"
    assert offsets.decode(summary[offsets.property_key(cfg.pipeline)]) == {TP: 10}

    # whole range already committed: nothing new lands
    again = committer.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "c2")
    assert again.already_committed and data_snapshots(catalog, cfg) == 1
    # overlap: never committed, the owner must re-read
    with pytest.raises(OffsetOverlapError, match=r"stored=10 range=\[5, 15\)"):
        committer.commit(rows(cfg, catalog, 5, 15), {TP: Range(5, 15)}, "c3")
    # gap: never committed, loudly
    with pytest.raises(OffsetGapError, match=r"stored=10 range=\[12, 20\)"):
        committer.commit(rows(cfg, catalog, 12, 20), {TP: Range(12, 20)}, "c4")
    assert data_snapshots(catalog, cfg) == 1
    assert committer.stored_offsets() == {TP: 10}
    committer.commit(rows(cfg, catalog, 10, 20), {TP: Range(10, 20)}, "c5")
    assert committer.stored_offsets() == {TP: 20}
    assert sorted(support.count_offsets(catalog, cfg.table.name)) == [("events", 0, o) for o in range(20)]


def test_two_pipelines_share_a_table_with_their_own_offsets(setup) -> None:
    catalog, cfg = setup
    Committer(catalog, cfg.table.name, "a").commit(rows(cfg, catalog, 0, 5), {TP: Range(0, 5)}, "a1")
    Committer(catalog, cfg.table.name, "b").commit(rows(cfg, catalog, 0, 3), {TP: Range(0, 3)}, "b1")
    props = catalog.load_table(cfg.table.name).properties
    assert offsets.stored_offsets(props, "a") == {TP: 5}
    assert offsets.stored_offsets(props, "b") == {TP: 3}


def test_lost_response_is_resolved_by_commit_id(setup) -> None:
    """Rule 5: the commit landed but the caller saw an error; the committer finds its commit id
    instead of guessing. A blind retry would report it as 'already committed' with 0 rows."""
    catalog, cfg = setup
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    faults.arm("commit.after_catalog", "raise-once")
    result = committer.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "lost-1")
    landed = catalog.load_table(cfg.table.name).current_snapshot()
    assert result.snapshot_id == landed.snapshot_id and result.rows == 10 and not result.already_committed
    assert not result.found   # this call landed it (its response was lost)
    assert data_snapshots(catalog, cfg) == 1
    assert sum(support.count_offsets(catalog, cfg.table.name).values()) == 10


def test_a_commit_another_process_landed_is_found_not_landed_again(setup) -> None:
    """A coordinator woken after a takeover commits a cycle the new coordinator already landed
    under the same commit id: it finds it, lands nothing, and says so (``found``: the metrics and
    the log do not count it as its own landing)."""
    catalog, cfg = setup
    taker = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    zombie = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    landed = taker.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "cycle-7")
    assert not landed.found
    again = zombie.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "cycle-7")
    assert again.found and again.snapshot_id == landed.snapshot_id and again.offsets == {TP: 10}
    assert data_snapshots(catalog, cfg) == 1


def test_where_the_dead_letter_topic_stood_is_kept_with_the_commit_and_found_with_it(setup) -> None:
    """A commit carrying bad records keeps where the dead-letter topic stood before it (in its
    snapshot summary); whoever finds that commit id landed gets that commit's own anchor back, not
    a later one's; a commit whose every range was in the table already has none to give."""
    catalog, cfg = setup
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    key = offsets.letters_key(cfg.pipeline)
    first = committer.commit_files(committer.write_files(rows(cfg, catalog, 0, 10)), {TP: Range(0, 10)}, "c1",
                                   letters_from="at-5")
    assert first.letters_from == "at-5" and not first.found
    assert catalog.load_table(cfg.table.name).current_snapshot().summary.additional_properties[key] == "at-5"
    committer.commit_files(committer.write_files(rows(cfg, catalog, 10, 20)), {TP: Range(10, 20)}, "c2")
    committer.commit_files(committer.write_files(rows(cfg, catalog, 20, 30)), {TP: Range(20, 30)}, "c3",
                           letters_from="at-9")
    again = committer.commit_files(committer.write_files(rows(cfg, catalog, 0, 10)), {TP: Range(0, 10)}, "c1",
                                   letters_from="at-12")
    assert again.found and again.letters_from == "at-5"   # c1's own, from its snapshot
    other = committer.commit_files(committer.write_files(rows(cfg, catalog, 20, 30)), {TP: Range(20, 30)}, "c4",
                                   letters_from="at-12")
    assert other.already_committed and other.letters_from == ""   # not c3's: its letters are not c4's
    assert key not in catalog.load_table(cfg.table.name).properties


def test_failures_are_bounded_and_leave_no_offsets(setup) -> None:
    """Rule 8 and rule 1: a commit that keeps failing stops after max attempts, loudly, and the
    table's offsets have not moved."""
    catalog, cfg = setup
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, max_attempts=3, sleep=lambda s: None)
    faults.arm("commit.before_catalog", "raise")
    with pytest.raises(CommitFailed, match="failed 3 times"):
        committer.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "never")
    assert committer.stored_offsets() == {} and data_snapshots(catalog, cfg) == 0


def test_contiguity_is_checked_inside_the_compare_and_swap(setup, monkeypatch) -> None:
    """Another committer lands the same range between our read and our commit. The catalog's
    compare-and-swap must refuse ours, and the re-check must see the range as committed: the rows
    land once. With pyiceberg's own retry on (commit.retry.num-retries > 0) they would land twice."""
    catalog, cfg = setup
    ours = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    theirs = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    raced = once_before_catalog(monkeypatch, lambda: theirs.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)},
                                                                   "theirs"))
    result = ours.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "ours")
    assert raced and result.already_committed and result.attempts == 2
    counts = support.count_offsets(catalog, cfg.table.name)
    assert max(counts.values()) == 1 and len(counts) == 10


def test_the_pipeline_watermark_is_kept_with_the_offsets_and_never_moves_back(setup) -> None:
    catalog, cfg = setup
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    other = ("events", 1)
    committer.commit_files(committer.write_files(rows(cfg, catalog, 0, 10)), {TP: Range(0, 10)}, "c1",
                           progress={TP: 0, other: 40})
    committer.commit_files(committer.write_files(rows(cfg, catalog, 10, 20)), {TP: Range(10, 20)}, "c2",
                           progress={TP: 10, other: 30})   # a late worker's lower mark: the higher one stays
    held = committer.stored()
    stored, progress = held.offsets, held.progress
    assert stored == {TP: 20} and progress == {TP: 10, other: 40}
    summary = catalog.load_table(cfg.table.name).current_snapshot().summary.additional_properties
    assert offsets.decode(summary[offsets.progress_key(cfg.pipeline)]) == {TP: 10, other: 40}


def test_a_topic_id_is_kept_with_the_offsets_and_records_of_a_recreated_topic_are_refused(setup) -> None:
    catalog, cfg = setup
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    # a table written before ids were kept (or by a worker that sends none): nothing to judge
    committer.commit_files(committer.write_files(rows(cfg, catalog, 0, 10)), {TP: Range(0, 10)}, "c1")
    assert committer.stored().topic_ids == {}
    # the first commit that names the topic's id keeps it, in the property and the snapshot summary
    committer.commit_files(committer.write_files(rows(cfg, catalog, 10, 20)), {TP: Range(10, 20)}, "c2",
                           topic_ids={TP[0]: "A"})
    table = catalog.load_table(cfg.table.name)
    assert committer.stored().topic_ids == {TP[0]: "A"}
    summary = table.current_snapshot().summary.additional_properties
    assert offsets.stored_topic_ids(summary, cfg.pipeline) == {TP[0]: "A"}
    # records read from a topic of the same name with another id: refused, nothing committed
    before = table.current_snapshot().snapshot_id
    with pytest.raises(TopicMismatchError, match=r"topic events: the table's offsets were read from topic id A, "
                                                 r"these records from B.*frazil.topic-ids"):
        committer.commit_files(committer.write_files(rows(cfg, catalog, 20, 30)), {TP: Range(20, 30)}, "c3",
                               topic_ids={TP[0]: "B"})
    assert catalog.load_table(cfg.table.name).current_snapshot().snapshot_id == before
    assert committer.stored().offsets == {TP: 20}
    # the same id, or none (a worker of the previous version), lands
    committer.commit_files(committer.write_files(rows(cfg, catalog, 20, 30)), {TP: Range(20, 30)}, "c4")
    committer.commit_files(committer.write_files(rows(cfg, catalog, 30, 40)), {TP: Range(30, 40)}, "c5",
                           topic_ids={TP[0]: "A"})
    assert committer.stored().offsets == {TP: 40} and committer.stored().topic_ids == {TP[0]: "A"}


def test_an_existing_table_whose_column_types_disagree_with_the_config_is_a_startup_error(setup) -> None:
    import dataclasses

    from frazil.errors import ConfigError

    catalog, cfg = setup
    columns = tuple(dataclasses.replace(c, type="long") if c.name == "amount" else c for c in cfg.table.columns)
    with pytest.raises(ConfigError, match=r"db.events: column types disagree: amount is double in the table but long "
                                          r"in the config"):
        iceberg_catalog.ensure_table(catalog, dataclasses.replace(cfg.table, columns=columns))
    required = tuple(dataclasses.replace(c, required=True) if c.name == "name" else c for c in cfg.table.columns)
    with pytest.raises(ConfigError, match=r"name is optional in the table but required in the config"):
        iceberg_catalog.ensure_table(catalog, dataclasses.replace(cfg.table, columns=required))
    iceberg_catalog.ensure_table(catalog, cfg.table)   # agreeing: fine


def test_a_created_table_maps_names_to_field_ids_for_files_written_without_them(setup) -> None:
    import json

    catalog, cfg = setup
    table = catalog.load_table(cfg.table.name)
    mapping = json.loads(table.properties[iceberg_catalog.NAME_MAPPING])
    assert {tuple(m["names"]): m["field-id"] for m in mapping} == {
        (f.name,): f.field_id for f in table.schema().fields}


def test_a_sqlite_catalog_is_switched_to_its_write_ahead_log_and_stays_durable(setup) -> None:
    """One fsync a commit instead of several: the database's journal mode is WAL (kept in the
    file), and synchronous stays FULL, so a landed commit survives a power cut."""
    import sqlite3

    catalog, cfg = setup
    path = cfg.catalog.properties["uri"].removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with catalog.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2   # FULL
    # sqlite_journal = "keep" (a network file system): a database is left in the mode it has
    import dataclasses

    kept = cfg.catalog.properties["uri"].replace("catalog.db", "kept.db")
    keep = dataclasses.replace(cfg.catalog, properties={**cfg.catalog.properties, "uri": kept},
                               sqlite_journal="keep")
    support.close_catalog(iceberg_catalog.load(keep))
    with sqlite3.connect(kept.removeprefix("sqlite:///")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_created_table_is_one_commit_with_every_property_and_a_name_mapping_of_its_nested_ids(setup) -> None:
    """Creating a table writes its first metadata only (a pipeline creating 200 tables pays 200
    catalog commits, not 400), and the name mapping made before the catalog numbered the schema
    matches the ids it gave, nested ones too."""
    import dataclasses

    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import create_mapping_from_schema
    from pyiceberg.types import DoubleType, ListType, LongType, MapType, NestedField, StringType, StructType

    catalog, cfg = setup
    nested = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "tags", ListType(3, StringType(), element_required=False), required=False),
        NestedField(4, "geo", StructType(NestedField(5, "lat", DoubleType(), required=False),
                                         NestedField(6, "attrs", MapType(7, StringType(), 8, StringType(),
                                                                         value_required=False), required=False)),
                    required=False))
    wanted = dataclasses.replace(cfg.table, name="db.nested", columns=(), metadata_columns=False)
    table = iceberg_catalog.ensure_table(catalog, wanted, schema=lambda: nested)
    assert len(table.metadata.metadata_log) == 0   # the metadata it was created with, and no other
    assert table.properties["write.parquet.compression-codec"] == "zstd"
    mapping = create_mapping_from_schema(table.schema()).model_dump_json()
    assert table.properties[iceberg_catalog.NAME_MAPPING] == mapping
    assert iceberg_catalog.ensure_table(catalog, wanted, schema=lambda: nested).metadata_location == \
        table.metadata_location   # nothing left to set


def test_a_created_table_gets_its_identifier_columns_sort_order_and_properties(setup) -> None:
    import dataclasses

    from pyiceberg.table.sorting import NullOrder, SortDirection

    from frazil.errors import ConfigError

    catalog, cfg = setup
    columns = tuple(dataclasses.replace(c, required=True) if c.name == "id" else c for c in cfg.table.columns)
    wanted = dataclasses.replace(cfg.table, name="db.shaped", columns=columns, identifier_columns=("id",),
                                 sort_order="at DESC, name", properties={"write.parquet.compression-codec": "zstd"})
    table = iceberg_catalog.ensure_table(catalog, wanted)
    assert table.schema().identifier_field_names() == {"id"}
    order = table.sort_order()
    assert [(table.schema().find_column_name(f.source_id), f.direction, f.null_order) for f in order.fields] == [
        ("at", SortDirection.DESC, NullOrder.NULLS_LAST), ("name", SortDirection.ASC, NullOrder.NULLS_FIRST)]
    assert table.properties["write.parquet.compression-codec"] == "zstd"
    with pytest.raises(ConfigError, match=r"db.shaped: identifier columns are \['id'\] in the table but \['name'\]"):
        iceberg_catalog.ensure_table(catalog, dataclasses.replace(wanted, identifier_columns=("name",)))
    # no codec given: zstd (what pyiceberg writes), so Spark's compaction does not fall back to gzip;
    # a codec the table has is kept
    plain = iceberg_catalog.ensure_table(catalog, dataclasses.replace(cfg.table, name="db.plain"))
    assert plain.properties["write.parquet.compression-codec"] == "zstd"
    with plain.transaction() as tx:
        tx.set_properties({"write.parquet.compression-codec": "snappy"})
    kept = iceberg_catalog.ensure_table(catalog, dataclasses.replace(cfg.table, name="db.plain"))
    assert kept.properties["write.parquet.compression-codec"] == "snappy"


def test_a_sealed_commit_id_never_lands_even_from_a_commit_already_past_its_checks(setup, monkeypatch) -> None:
    """A paused coordinator (a zombie) has loaded the table and checked its ranges; meanwhile the
    coordinator that took the cycle over seals the commit id. The zombie's catalog commit must lose
    the compare-and-swap and then be refused as sealed: nothing lands, the offsets stay. Without the
    seal it would land (its ranges are contiguous), after the cycle was closed."""
    catalog, cfg = setup
    zombie = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    taker = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    sealed = once_before_catalog(monkeypatch, lambda: taker.seal("cycle-9", reason="taken over"))
    with pytest.raises(OffsetOverlapError, match="sealed"):
        zombie.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "cycle-9")
    assert sealed and not sealed[0].found and data_snapshots(catalog, cfg) == 1   # the seal's empty snapshot only
    assert zombie.stored_offsets() == {} and support.count_offsets(catalog, cfg.table.name) == {}
    # a seal changes nothing for the next commits, and sealing again finds its own seal, not a landing
    assert zombie.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "cycle-10").offsets == {TP: 10}
    again = taker.seal("cycle-9", reason="taken over again")
    assert not again.found and again.offsets == {TP: 10}


def test_sealing_a_commit_id_that_landed_finds_it_and_changes_nothing(setup) -> None:
    """The zombie's commit landed before the seal: the seal says so (its bad records are then sent)."""
    catalog, cfg = setup
    landed = Committer(catalog, cfg.table.name, cfg.pipeline).commit(rows(cfg, catalog, 0, 10),
                                                                     {TP: Range(0, 10)}, "c-1")
    snapshots = len(catalog.load_table(cfg.table.name).snapshots())
    result = Committer(catalog, cfg.table.name, cfg.pipeline).seal("c-1", reason="taken over")
    assert result.found and result.snapshot_id == landed.snapshot_id and result.offsets == {TP: 10}
    assert len(catalog.load_table(cfg.table.name).snapshots()) == snapshots


def test_manifests_are_merged_so_the_manifest_list_stays_short(setup) -> None:
    """Every append adds a manifest and every commit rewrites the list of all of them: frazil's
    tables merge them once 16 are there (catalog.MANIFEST_MERGE), and nothing is lost doing it."""
    catalog, cfg = setup
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    for i in range(40):
        committer.commit(rows(cfg, catalog, 10 * i, 10 * (i + 1)), {TP: Range(10 * i, 10 * (i + 1))}, f"c{i}")
    table = catalog.load_table(cfg.table.name)
    assert table.properties["commit.manifest.min-count-to-merge"] == "16"
    assert len(table.current_snapshot().manifests(table.io)) <= 16
    counts = support.count_offsets(catalog, cfg.table.name)
    assert sorted(counts) == [("events", 0, o) for o in range(400)] and set(counts.values()) == {1}
    assert committer.stored_offsets() == {TP: 400}


def test_a_tables_own_manifest_merge_settings_are_kept(tmp_path: Path) -> None:
    cfg = support.load(support.write_config(tmp_path, "127.0.0.1:1", ["events"]))
    catalog = iceberg_catalog.load(cfg.catalog)
    table = iceberg_catalog.ensure_table(catalog, cfg.table)
    with table.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "100", "commit.manifest-merge.enabled": "false"})
    again = iceberg_catalog.ensure_table(catalog, cfg.table)
    assert again.properties["commit.manifest.min-count-to-merge"] == "100"
    assert again.properties["commit.manifest-merge.enabled"] == "false"
