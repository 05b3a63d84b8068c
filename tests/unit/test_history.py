"""history.Folded: a value over a table's snapshots, extended only by what a later metadata appends."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from frazil.iceberg.pyiceberg_patches.history import Folded


def snap(n: int, parent: int | None = None) -> Any:
    return SimpleNamespace(manifest_list=f"snap-{n}.avro", snapshot_id=n, parent_snapshot_id=parent)


def metadata(table: str, *ids: int) -> Any:
    return SimpleNamespace(table_uuid=table, snapshots=[snap(n, n - 1) for n in ids])


def ids() -> Folded[tuple[int, ...]]:
    def extend(value: tuple[int, ...], snapshots: Sequence[Any]) -> tuple[int, ...]:
        return value + tuple(s.snapshot_id for s in snapshots)
    return Folded((), extend)


def test_a_metadata_that_appends_is_extended_with_its_new_snapshots_only() -> None:
    folded = ids()
    assert folded.of(metadata("t", 1, 2, 3)) == (1, 2, 3) and folded.folded == 3
    assert folded.of(metadata("t", 1, 2, 3, 4)) == (1, 2, 3, 4) and folded.folded == 4
    assert folded.of(metadata("t", 1, 2, 3, 4)) == (1, 2, 3, 4) and folded.folded == 4


def test_expired_rolled_back_or_stale_histories_are_built_again() -> None:
    folded = ids()
    folded.of(metadata("t", 1, 2, 3, 4))
    assert folded.of(metadata("t", 3, 4, 5)) == (3, 4, 5) and folded.folded == 7      # expiry from the front
    assert folded.of(metadata("t", 3, 4, 6)) == (3, 4, 6) and folded.folded == 10     # another branch of 3, 4
    assert folded.of(metadata("t", 3, 4)) == (3, 4) and folded.folded == 12           # an older load
    assert folded.of(metadata("t", 3, 4, 6)) == (3, 4, 6) and folded.folded == 13


def test_a_snapshot_changed_under_its_manifest_list_is_built_again() -> None:
    """pyiceberg's expiry drops the parent id of a snapshot whose parent it removes."""
    folded = ids()
    folded.of(metadata("t", 1, 2, 3))
    changed = metadata("t", 1, 2, 3)
    changed.snapshots[2] = snap(3, None)
    assert folded.of(changed) == (1, 2, 3) and folded.folded == 6


def test_tables_are_kept_apart_and_bounded() -> None:
    folded: Folded[tuple[int, ...]] = Folded(
        (), lambda value, snapshots: value + tuple(s.snapshot_id for s in snapshots), tables=2)
    assert folded.of(metadata("a", 1, 2)) == (1, 2) and folded.of(metadata("b", 1)) == (1,)
    assert folded.of(metadata("a", 1, 2, 3)) == (1, 2, 3) and folded.folded == 4
    folded.of(metadata("c", 7))   # b is the least recently used: out
    assert folded.of(metadata("b", 1, 5)) == (1, 5) and folded.folded == 7
