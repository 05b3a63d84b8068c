"""Manifest lists kept by location, from the write that made them (installed by ``install_all``).

Every append reads its parent snapshot's manifest list (pyiceberg's ``Snapshot.manifests``), and
pyiceberg reads the file again on every call: the Avro header, its schema resolved again, then a
record per manifest. That was about 1 ms of each commit, and it grew with the manifests the tiered
merge leaves (20-30 by 1,000 commits, against 1-10 at a table's first commits; docs/benchmarks.md,
"Commit cost"). The parent's list is nearly always the one this process wrote a commit earlier.

A manifest list is never changed once written: its name carries the snapshot id, the attempt and a
UUID. So the manifests a completed write put in a list are what every later read of it gives, and
they are kept here by location, from the writer once it closed the file without an error. A list
this process did not write (another process's commit, Spark's maintenance) is read from its file
once and kept the same way. A list written for a commit that then lost its compare-and-swap is kept
too, and is never asked for again: no snapshot names it. The kept manifests are shared, as
pyiceberg's own per-manifest cache shares them: nothing in pyiceberg or frazil changes a
``ManifestFile`` once its list is written or read (``prepare_manifest`` assigns a new manifest's
sequence numbers before the write).

Writing a list encoded every manifest in it again with pyiceberg's pure-Python Avro writer, though
all but the commit's new ones are the parent's, unchanged: 0.4 ms more per commit once the tiers hold
20-30 manifests. A format v2 list's records are the manifests' own fields, sequence numbers assigned,
so each manifest's encoded record is kept too (``_record``, by the writer and every field of the
record but the partition summaries, which the manifest's path and length fix) and the writer joins
the kept bytes; only a commit's new manifests are encoded.

Bounded: at most ``MAX_WEIGHT`` manifests over all the kept lists (and one more for each list),
least recently used out first, and as many encoded records. ``tests/integration/test_manifest_lists.py``
compares every kept list with pyiceberg's own read of the file, field by field, and each list file
with pyiceberg's own write, byte for byte; it fails on a release not in ``TESTED``. The statistics of
``_record`` (``info=True``) are read by tests only.

Retired by: a manifest list that ``ManifestListWriter`` hands, once closed, to pyiceberg's own read
path (``pyiceberg.manifest._manifests``, which in 0.12 caches each manifest but reads the list file
on every call); no upstream issue yet. The per-record encoding cache would go upstream with it.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import cachetools
from pyiceberg import manifest as pyiceberg_manifest
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile, ManifestListWriter
from pyiceberg.table import snapshots as pyiceberg_snapshots

from frazil.iceberg.pyiceberg_patches import avro_records

MAX_WEIGHT = 16_384   # manifests of all kept lists, plus one a list

_read_original = pyiceberg_manifest._manifests
_exit_original = ManifestListWriter.__exit__


def new_cache(most: int) -> cachetools.LRUCache[str, tuple[ManifestFile, ...]]:
    """Lists by location, weighed by their manifests plus one: at most ``most`` in all."""
    return cachetools.LRUCache(maxsize=most, getsizeof=lambda manifests: len(manifests) + 1)


_kept = new_cache(MAX_WEIGHT)
_lock = threading.Lock()


def kept(location: str) -> tuple[ManifestFile, ...] | None:
    """The manifests of the list at ``location``, if it is kept."""
    with _lock:
        return _kept.get(location)


def keep(location: str, manifests: tuple[ManifestFile, ...]) -> None:
    with _lock:
        try:
            _kept[location] = manifests
        except ValueError:   # heavier than the whole bound: read from its file each time
            _kept.pop(location, None)


def forget(location: str) -> None:
    """The list at ``location`` was deleted (snapshot expiry)."""
    with _lock:
        _kept.pop(location, None)


def read(io: FileIO, manifest_list: str) -> tuple[ManifestFile, ...]:
    """The manifests ``manifest_list`` names: kept, or read from the file (and kept)."""
    manifests = kept(manifest_list)
    if manifests is None:
        manifests = tuple(_read_original(io, manifest_list))
        keep(manifest_list, manifests)
    return manifests


def _identity(manifest: ManifestFile) -> tuple[Any, ...]:
    """Every field of a v2 manifest-list record but the partition summaries, which the manifest's
    location and length fix (a manifest file is never rewritten)."""
    return (manifest.manifest_path, manifest.manifest_length, manifest.partition_spec_id, manifest.content,
            manifest.sequence_number, manifest.min_sequence_number, manifest.added_snapshot_id,
            manifest.added_files_count, manifest.existing_files_count, manifest.deleted_files_count,
            manifest.added_rows_count, manifest.existing_rows_count, manifest.deleted_rows_count, manifest.key_metadata)


# ``manifest``'s record in a list, as pyiceberg's ``writer`` encodes it
_record = cachetools.cached(cachetools.LRUCache(maxsize=MAX_WEIGHT), lock=threading.Lock(), info=True,
                            key=lambda writer, manifest: (avro_records.writer_key(writer), _identity(manifest)))(
    avro_records.encode)


def _add_manifests(self: ManifestListWriter, manifest_files: list[ManifestFile]) -> ManifestListWriter:
    """pyiceberg's ``add_manifests``, remembering the manifests as written (sequence numbers assigned),
    and a v2 list's records encoded once per manifest."""
    prepared = [self.prepare_manifest(manifest_file) for manifest_file in manifest_files]
    if self._format_version == 2 and not isinstance(self._writer.writer, avro_records.Kept):
        self._writer.writer = avro_records.Kept(self._writer.writer, _record)   # type: ignore[assignment]
    self._writer.write_block(prepared)
    written: list[ManifestFile] = self.__dict__.setdefault("_frazil_written", [])
    written.extend(prepared)
    return self


def _exit(self: ManifestListWriter, exc_type: type[BaseException] | None, exc_value: BaseException | None,
          traceback: TracebackType | None) -> None:
    _exit_original(self, exc_type, exc_value, traceback)   # closes the file; a failure here keeps nothing
    # a v1 list's manifests are written with their sequence numbers unassigned (-1), and read back as
    # 0: a v1 list is kept from its first read instead (a table upgraded to v2 builds on it)
    if exc_type is None and self._format_version >= 2:
        keep(self._output_file.location, tuple(self.__dict__.get("_frazil_written", ())))


def install() -> None:
    """Keep manifest lists by location; idempotent. Called by ``install_all`` only, after its
    version check."""
    pyiceberg_snapshots._manifests = read   # type: ignore[attr-defined]
    ManifestListWriter.add_manifests = _add_manifests   # type: ignore[method-assign]
    ManifestListWriter.__exit__ = _exit   # type: ignore[method-assign]


def installed() -> bool:
    return (getattr(pyiceberg_snapshots, "_manifests", None) is read
            and ManifestListWriter.__dict__["add_manifests"] is _add_manifests
            and ManifestListWriter.__dict__["__exit__"] is _exit)
