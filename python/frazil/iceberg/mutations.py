"""Keyed tables (``mode = "upsert"`` or ``"cdc"``): every change replaces or deletes the row of its
key, and frazil commits the new rows together with position deletes of the rows they replace, in
one snapshot (docs/position-deletes.md). No equality deletes: pyiceberg cannot read them.

- :func:`latest` (pure): of a batch's upserts and deletes, the latest change per key by
  (partition, offset); a worker applies it before writing.
- A worker writes the winning upserts as data files and the winning deletes as a *key file*
  (``frazil-keys-*.parquet``: identifier columns and Kafka metadata), which travels like a data
  file but is never committed to the table.
- :class:`KeyIndex`: per committed key, the data file and row position holding it, as of one
  snapshot of the table. Built from the table at a restart; brought up to a snapshot it has not
  seen (a compaction, another writer) from the files that snapshot changed (:func:`update_index`),
  or built again where that cannot be said: positions are never stale.
- :func:`plan` decides, for one commit attempt, which positions to delete: the committed row of
  every key the new files touch, and the older of two changes to one key in new files of
  different workers. :func:`write_position_deletes` writes them; ``pyiceberg_patches.row_delta.RowDelta`` commits data
  and deletes in one snapshot (a pyiceberg snapshot producer: ``pyiceberg_patches/row_delta.py``).
"""

from __future__ import annotations

import logging
import os
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, ancestors_of
from pyiceberg.typedef import Record

from frazil import _native
from frazil.iceberg import offsets

log = logging.getLogger(__name__)

PARTITION, OFFSET = "_kafka_partition", "_kafka_offset"
MODE_PROPERTY = "frazil.mode"          # "upsert" or "cdc" on a keyed table; absent: append
STAGING_PROPERTY = "frazil.staging-for"   # on a staging table (merge = "spark"): the table it is merged into
KEYED_MODES = ("upsert", "cdc")
KEY_FILE_PREFIX = "frazil-keys-"
# Spark's DML and maintenance on a keyed table write position deletes too, never rewrite files
MERGE_ON_READ = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                 "write.merge.mode": "merge-on-read"}
PATH_ID, POS_ID = 2147483546, 2147483545   # the position-delete columns' reserved field ids
POSITION_DELETE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(PATH_ID)}),
    pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_ID)}),
])

def keyed(table: Table) -> tuple[str, ...]:
    """The identifier columns of a keyed table; () for an append table."""
    if table.properties.get(MODE_PROPERTY) not in KEYED_MODES:
        return ()
    schema = table.schema()
    return tuple(schema.find_column_name(i) or "" for i in schema.identifier_field_ids)


def is_key_file(path: str) -> bool:
    return os.path.basename(path).startswith(KEY_FILE_PREFIX)


@dataclass(frozen=True)
class Latest:
    rows: pa.Table | None       # the upserts that won, in their order
    deletes: pa.Table | None    # the deletes that won, in their order
    replaced: int               # changes that lost to a later change of their key
    split_keys: int             # keys changed from more than one partition (expected: one partition per key)


def _changes(tables: Sequence[tuple[pa.Table, int]], identifiers: Sequence[str]) -> pa.Table:
    """Key columns ``k0..``, partition ``p``, offset ``o``, the table each row came from ``t`` and
    its row number there ``i``, of every table; sorted by key, then (partition, offset)."""
    parts = [pa.table({**{f"k{n}": table.column(name) for n, name in enumerate(identifiers)},
                       "p": table.column(PARTITION), "o": table.column(OFFSET),
                       "t": pa.nulls(table.num_rows, pa.int32()).fill_null(tag),
                       "i": _row_numbers(table.num_rows)}) for table, tag in tables if table.num_rows]
    both = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    # one chunk: sorted in one pass, where the buffers' many chunks are each sorted, then merged
    # (a third less CPU for a million changes)
    both = both.combine_chunks()
    keys = [f"k{n}" for n in range(len(identifiers))]
    return both.take(pc.sort_indices(both, sort_keys=[*((k, "ascending") for k in keys), ("p", "ascending"),
                                                      ("o", "ascending")]))


def _row_numbers(n: int) -> pa.Array:
    """0, 1, ... n - 1, made by Arrow (from a Python range it takes 0.05 s a million)."""
    return pc.subtract(pc.cumulative_sum(pa.nulls(n, pa.int64()).fill_null(1)), 1)


