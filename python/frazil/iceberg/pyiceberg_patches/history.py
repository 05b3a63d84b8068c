"""Values folded over a table's snapshots, carried from one metadata to the next.

A commit looks at the whole history twice: its commit id is looked for among every snapshot's
summary (``committer.find_commit``), and the metadata file written holds every snapshot's JSON
(``metadata_cache``). Each snapshot's part is made once and kept, but walking 100 kept parts is
still 0.1 ms each time (1 ms at 1,000 snapshots, with maintenance off), and a table's next metadata
differs from its last only by the snapshots appended (and those expiry removed from the front).

``Folded`` keeps, per table, the value built over the snapshots of the last metadata it saw, and
extends it with only the snapshots a later metadata appends. Anything else (snapshots expired or rolled
back, a commit that lost its compare-and-swap) folds the whole history again. Pure: no I/O, the
fold functions never change a value in place.

Not a change to pyiceberg: it is here as ``metadata_cache``'s fold (the committer's commit-id lookup
uses it too), and goes back beside the committer when ``metadata_cache`` is retired. ``folded`` is
read by tests only (tests/unit/test_history.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import cachetools
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

V = TypeVar("V")

TABLES = 64   # tables whose last fold is kept, least recently used out first


class Folded(Generic[V]):
    """A value of a table's snapshots: ``extend(value, snapshots)`` gives the value with
    ``snapshots`` (oldest first) appended, starting from ``empty``."""

    def __init__(self, empty: V, extend: Callable[[V, Sequence[Snapshot]], V], tables: int = TABLES) -> None:
        self._empty, self._extend = empty, extend
        self._last: cachetools.LRUCache[str, tuple[tuple[Snapshot, ...], V]] = cachetools.LRUCache(maxsize=tables)
        self._lock = threading.Lock()
        self.folded = 0   # snapshots extended with, for tests

    def of(self, metadata: TableMetadata) -> V:
        snapshots = metadata.snapshots
        # the snapshots themselves: a snapshot can change under its id and manifest list (expiry
        # drops the parent id of a snapshot whose parent it removes); the same objects compare at once
        keys = tuple(snapshots)
        table = str(metadata.table_uuid)
        with self._lock:
            last = self._last.get(table)
        start, value = 0, self._empty
        if last is not None and keys[:len(last[0])] == last[0]:
            start, value = len(last[0]), last[1]
        if start < len(snapshots):
            value = self._extend(value, snapshots[start:])
        with self._lock:
            self.folded += len(snapshots) - start
            self._last[table] = (keys, value)
        return value
