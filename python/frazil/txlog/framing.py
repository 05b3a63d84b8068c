"""How one journal record sits on disk (pure, no I/O).

    [length: u32 little-endian][crc32 of payload: u32 little-endian][payload: length bytes]

The payload is one JSON object with a ``lsn`` (log sequence number, increasing by one per
record) and a ``type``. A record is valid only if the whole frame is there and its checksum
matches.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

HEADER = struct.Struct("<II")
MAX_RECORD = 64 * 1024 * 1024


def encode(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return HEADER.pack(len(body), zlib.crc32(body)) + body


@dataclass(frozen=True)
class Frame:
    position: int          # byte offset of the frame in its segment
    payload: dict[str, Any]


class TornTail(Exception):
    """The data ends inside a frame: a write that a crash cut short."""


class BadFrame(Exception):
    """A complete frame whose checksum or content is wrong."""


def decode_at(data: bytes, position: int) -> tuple[Frame, int]:
    """The frame at ``position`` and the position after it."""
    if len(data) - position < HEADER.size:
        raise TornTail(f"{len(data) - position} header bytes of {HEADER.size}")
    length, crc = HEADER.unpack_from(data, position)
    if length > MAX_RECORD:
        raise BadFrame(f"length {length} is larger than any record frazil writes")
    start, end = position + HEADER.size, position + HEADER.size + length
    if end > len(data):
        raise TornTail(f"{len(data) - start} payload bytes of {length}")
    body = data[start:end]
    if zlib.crc32(body) != crc:
        raise BadFrame(f"checksum mismatch (stored {crc:#010x}, computed {zlib.crc32(body):#010x})")
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise BadFrame(f"payload is not JSON: {exc}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("lsn"), int) or "type" not in payload:
        raise BadFrame("payload lacks lsn or type")
    return Frame(position, payload), end