def _last_of_each_key(changes: pa.Table, width: int) -> pa.Array:
    """Per row of sorted ``changes``: whether it is the last change of its key (the one that wins)."""
    n = changes.num_rows
    if n == 1:
        return pa.array([True])
    out = None
    for k in range(width):
        col = changes.column(f"k{k}").combine_chunks()
        differs = pc.not_equal(col.slice(0, n - 1), col.slice(1))
        out = differs if out is None else pc.or_(out, differs)
    assert out is not None
    return pa.concat_arrays([out, pa.array([True])])


def _split_keys(changes: pa.Table, width: int) -> int:
    """Keys changed from more than one partition."""
    per_key = changes.group_by([f"k{k}" for k in range(width)]).aggregate([("p", "count_distinct")])
    return int(pc.sum(pc.greater(per_key.column("p_count_distinct"), 1)).as_py() or 0)


def latest(rows: pa.Table | None, deletes: pa.Table | None, identifiers: Sequence[str]) -> Latest:
    """Of ``rows`` (upserts) and ``deletes`` (keys), each with ``_kafka_partition`` and
    ``_kafka_offset``, the latest change per key by (partition, offset): never by arrival."""
    tagged = [(t, tag) for tag, t in ((0, rows), (1, deletes)) if t is not None and t.num_rows]
    if not tagged:
        return Latest(rows, deletes, 0, 0)
    changes = _changes(tagged, identifiers)
    won = changes.filter(_last_of_each_key(changes, len(identifiers)))
    if won.num_rows == changes.num_rows:   # every key changed once: nothing to drop, nothing copied
        return Latest(rows, deletes, 0, 0)

    def kept(table: pa.Table | None, tag: int) -> pa.Table | None:
        if table is None:
            return None
        chosen = won.filter(pc.equal(won.column("t"), tag)).column("i")
        return table.take(chosen.take(pc.sort_indices(chosen)))

    return Latest(kept(rows, 0), kept(deletes, 1), changes.num_rows - won.num_rows,
                  _split_keys(changes, len(identifiers)))


