"""Parsed table metadata kept by file location, so a commit parses none (installed by ``install_all``).

A catalog that keeps metadata in files (the SQL catalog, Hive, Glue) reads the current metadata
file on every ``load_table``, and the SQL catalog loads the table again inside its own
``commit_table``: two full parses of the metadata JSON per frazil commit. Their cost grows with
the table's history (every snapshot with its summary, the snapshot and metadata logs), and they
were most of what a commit's cost still grew by (docs/benchmarks.md, "Commit cost").

An Iceberg metadata file is never changed once written: every change writes a new file under a
new name and moves the catalog's pointer to it. So the metadata parsed from a location, or
written to it by this process, is that location's metadata for good, and is kept here by
location. The catalog's pointer is still read on every load and the compare-and-swap of a commit
is still the catalog's: only the parse is saved. A location another process wrote is parsed once,
the first time it is read. The metadata models are frozen and never changed in place
(``metadata_copies``), so the kept objects are shared as they are.

Writing is the same story in reverse: each commit serialized every snapshot of the history again.
A snapshot is never changed in place, and pyiceberg replaces one only to drop its parent id (expiry,
when it removes the parent), so each one's JSON is made once and kept by its manifest list and
parent (``metadata_json``), and the table's last snapshots array is extended with only the new ones
(``history``); the file holds the same JSON object as pyiceberg's own write, with the snapshots as
its last key.

Bounded: at most ``MAX_ENTRIES`` files and ``MAX_BYTES`` of their JSON, and ``MAX_SNAPSHOTS``
snapshots' JSON, least recently used out first. ``tests/integration/test_metadata_cache.py`` checks
every kept metadata against pyiceberg's own parse and write, and fails on a release not in ``TESTED``.

Retired by: a metadata-by-location cache in pyiceberg's ``FromInputFile.table_metadata`` (no upstream
issue yet; metadata files are immutable, as the manifests pyiceberg already caches), and a metadata
write that does not serialize unchanged snapshots again (none either).
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Sequence

import cachetools
from pyiceberg import serializers
from pyiceberg.io import InputFile, OutputFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import UTF8
from pyiceberg.utils.config import Config

from frazil.iceberg.pyiceberg_patches import history

MAX_ENTRIES = 128
MAX_BYTES = 64 * 2**20

class _Kept:
    """Locations and their metadata, least recently used first."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[TableMetadata, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, location: str) -> TableMetadata | None:
        with self._lock:
            entry = self._entries.get(location)
            if entry is None:
                return None
            self._entries.move_to_end(location)
            return entry[0]

    def put(self, location: str, metadata: TableMetadata, size: int) -> None:
        self.drop(location)
        with self._lock:
            if size > MAX_BYTES:
                return
            self._entries[location] = (metadata, size)
            self._bytes += size
            while len(self._entries) > MAX_ENTRIES or self._bytes > MAX_BYTES:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def drop(self, location: str) -> None:
        with self._lock:
            old = self._entries.pop(location, None)
            if old is not None:
                self._bytes -= old[1]

    def __len__(self) -> int:
        return len(self._entries)


kept = _Kept()


def _read(input_file: InputFile, encoding: str = UTF8) -> TableMetadata:
    location = input_file.location
    metadata = kept.get(location)
    if metadata is not None:
        return metadata
    with input_file.open() as stream:
        raw = stream.read()
    metadata = serializers.FromByteStream.table_metadata(
        byte_stream=io.BytesIO(raw), encoding=encoding,
        compression=serializers.Compressor.get_compressor(location=location))
    kept.put(location, metadata, len(raw))
    return metadata


# A metadata write serialized every snapshot of the history again, through pyiceberg's summary
# serializer in Python: 0.5 ms a commit at 100 snapshots, against 0.1 ms at 10. A snapshot's JSON is
# made once, kept by its manifest list (which names the table's location, the snapshot id, the
# attempt and a UUID), its parent and exclude_none: the parent is the one field pyiceberg changes in
# a snapshot (expiry drops it when it removes the parent).
MAX_SNAPSHOTS = 16_384


@cachetools.cached(cachetools.LRUCache(maxsize=MAX_SNAPSHOTS), lock=threading.Lock(),
                   key=lambda snapshot, exclude_none: (snapshot.manifest_list, snapshot.parent_snapshot_id,
                                                       exclude_none))
def _snapshot(snapshot: Snapshot, exclude_none: bool) -> str:
    return snapshot.model_dump_json(exclude_none=exclude_none)


def _joined(exclude_none: bool) -> history.Folded[str]:
    def extend(joined: str, snapshots: Sequence[Snapshot]) -> str:
        return ",".join([*([joined] if joined else []), *(_snapshot(s, exclude_none) for s in snapshots)])
    return history.Folded("", extend)


# the snapshots' JSON array of each table's last write, extended with a commit's new snapshot
# (joining 100 kept strings again was 0.08 ms a commit)
_snapshots_json = {exclude_none: _joined(exclude_none) for exclude_none in (False, True)}


def metadata_json(metadata: TableMetadata, exclude_none: bool) -> str:
    """``metadata`` as pyiceberg writes it (``model_dump_json``), each snapshot's JSON made once. Only
    the order of the top-level keys differs: the snapshots come last. Format v2 only (v1 drops the
    snapshots' sequence numbers, v3 is not written by pyiceberg 0.12)."""
    if metadata.format_version != 2 or not metadata.snapshots:
        return metadata.model_dump_json(exclude_none=exclude_none)
    rest = metadata.model_dump_json(exclude_none=exclude_none, exclude={"snapshots"})
    return f'{rest[:-1]},"snapshots":[{_snapshots_json[exclude_none].of(metadata)}]}}'


def _write(metadata: TableMetadata, output_file: OutputFile, overwrite: bool = False) -> None:
    """pyiceberg's ``ToOutputFile.table_metadata``, with the snapshots' JSON kept (``metadata_json``);
    what was written is kept as that location's metadata."""
    # None is written where it must be, to write a missing current-snapshot-id as -1 (as pyiceberg does)
    exclude_none = not Config().get_bool("legacy-current-snapshot-id")
    data = serializers.Compressor.get_compressor(output_file.location).bytes_compressor()(
        metadata_json(metadata, exclude_none).encode(UTF8))
    try:
        with output_file.create(overwrite=overwrite) as stream:
            stream.write(data)
    except BaseException:
        kept.drop(output_file.location)   # the file is in doubt: the next read parses what is there
        raise
    # what was written is what a read gives back (tests/integration/test_metadata_cache.py)
    kept.put(output_file.location, metadata, len(data))


def install() -> None:
    """Keep parsed metadata by location; idempotent. Called by ``install_all`` only, after its
    version check."""
    serializers.FromInputFile.table_metadata = staticmethod(_read)   # type: ignore[method-assign]
    serializers.ToOutputFile.table_metadata = staticmethod(_write)   # type: ignore[method-assign]


def installed() -> bool:
    return (serializers.FromInputFile.__dict__["table_metadata"].__func__ is _read
            and serializers.ToOutputFile.__dict__["table_metadata"].__func__ is _write)
