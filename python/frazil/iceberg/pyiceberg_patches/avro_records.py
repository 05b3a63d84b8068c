"""Avro records encoded by pyiceberg's own writers, for the caches of records that never change
(``manifest_lists``: a manifest's record in a list; ``data_file_records``: a data file's record in a
manifest). A kept record is keyed by what makes it and by ``writer_key`` of the writer that encoded
it, so the same value under another schema is encoded again.

Retired with ``manifest_lists`` and ``data_file_records``, its only users."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Any

from pyiceberg.avro.encoder import BinaryEncoder
from pyiceberg.avro.writer import Writer

# Every writer a key has named, held for the life of the process so that its id is never reused by
# another object. pyiceberg's writers are singletons by structure already (one per schema, kept
# forever), so this holds a handful; a writer built twice in a race is held here too.
_writers: dict[int, Writer] = {}
_lock = threading.Lock()


def writer_key(writer: Writer) -> int:
    """A key naming ``writer`` (its structure: pyiceberg's writers are singletons) for good."""
    key = id(writer)
    if _writers.get(key) is not writer:
        with _lock:
            _writers.setdefault(key, writer)
    return key


def encode(writer: Writer, value: Any) -> bytes:
    """``value``'s record, as pyiceberg's ``writer`` encodes it."""
    out = io.BytesIO()
    writer.write(BinaryEncoder(out), value)
    return out.getvalue()


class Kept:
    """A record writer that writes ``record(writer, value)``: the bytes pyiceberg's own ``writer``
    encoded, kept by the caller's cache. (Not a pyiceberg ``Writer``: those are singletons, kept
    forever by their arguments.)"""

    def __init__(self, writer: Writer, record: Callable[[Writer, Any], bytes]) -> None:
        self.writer, self._record = writer, record

    def write(self, encoder: BinaryEncoder, value: Any) -> None:
        encoder.write(self._record(self.writer, value))