def key_batch(table: pa.Table, identifiers: Sequence[str], schema: pa.Schema) -> pa.RecordBatch:
    """The identifier columns of ``table`` as one batch of the index's key ``schema``."""
    columns = [table.column(name).cast(schema.field(n).type).combine_chunks() for n, name in enumerate(identifiers)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class KeyIndex:
    """Per committed key: (data file, row position), as of ``snapshot_id`` of the table, held
    natively (``_native.KeyIndex``: the key columns row-encoded, about 40 bytes a key plus the
    key's bytes). A key found more than once (a table written before it was keyed) keeps every
    position, and its next change deletes them all."""

    def __init__(self, identifiers: Sequence[str], key_schema: pa.Schema, snapshot_id: int | None = None, *,
                 table_uuid: str = "") -> None:
        self.identifiers = tuple(identifiers)
        self.schema = key_schema
        self.snapshot_id = snapshot_id
        self.table_uuid = table_uuid   # of the table it indexes: a checkpoint is only read back into it
        self.native = _native.KeyIndex(key_schema)
        self.files: dict[str, tuple[int, Record]] = {}   # path: (spec id, partition)

    def __len__(self) -> int:
        return len(self.native)

    def add(self, keys: pa.Table, path: str, positions: Sequence[int]) -> None:
        if keys.num_rows:
            self.native.add(key_batch(keys, self.identifiers, self.schema), path, list(positions))

    def positions(self, keys: pa.Table) -> list[tuple[str, list[int]]]:
        return self.native.positions(key_batch(keys, self.identifiers, self.schema)) if keys.num_rows else []

    def forget(self, keys: pa.Table) -> None:
        if keys.num_rows:
            self.native.forget(key_batch(keys, self.identifiers, self.schema))


def rows_unmoved_since(table: Table, snapshot_id: int | None) -> bool:
    """Whether every live row of ``table`` is where it was at ``snapshot_id``: each snapshot since
    is one that adds and removes no data file (a rewrite of delete files only, which deletes no
    other row). Then a key index of ``snapshot_id`` is still right."""
    current = table.current_snapshot()
    if snapshot_id is None or current is None:
        return False
    for snapshot in ancestors_of(current, table.metadata):
        if snapshot.snapshot_id == snapshot_id:
            return True
        summary = snapshot.summary
        if summary is not None and summary.operation == Operation.APPEND \
                and offsets.SEALED_KEY in summary.additional_properties and not summary.additional_properties.get(
                    "added-data-files"):
            continue   # a commit id sealed (Committer.seal): an empty snapshot
        if summary is None or summary.operation != Operation.REPLACE:
            return False
        extra = summary.additional_properties
        if any(int(extra.get(k, "0")) for k in ("added-data-files", "deleted-data-files", "added-records",
                                                  "deleted-records")):
            return False
    return False


def key_schema_of(table: Table, identifiers: Sequence[str]) -> pa.Schema:
    arrow = schema_to_pyarrow(table.schema())
    return pa.schema([pa.field(name, arrow.field(name).type, nullable=False) for name in identifiers])


def build_index(table: Table, identifiers: Sequence[str]) -> KeyIndex:
    """Blocking. Every live row's key and position in ``table`` as it is (its position deletes applied)."""
    current = table.current_snapshot()
    index = KeyIndex(identifiers, key_schema_of(table, identifiers), current.snapshot_id if current else None,
                     table_uuid=str(table.metadata.table_uuid))
    if current is None:
        return index
    data, deletes = live_files(table, current.snapshot_id)
    deleted = deleted_positions(table.io, deletes)
    for path, (spec_id, partition) in data.items():
        _index_file(table, index, path, spec_id, partition, deleted.get(path, ()))
    if index.native.duplicated:
        log.warning("table %s: %d key(s) have more than one live row (written before the table was keyed, or by "
                    "another writer); the next change of each deletes all of them", table.name(),
                    index.native.duplicated)
    return index


def live_files(table: Table, snapshot_id: int) -> tuple[dict[str, tuple[int, Record]], list[str]]:
    """Blocking. The live data files of a snapshot (path: spec id, partition) and its position-delete
    files, from its manifests. Not a scan plan: pyiceberg pairs each delete file with every data file
    its bounds may cover, evaluating an expression per pair (14.6 s for 680 data files and 600
    delete files); a position delete names its data file, so the pairing is a join on the path
    (:func:`deleted_positions`). A table with equality deletes cannot be indexed by position."""
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None, snapshot_id
    data: dict[str, tuple[int, Record]] = {}
    deletes: list[str] = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            file = entry.data_file
            if file.content == DataFileContent.DATA:
                data[file.file_path] = (manifest.partition_spec_id, file.partition)
            elif file.content == DataFileContent.POSITION_DELETES:
                deletes.append(file.file_path)
            else:
                raise ValueError(f"table {table.name()} has equality delete files ({file.file_path}), written by "
                                 "another engine: frazil's keyed tables delete by position and cannot index it")
    return data, deletes


def deleted_positions(io: FileIO, delete_paths: Iterable[str]) -> dict[str, list[int]]:
    """Blocking. The positions ``delete_paths`` (position-delete files, each read once) delete, by
    data file."""
    deleted: dict[str, list[int]] = {}
    for delete_path in delete_paths:
        groups = read_columns(io, delete_path, ["file_path", "pos"]).group_by("file_path")
        for group in groups.aggregate([("pos", "list")]).to_pylist():
            deleted.setdefault(group["file_path"], []).extend(group["pos_list"])
    return deleted


@dataclass(frozen=True)
class IndexUpdate:
    """What :func:`update_index` did: data files read (added since), left (gone since), and
    positions dropped (of those, and deleted by another writer's position deletes)."""

    read: int
    left: int
    dropped: int


def update_index(table: Table, index: KeyIndex) -> IndexUpdate | None:
    """Blocking. ``index`` (of an earlier snapshot of ``table``) brought to the table's current
    snapshot from what the snapshots since changed: the rows of data files gone since are dropped,
    the keys of data files added since (their deletes applied) are read, and positions another
    writer deleted are dropped; the other files are not read. None, with the index unchanged, when
    its snapshot is not an ancestor of the current one (a rollback, or expired) or a snapshot since
    added equality deletes: then it is built again (:func:`build_index`)."""
    current = table.current_snapshot()
    if current is None or index.snapshot_id is None:
        return None
    since = []
    for snapshot in ancestors_of(current, table.metadata):
        if snapshot.snapshot_id == index.snapshot_id:
            break
        since.append(snapshot)
    else:
        return None
    added: dict[str, tuple[int, Record]] = {}
    gone: set[str] = set()
    deletes: list[str] = []
    for snapshot in reversed(since):   # oldest first: a file added, then rewritten, is gone
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.status == ManifestEntryStatus.EXISTING:
                    continue   # carried over into a manifest this snapshot rewrote
                # ADDED and DELETED entries of a manifest this snapshot wrote are its own, whatever
                # snapshot id the writer stamped on them (older pyiceberg stamps a DELETED entry
                # with the snapshot that added the file)
                content, path = entry.data_file.content, entry.data_file.file_path
                if content == DataFileContent.EQUALITY_DELETES and entry.status == ManifestEntryStatus.ADDED:
                    return None
                if content == DataFileContent.DATA:
                    if entry.status == ManifestEntryStatus.ADDED:
                        added[path] = (manifest.partition_spec_id, entry.data_file.partition)
                    elif entry.status == ManifestEntryStatus.DELETED and path in added:
                        del added[path]
                    elif entry.status == ManifestEntryStatus.DELETED:
                        gone.add(path)
                elif content == DataFileContent.POSITION_DELETES and entry.status == ManifestEntryStatus.ADDED:
                    deletes.append(path)
    # a position delete of a file added since was written since too: the delete files added since
    # are all the added files' deletes, and the positions another writer deleted in files held
    deleted = deleted_positions(table.io, deletes)
    held = {path: positions for path, positions in deleted.items()
            if path in index.files and path not in added and path not in gone}
    dropped = index.native.forget_at(sorted(gone), sorted(held.items())) if gone or held else 0   # one pass
    for path in gone:
        index.files.pop(path, None)
    for path, (spec_id, partition) in added.items():
        _index_file(table, index, path, spec_id, partition, deleted.get(path, ()))
    index.snapshot_id = current.snapshot_id
    return IndexUpdate(len(added), len(gone), dropped)


def _index_file(table: Table, index: KeyIndex, path: str, spec_id: int, partition: Record,
                deleted: Iterable[int]) -> None:
    """Blocking. The live rows of data file ``path`` (``deleted``: its deleted positions) into ``index``."""
    index.files[path] = (spec_id, partition)
    keys = read_columns(table.io, path, index.identifiers)
    gone = set(deleted)
    if gone:
        live = [pos for pos in range(keys.num_rows) if pos not in gone]
        if live:
            index.add(keys.take(pa.array(live, pa.int64())), path, live)
    else:
        index.add(keys, path, range(keys.num_rows))


def read_columns(io: FileIO, path: str, columns: Sequence[str]) -> pa.Table:
    with io.new_input(path).open() as f:
        return pq.read_table(f, columns=list(columns))


@dataclass
class Plan:
    """One commit attempt of a keyed table: the positions to delete per data file, and how the
    index changes once the commit lands."""

    deletes: dict[str, list[int]]
    changed: pa.Table                                   # the key of every change: forgotten, then
    added: list[tuple[str, pa.Table, list[int]]]        # per new file, its winning keys and positions
    replaced: int = 0                                   # committed rows replaced or deleted
    split_keys: int = 0

    @property
    def positions(self) -> int:
        return sum(len(v) for v in self.deletes.values())


def plan(index: KeyIndex, new_rows: Sequence[tuple[str, pa.Table]], new_deletes: Sequence[pa.Table]) -> Plan:
    """``new_rows``: per new data file, its identifier columns, ``_kafka_partition`` and
    ``_kafka_offset`` in row order; ``new_deletes``: the keys of key files, with the same
    metadata. The latest change per key wins by (partition, offset); every committed row of a key
    changed now is deleted, and so is every new row that lost."""
    ids = index.identifiers
    width = len(ids)
    tagged = [(t, n) for n, (_, t) in enumerate(new_rows)] + [(t, -1) for t in new_deletes]
    tagged = [(t, n) for t, n in tagged if t.num_rows]
    deletes: dict[str, list[int]] = {}
    if not tagged:
        return Plan(deletes, pa.table({name: pa.array([], index.schema.field(name).type) for name in ids}), [])
    changes = _changes(tagged, ids)
    last = _last_of_each_key(changes, width)
    won, lost = changes.filter(last), changes.filter(pc.invert(last))
    for n, (path, _) in enumerate(new_rows):   # new rows that lost to a later change of their key
        positions = lost.filter(pc.equal(lost.column("t"), n)).column("i").to_pylist()
        if positions:
            deletes.setdefault(path, []).extend(positions)
    changed = pa.table({name: won.column(f"k{k}") for k, name in enumerate(ids)})
    replaced = 0
    for path, positions in index.positions(changed):
        deletes.setdefault(path, []).extend(positions)
        replaced += len(positions)
    added = []
    for n, (path, _) in enumerate(new_rows):
        mine = won.filter(pc.equal(won.column("t"), n))
        if mine.num_rows:
            added.append((path, pa.table({name: mine.column(f"k{k}") for k, name in enumerate(ids)}),
                          mine.column("i").to_pylist()))
    return Plan(deletes, changed, added, replaced, _split_keys(changes, width) if lost.num_rows else 0)


def write_position_deletes(table: Table, deletes: dict[str, list[int]], files: dict[str, tuple[int, Record]]
                           ) -> list[DataFile]:
    """Blocking. One position-delete file per partition of the data files in ``deletes``
    (``files``: each one's spec id and partition), rows sorted by path then position."""
    groups: dict[tuple[int, Record], list[str]] = {}
    for path in sorted(deletes):
        groups.setdefault(files[path], []).append(path)
    out = []
    for (spec_id, partition), paths in groups.items():
        rows = [(path, pos) for path in paths for pos in sorted(set(deletes[path]))]
        data = pa.table({"file_path": [p for p, _ in rows], "pos": [i for _, i in rows]}, schema=POSITION_DELETE_SCHEMA)
        location = table.location_provider().new_data_location(f"frazil-deletes-{uuid.uuid4()}.parquet")
        with table.io.new_output(location).create(overwrite=True) as f:
            pq.write_table(data, f)
        positions = [i for _, i in rows]
        delete_file = DataFile.from_args(
            content=DataFileContent.POSITION_DELETES, file_path=location, file_format=FileFormat.PARQUET,
            partition=partition, record_count=len(rows), file_size_in_bytes=len(table.io.new_input(location)),
            column_sizes={}, value_counts={PATH_ID: len(rows), POS_ID: len(rows)},
            null_value_counts={PATH_ID: 0, POS_ID: 0}, nan_value_counts={},
            lower_bounds={PATH_ID: paths[0].encode(), POS_ID: struct.pack("<q", min(positions))},
            upper_bounds={PATH_ID: paths[-1].encode(), POS_ID: struct.pack("<q", max(positions))},
            key_metadata=None, split_offsets=None, equality_ids=None, sort_order_id=None)
        delete_file.spec_id = spec_id   # DataFile.from_args leaves it out
        out.append(delete_file)
    return out


def key_file(table: Table, keys: pa.Table) -> DataFile:
    """Blocking. A worker's winning deletes written as a key file beside the data files (never
    committed to the table: the coordinator reads it to plan position deletes)."""
    location = table.location_provider().new_data_location(f"{KEY_FILE_PREFIX}{uuid.uuid4()}.parquet")
    with table.io.new_output(location).create(overwrite=True) as f:
        pq.write_table(keys, f)
    return key_file_ref(table, location, keys.num_rows, len(table.io.new_input(location)))


def key_file_ref(table: Table, path: str, rows: int | None = None, size: int | None = None) -> DataFile:
    """A key file as a ``DataFile`` (so it travels like one), under the table's current spec."""
    if rows is None or size is None:
        with table.io.new_input(path).open() as f:
            rows = pq.ParquetFile(f).metadata.num_rows
        size = len(table.io.new_input(path))
    spec = table.spec()
    ref = DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=Record(*[None] * len(spec.fields)), record_count=rows, file_size_in_bytes=size,
        column_sizes={}, value_counts={}, null_value_counts={}, nan_value_counts={}, lower_bounds={},
        upper_bounds={}, key_metadata=None, split_offsets=None, equality_ids=None, sort_order_id=None)
    ref.spec_id = spec.spec_id
    return ref


@dataclass(frozen=True)
class NewKeys:
    """A keyed table's commit: the keys of its new data files (with their Kafka metadata, in row
    order) and of its key files, read once for all attempts."""

    rows: list[tuple[str, pa.Table]]
    deletes: list[pa.Table]
    files: dict[str, tuple[int, Record]]   # each new data file's spec id and partition

    @staticmethod
    def read(table: Table, files: Sequence[DataFile], keys: Sequence[DataFile], identifiers: Sequence[str]) -> NewKeys:
        columns = [*identifiers, PARTITION, OFFSET]
        return NewKeys([(f.file_path, read_columns(table.io, f.file_path, columns)) for f in files],
                        [read_columns(table.io, f.file_path, columns) for f in keys],
                        {f.file_path: (_spec_id(f, table), f.partition) for f in files})


def _spec_id(data_file: DataFile, table: Table) -> int:
    """A new data file's partition spec; one read back from its footer (recovery) was written for
    the table's current spec, and pyiceberg leaves it unset."""
    try:
        return data_file.spec_id or 0
    except AttributeError:
        return table.spec().spec_id
