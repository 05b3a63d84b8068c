"""Each data file's record in a manifest, encoded once (installed by ``install_all``).

A tier-0 merge (``manifest_merge``) rewrites the entries of 16 one-file manifests into one, and
pyiceberg encodes every entry again with its pure-Python Avro writer: about 0.13 ms an entry, half
of a merge's 4-5 ms on the clickstream table (docs/benchmarks.md, "Commit cost"), and the one cost
left that the last commits of a long run pay and the first ones do not. Most of an entry is its
data file: path, counts, and five maps of column statistics. The rest (status, snapshot id,
sequence numbers) is what a merge changes.

A data file is never changed once written, and its path names it. So in a format v2 manifest its
record is the same bytes in every manifest that lists it, under the same data-file schema (one
per partition type). Each one is kept, by the path and the writer that encoded it (the schema's
structure), from the first manifest this process writes with it; the entry's other fields are
encoded as pyiceberg does.

Bounded: ``MAX_BYTES`` of records in all, least recently used out first (a record evicted is
encoded again). ``tests/integration/test_data_file_records.py`` compares the files with pyiceberg's
own, byte for byte, and fails on a release not in ``TESTED``. Format v1 and v3 manifests keep
pyiceberg's writer (v3 data files carry a row id inherited at write time). The statistics of
``_record`` (``info=True``) are read by tests only.

Retired by: a cache of encoded records in pyiceberg's Avro writer for values that never change
(a data file under its path), or a native Avro writer (pyiceberg-core) fast enough not to need one;
no upstream issue yet.
"""

from __future__ import annotations

import threading
from typing import Any

import cachetools
from pyiceberg.avro.encoder import BinaryEncoder
from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.avro.writer import StructWriter
from pyiceberg.manifest import DEFAULT_READ_VERSION, MANIFEST_ENTRY_SCHEMAS, ManifestEntry, ManifestWriter

from frazil.iceberg.pyiceberg_patches import avro_records

MAX_BYTES = 16 * 2**20

_new_writer_original = ManifestWriter.new_writer
# where an entry's data file is in the records pyiceberg writes (field id 2 of the entry schema)
_DATA_FILE = [f.field_id for f in MANIFEST_ENTRY_SCHEMAS[DEFAULT_READ_VERSION].fields].index(2)


# ``data_file``'s record, as pyiceberg's ``writer`` encodes it; keyed by the writer (the data-file
# schema's structure) and the data file's path
_record = cachetools.cached(cachetools.LRUCache(maxsize=MAX_BYTES, getsizeof=len), lock=threading.Lock(), info=True,
                            key=lambda writer, data_file: (avro_records.writer_key(writer), data_file.file_path))(
    avro_records.encode)


class _Entries:
    """pyiceberg's ``StructWriter`` for a manifest entry, the data file's record kept."""

    def __init__(self, entry: StructWriter) -> None:
        self.fields: tuple[tuple[int | None, Any], ...] = tuple(
            (pos, avro_records.Kept(writer, _record) if pos == _DATA_FILE else writer)
            for pos, writer in entry.field_writers)

    def write(self, encoder: BinaryEncoder, entry: ManifestEntry) -> None:
        for pos, writer in self.fields:
            writer.write(encoder, entry[pos] if pos is not None else None)


def _new_writer(self: ManifestWriter) -> AvroOutputFile[ManifestEntry]:
    avro = _new_writer_original(self)
    if self.version == 2 and isinstance(avro.writer, StructWriter):
        avro.writer = _Entries(avro.writer)   # type: ignore[assignment]
    return avro


def install() -> None:
    """Keep data files' records; idempotent. Called by ``install_all`` only, after its version check."""
    ManifestWriter.new_writer = _new_writer   # type: ignore[method-assign]


def installed() -> bool:
    return ManifestWriter.__dict__["new_writer"] is _new_writer
