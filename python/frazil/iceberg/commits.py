"""One commit of frazil's in a table, found and made: the transaction (pyiceberg's own retry off),
the per-table lock a commit and the in-process expiry share, a commit id looked up in the
snapshots (rule 5), a sealed commit id, and the operator's refusals. Used by the committer, schema
evolution, expiry, maintenance and the CLI."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.snapshots import Snapshot

from frazil.errors import OffsetOverlapError
from frazil.iceberg import offsets
from frazil.iceberg.offsets import TopicPartition
from frazil.iceberg.pyiceberg_patches import history


def delete_files(table: Table) -> int:
    """The table's live delete files, from its current snapshot's summary."""
    current = table.current_snapshot()
    summary = current.summary.additional_properties if current is not None and current.summary is not None else {}
    return int(summary.get("total-delete-files", "0"))


_table_locks: dict[str, threading.RLock] = {}
_table_locks_lock = threading.Lock()


def table_lock(table_name: str) -> threading.RLock:
    """Held by each commit attempt to ``table_name`` in this process, and by its in-process snapshot
    expiry (``expiry.py``, another thread), so the two never take each other's compare-and-swap.
    Reentrant: a commit made from inside another one on the same thread (a test's stand-in for
    another writer, at a fault point) goes through, as another process's would."""
    with _table_locks_lock:
        return _table_locks.setdefault(table_name, threading.RLock())


def no_inner_retry(table: Table) -> Table:
    """``table`` as pyiceberg's commit sees it, with its own retry off. On a conflict pyiceberg
    would re-apply the append and the offsets on the refreshed table and rebuild the
    requirements, so a range another commit landed meanwhile would land twice. The table's real
    ``commit.retry.*`` properties are left for other writers: Spark's maintenance commits re-validate
    on retry, and need retries to get past frazil's frequent commits."""
    properties = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    return Table(table.name(), table.metadata.model_copy(update={"properties": properties}), table.metadata_location,
                 table.io, table.catalog)


def transaction(table: Table) -> Transaction:
    """A transaction for one of frazil's commits, pyiceberg's own retry off (``no_inner_retry``)."""
    return no_inner_retry(table).transaction()


def refuse_backward_reset(table_name: str, stored: Mapping[TopicPartition, int],
                          targets: Mapping[TopicPartition, int]) -> None:
    """Offsets only move forward: a reset at or below a stored offset would land records twice."""
    back = [f"{t}[{p}] up to {stored[(t, p)]} (asked: {o})" for (t, p), o in sorted(targets.items())
            if (t, p) in stored and o <= stored[(t, p)]]
    if back:
        raise OffsetOverlapError(f"{table_name} holds {', '.join(back)}; a reset there would move it back and land "
                                 "those records twice. Offsets only move forward")


def refuse_passed_skip(table_name: str, stored: Mapping[TopicPartition, int], tp: TopicPartition, offset: int) -> None:
    """A record below the stored offset was landed or passed: skipping it changes nothing."""
    if tp in stored and offset < stored[tp]:
        raise OffsetOverlapError(f"{table_name} already holds {tp[0]}[{tp[1]}] up to {stored[tp]}; the record at "
                                 f"{offset} was landed or passed, skipping it now changes nothing")


def commit_id_of(snapshot: Snapshot) -> str | None:
    """The frazil commit id in ``snapshot``'s summary, if any."""
    return snapshot.summary.additional_properties.get(offsets.COMMIT_ID_KEY) if snapshot.summary is not None else None


def _with_commit_ids(ids: Mapping[str, int], snapshots: Sequence[Snapshot]) -> Mapping[str, int]:
    added = {commit_id: s.snapshot_id for s in snapshots if (commit_id := commit_id_of(s)) is not None}
    return {**ids, **added} if ids else added


# Each attempt looks for its id among every snapshot (reading a summary's properties through
# pydantic cost 0.25 ms a call at 100 snapshots), and the table's next metadata only appends to the
# history: the ids are kept per table and extended with the new snapshots (history.Folded), so each
# snapshot's id is read once, and again only after expiry or a rollback.
_commit_ids: history.Folded[Mapping[str, int]] = history.Folded({}, _with_commit_ids)


def find_commit(table: Table, commit_id: str) -> int | None:
    """The snapshot id that carries ``commit_id`` in its summary, if the table has one (the newest
    such snapshot)."""
    return _commit_ids.of(table.metadata).get(commit_id)


def seal_of(table: Table, snapshot_id: int) -> str | None:
    """Why snapshot ``snapshot_id`` sealed its commit id (``Committer.seal``), or None: it landed data."""
    snapshot = table.snapshot_by_id(snapshot_id)
    summary = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary is not None else {}
    return summary.get(offsets.SEALED_KEY)
