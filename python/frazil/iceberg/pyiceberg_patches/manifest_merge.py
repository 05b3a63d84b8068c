"""Manifest merging for frazil's own commits, by tiers.

Every commit adds a manifest. pyiceberg's merge append (like Java's) packs all small data manifests
into one bin and, once ``commit.manifest.min-count-to-merge`` of them have gathered, rewrites them
into one: with a data file or two per commit, every 16th commit rewrites the entry of every data
file in the table (~0.2 ms each in pyiceberg), so a commit's cost grows with the table's file count
until compaction runs (``make bench-maintenance``: 100-250 ms merges after 1,000 commits; 400 MB of
manifests written for 1,000 files).

Here data manifests merge by tier, as a log-structured merge tree merges its runs:

- a manifest's tier is ``floor(log_F(live files))``, F being ``min-count-to-merge`` (frazil's
  tables: 16); the new manifest of a commit is tier 0;
- when F manifests of one tier have gathered, they merge into one (of the next tier); that can
  cascade within one commit;
- a merge never makes a manifest over ``commit.manifest.target-size-bytes``: a due tier's
  manifests are packed in order into bins of at most that size, and one that fits with no
  neighbour (over half the target) is closed; a manifest at the target or over it is never
  rewritten, nor one whose manifest-list entry lacks its file counts (optional in format v1).

So each entry is rewritten once per tier, ``log_F(files)`` times in all rather than once every F
commits, and a snapshot lists at most F - 1 manifests per tier. ``commit.manifest-merge.enabled =
false`` turns merging off, as in pyiceberg. Delete manifests are not merged (pyiceberg's rule;
its merge writer writes data manifests): a keyed table still adds one per commit until
maintenance rewrites its deletes (Java's appends merge them; not done here yet).

A merge takes in mostly tier-0 manifests, one per recent commit; reading each back cost ~1 ms in
pyiceberg (Avro header, schema resolution), most of a merge. The data files of the manifests this
process's appends wrote are kept until merged (``_WRITTEN``) and their entries rebuilt from them
exactly as pyiceberg reads them back (tests/integration/test_manifest_merge.py compares the two);
any other manifest is read from its file.

``plan`` is the pure decision (tests/unit/test_manifest_merge_plan.py); ``TieredAppend`` is
pyiceberg's merge append with that plan, writing each merged manifest with pyiceberg's own merge
writer (``_ManifestMergeManager._create_manifest``: live entries of earlier snapshots become
``EXISTING`` with their sequence numbers kept). It subclasses a private class and reads and
overrides its private members, as ``row_delta.RowDelta`` does, so it holds only on the releases in
``TESTED``; tests/integration/test_manifest_merge.py reads every commit back and compares the entries
rebuilt from ``_WRITTEN`` with pyiceberg's read of the file.

Retired by: a public merge-policy hook on pyiceberg's merge append (the tiered policy is frazil's
choice, not a fix, so it would then subclass a public class), and a written manifest's entries kept
for its first reader; no upstream issue yet for either.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import cachetools
from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _inherit_from_manifest,
)
from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _ManifestMergeManager, _MergeAppendFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Manifest:
    """What the plan knows of one data manifest."""

    files: int | None   # live data files (added + existing); None when the manifest does not record it
    length: int         # bytes


def tier(files: int, fan_in: int) -> int:
    """``floor(log_fan_in(files))``, in integers; 0 for an empty manifest."""
    level, bound = 0, fan_in
    while files >= bound:
        level, bound = level + 1, bound * fan_in
    return level


def plan(manifests: Sequence[Manifest], fan_in: int, target_bytes: int) -> list[list[int]]:
    """Groups of indexes into ``manifests`` covering each index once, ordered by their first index:
    a group of one is kept as it is, a larger group is merged into one manifest."""
    fan_in = max(fan_in, 2)
    groups: list[tuple[list[int], int, int]] = []   # (members, live files, bytes), still open to merging
    done: list[list[int]] = []
    for i, m in enumerate(manifests):
        if m.files is None or m.length >= target_bytes:
            done.append([i])
        else:
            groups.append(([i], m.files, m.length))
    while True:
        by_tier: dict[int, list[int]] = defaultdict(list)
        for g, (_, files, _) in enumerate(groups):
            by_tier[tier(files, fan_in)].append(g)
        due = [t for t, members in by_tier.items() if len(members) >= fan_in]
        if not due:
            break
        chosen = by_tier[min(due)]
        # packed in order into bins of at most target_bytes (the sum of the inputs' sizes bounds
        # the merged one's): 16 manifests near the target (after Spark's rewrite_manifests, a
        # backfill) never make one of 16 times the target
        bins: list[list[int]] = []
        size = 0
        for g in chosen:
            if bins and size + groups[g][2] <= target_bytes:
                bins[-1].append(g)
                size += groups[g][2]
            else:
                bins.append([g])
                size = groups[g][2]
        merging = set(chosen)
        kept = [group for g, group in enumerate(groups) if g not in merging]
        for members in bins:
            merged = (sorted(i for g in members for i in groups[g][0]), sum(groups[g][1] for g in members),
                      sum(groups[g][2] for g in members))
            if len(members) > 1 or merged[2] <= target_bytes // 2:
                kept.append(merged)
            else:
                done.append(merged[0])   # over half the target: it fits with no neighbour, never merged again
        groups = kept
    return sorted(done + [members for members, _, _ in groups], key=lambda members: members[0])


def _describe(manifest: ManifestFile) -> Manifest:
    added, existing = manifest.added_files_count, manifest.existing_files_count
    files = None if added is None or existing is None else added + existing
    return Manifest(files, manifest.manifest_length)


# The data files of the manifests this process's appends wrote and no merge has taken in yet, by
# manifest path (written once, never changed): a tier-0 merge builds its entries from them instead
# of reading F small Avro files back (~1 ms each in pyiceberg, most of a merge's cost). Taken out
# when merged; bounded by data files, so a manifest nobody merges (a refused commit's) ages out.
_WRITTEN: cachetools.LRUCache[str, tuple[int, tuple[DataFile, ...]]] = cachetools.LRUCache(
    maxsize=4096, getsizeof=lambda written: max(1, len(written[1])))
_WRITTEN_LOCK = threading.Lock()


def _entries_written(manifest: ManifestFile) -> list[ManifestEntry] | None:
    """The entries of a manifest this process wrote, as pyiceberg reads them back (status ADDED,
    the writing snapshot's id, sequence numbers and spec inherited from the manifest list); None
    when it is not one of them."""
    with _WRITTEN_LOCK:
        written = _WRITTEN.pop(manifest.manifest_path, None)
    if written is None:
        return None
    snapshot_id, files = written
    return [_inherit_from_manifest(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                                           sequence_number=None, file_sequence_number=None,
                                                           data_file=f), manifest) for f in files]


class TieredAppend(_MergeAppendFiles):
    """pyiceberg's merge append (which reads the ``commit.manifest*`` properties) with its data
    manifests merged by ``plan`` instead. ``operation`` is ``append`` for an append;
    ``mutations.RowDelta`` (``overwrite``) builds on it."""

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str],
                 operation: Operation = Operation.APPEND) -> None:
        super().__init__(operation, transaction, transaction._table.io, snapshot_properties=snapshot_properties)

    remembers_written = True   # RowDelta (keyed tables) writes delete entries too: it reads its manifests back

    def _manifests(self) -> list[ManifestFile]:
        """pyiceberg writes every added data file into one manifest of the table's current spec,
        whatever spec the file was written for: a file written before a partition-spec change
        (in flight, in another process, or kept in a transaction log) and committed after it would
        have its partition values read under the new spec, and scans would prune it wrongly. Files
        of another spec go into a manifest of their own spec here."""
        current = self._transaction.table_metadata.default_spec_id
        elsewhere: dict[int, list[DataFile]] = {}
        for f in self._added_data_files:
            spec_id = getattr(f, "spec_id", None)
            if spec_id is not None and spec_id != current:
                elsewhere.setdefault(spec_id, []).append(f)
        if not elsewhere:
            return super()._manifests()
        saved = self._added_data_files
        moved = {id(f) for files in elsewhere.values() for f in files}
        self._added_data_files = [f for f in saved if id(f) not in moved]
        try:
            manifests = super()._manifests()
        finally:
            self._added_data_files = saved
        for spec_id, files in sorted(elsewhere.items()):
            with self.new_manifest_writer(spec=self.spec(spec_id)) as writer:
                for f in files:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                       sequence_number=None, file_sequence_number=None, data_file=f))
            manifests.append(writer.to_manifest_file())
        return manifests

    def fetch_manifest_entry(self, manifest: ManifestFile, discard_deleted: bool = True) -> list[ManifestEntry]:
        entries = _entries_written(manifest)
        return entries if entries is not None else super().fetch_manifest_entry(manifest, discard_deleted)

    def _remember_added(self, manifests: list[ManifestFile]) -> None:
        """Keep the data files of the manifest this append just wrote (``_write_added_manifest``'s,
        first in the list: ADDED entries of this snapshot only)."""
        files = tuple(self._added_data_files)
        new = manifests[0] if manifests else None
        if (not self.remembers_written or new is None or new.content != ManifestContent.DATA or not files
                or new.added_snapshot_id != self._snapshot_id or new.added_files_count != len(files)
                or new.existing_files_count or new.deleted_files_count):
            return
        with _WRITTEN_LOCK:
            _WRITTEN[new.manifest_path] = (self._snapshot_id, files)

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        if not self._merge_enabled:
            return manifests
        self._remember_added(manifests)
        writer = _ManifestMergeManager(self._target_size_bytes, self._min_count_to_merge, True, self)
        out: list[ManifestFile] = []
        for spec_id, group in writer._group_by_spec([m for m in manifests
                                                     if m.content == ManifestContent.DATA]).items():
            for members in plan([_describe(m) for m in group], self._min_count_to_merge, self._target_size_bytes):
                if len(members) == 1:
                    out.append(group[members[0]])
                    continue
                merged = writer._create_manifest(spec_id, [group[i] for i in members])
                log.debug("snapshot %d: merged %d manifests into %s (%s files)", self._snapshot_id, len(members),
                          merged.manifest_path, merged.existing_files_count)
                out.append(merged)
        return out + [m for m in manifests if m.content != ManifestContent.DATA]
