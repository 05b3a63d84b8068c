"""Parsed table metadata kept by file location, so a commit parses none (installed by ``catalog.load``).

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

Bounded: at most ``MAX_ENTRIES`` files and ``MAX_BYTES`` of their JSON, least recently used out
first. Only installed for the pyiceberg version whose serializers were checked (``CHECKED``);
``tests/integration/test_metadata_cache.py`` fails on another one.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import OrderedDict
from typing import Any

import pyiceberg
from pyiceberg import serializers
from pyiceberg.io import InputFile, OutputFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import UTF8

log = logging.getLogger(__name__)

CHECKED = "0.12.0"
MAX_ENTRIES = 128
MAX_BYTES = 64 * 2**20

_write_original = serializers.ToOutputFile.table_metadata


class _Kept:
    """Locations and their metadata, least recently used first."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[TableMetadata, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, location: str) -> TableMetadata | None:
        with self._lock:
            entry = self._entries.get(location)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(location)
            self.hits += 1
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

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.hits = self.misses = 0

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
        byte_stream=io.BytesIO(raw), encoding=encoding, compression=serializers.Compressor.get_compressor(location=location))
    kept.put(location, metadata, len(raw))
    return metadata


class _Counting:
    """An output stream that counts what goes through it."""

    def __init__(self, stream: Any) -> None:
        self._stream, self.written = stream, 0

    def write(self, data: bytes) -> int:
        self.written += len(data)
        return int(self._stream.write(data))

    def __enter__(self) -> _Counting:
        self._stream.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.__exit__(*exc)


class _CountingOutput:
    def __init__(self, output: OutputFile) -> None:
        self._output: OutputFile = output
        self.stream: _Counting | None = None
        self.location = output.location

    def create(self, overwrite: bool = False) -> _Counting:
        stream = self.stream = _Counting(self._output.create(overwrite=overwrite))
        return stream


def _write(metadata: TableMetadata, output_file: OutputFile, overwrite: bool = False) -> None:
    counting = _CountingOutput(output_file)
    try:
        _write_original(metadata, counting, overwrite)   # type: ignore[arg-type]
    except BaseException:
        kept.drop(output_file.location)   # the file is in doubt: the next read parses what is there
        raise
    # what was written is what a read gives back (tests/integration/test_metadata_cache.py)
    if counting.stream is not None:
        kept.put(output_file.location, metadata, counting.stream.written)


def install() -> bool:
    """Keep parsed metadata by location, on the checked pyiceberg version only. Returns whether it
    is installed; idempotent."""
    if pyiceberg.__version__ != CHECKED:
        log.info("pyiceberg %s is not the version whose metadata serializers were checked (%s): every table load "
                 "parses the metadata file again", pyiceberg.__version__, CHECKED)
        return False
    serializers.FromInputFile.table_metadata = staticmethod(_read)   # type: ignore[method-assign]
    serializers.ToOutputFile.table_metadata = staticmethod(_write)   # type: ignore[method-assign]
    return True


def installed() -> bool:
    return (serializers.FromInputFile.__dict__["table_metadata"].__func__ is _read
            and serializers.ToOutputFile.__dict__["table_metadata"].__func__ is _write)
