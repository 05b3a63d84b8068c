"""Key index checkpoints on local disk, so that a restart does not read every key of a keyed
table again.

When the coordinator role ends (a clean stop, or leadership lost), each keyed table's key index
is written to ``<txlog_dir>/key-index/<table>.arrows``: an Arrow IPC stream of the key columns,
the data file (an id into the file list in the stream's metadata) and the row position, with the
snapshot it is of, the table's UUID and the identifier columns. At the next start it is read back
when it still describes the table: the same table (UUID), the same identifier columns and key
types, and a snapshot that is an ancestor of the current one; the snapshots since are then
applied from their files alone (``mutations.update_index``). Otherwise it is ignored, said so,
and the index is built from the table as before. A checkpoint is written to a temporary file,
synced and renamed: a crash leaves the old one or the new one, never half of one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from frazil.iceberg import mutations

log = logging.getLogger(__name__)

# the key index's lines are the committer's, as they were when it kept the index itself
said = logging.getLogger("frazil.iceberg.committer")

BATCH_ROWS = 1 << 20
FORMAT = "1"


class IndexStore:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, table_name: str) -> Path:
        return self.directory / f"{table_name}.arrows"

    def save(self, table_name: str, index: mutations.KeyIndex) -> None:
        """Blocking. ``index`` written as the checkpoint of ``table_name`` (atomically)."""
        snapshot_id = index.snapshot_id   # read first: a commit still landing moves it after its entries
        if snapshot_id is None or not index.table_uuid:
            return
        files, batches = index.native.export(BATCH_ROWS)
        schema = pa.schema([*index.schema, pa.field("file", pa.uint32(), nullable=False),
                            pa.field("pos", pa.uint32(), nullable=False)])
        schema = schema.with_metadata({"format": FORMAT, "snapshot_id": str(snapshot_id),
                                       "table_uuid": index.table_uuid, "identifiers": json.dumps(index.identifiers),
                                       "files": json.dumps(files)})
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path(table_name)
        temporary = target.with_suffix(".tmp")
        with open(temporary, "wb") as out:
            with pa.ipc.new_stream(out, schema) as writer:
                for batch in batches:
                    writer.write_batch(batch.cast(schema) if batch.schema != schema else batch)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)

    def load(self, table_name: str, table: Table, identifiers: tuple[str, ...]) -> mutations.KeyIndex | None:
        """Blocking. The checkpoint of ``table_name``, when it still describes ``table`` (as
        loaded) keyed by ``identifiers``; None (and why, logged) when there is none or it does not."""
        path = self.path(table_name)
        if not path.exists():
            return None
        try:
            with pa.memory_map(str(path)) as source, pa.ipc.open_stream(source) as reader:
                meta = {k.decode(): v.decode() for k, v in (reader.schema.metadata or {}).items()}
                why = self._unusable(meta, reader.schema, table, identifiers)
                if why:
                    log.info("table %s: key index checkpoint %s not used: %s; building the index from the table",
                             table_name, path, why)
                    return None
                key_schema = mutations.key_schema_of(table, identifiers)
                snapshot_id = int(meta["snapshot_id"])
                index = mutations.KeyIndex(identifiers, key_schema, snapshot_id, table_uuid=meta["table_uuid"])
                files = json.loads(meta["files"])
                for batch in reader:
                    index.native.load(files, batch)
        except (OSError, pa.ArrowInvalid, ValueError, KeyError) as exc:
            log.warning("table %s: key index checkpoint %s cannot be read (%s); building the index from the table",
                        table_name, path, exc)
            return None
        index.files.update(mutations.live_files(table, snapshot_id)[0])   # manifests only: no data read
        return index

    @staticmethod
    def _unusable(meta: dict[str, str], schema: pa.Schema, table: Table, identifiers: tuple[str, ...]) -> str:
        if meta.get("format") != FORMAT:
            return f"format {meta.get('format')!r}, not {FORMAT}"
        if meta.get("table_uuid") != str(table.metadata.table_uuid):
            return f"it is of table UUID {meta.get('table_uuid')}, and the table is {table.metadata.table_uuid}"
        if tuple(json.loads(meta.get("identifiers", "[]"))) != identifiers:
            return f"it is keyed by {meta.get('identifiers')}, and the table by {list(identifiers)}"
        key_schema = mutations.key_schema_of(table, identifiers)
        if [f.type for f in schema][:len(identifiers)] != [f.type for f in key_schema]:
            return "its key types are not the table's"
        current = table.current_snapshot()
        snapshot = int(meta.get("snapshot_id", "0"))
        if current is None or snapshot not in {s.snapshot_id for s in ancestors_of(current, table.metadata)}:
            return f"its snapshot {snapshot} is not one of the table's current history (a rollback, or expired)"
        return ""


def current_index(indexes: dict[str, mutations.KeyIndex], store: IndexStore | None, name: str, table: Table,
                  identifiers: tuple[str, ...]) -> mutations.KeyIndex:
    """Blocking. Table ``name``'s key index as of ``table``'s current snapshot, kept in
    ``indexes``: the one held, or read from its checkpoint in ``store``; moved by the snapshots
    since (none moved a row; or by their files alone); built from the table when none of that can
    be had. Each step is logged with its cost."""
    index = indexes.get(name)
    current = table.current_snapshot()
    now = current.snapshot_id if current else None
    if index is None and store is not None:
        began = time.monotonic()
        index = store.load(name, table, identifiers)
        if index is not None:
            indexes[name] = index
            said.info("table %s: key index read from its checkpoint at snapshot %s: %d keys, %.0f ms", name,
                     index.snapshot_id, len(index), 1000 * (time.monotonic() - began))
    if index is not None and index.identifiers == identifiers and index.snapshot_id != now:
        if mutations.rows_unmoved_since(table, index.snapshot_id):
            said.info("table %s: snapshots since %s moved no row (delete files rewritten); the key index stands",
                     name, index.snapshot_id)
            index.snapshot_id = now
        else:
            began, was = time.monotonic(), index.snapshot_id
            try:
                update = mutations.update_index(table, index)
            except Exception as exc:  # noqa: BLE001 - part-moved: built from the table below instead
                said.warning("table %s: the key index could not be moved from snapshot %s (%s: %s); building it from "
                            "the table", name, was, type(exc).__name__, exc)
                update, index = None, None
                del indexes[name]
            if update is not None and index is not None:
                said.info("table %s: key index brought from snapshot %s to %s: %d data file(s) read, %d gone, %d "
                         "position(s) dropped; %d keys, %.0f ms", name, was, now, update.read, update.left,
                         update.dropped, len(index), 1000 * (time.monotonic() - began))
    if index is None or index.identifiers != identifiers or index.snapshot_id != now:
        began = time.monotonic()
        index = indexes[name] = mutations.build_index(table, identifiers)
        said.info("table %s: key index built from snapshot %s: %d keys in %d data file(s), %.1f MiB, %.0f ms", name,
                 index.snapshot_id, len(index), len(index.files), index.native.memory_bytes / 2**20,
                 1000 * (time.monotonic() - began))
    return index
