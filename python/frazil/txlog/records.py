"""The journal's records, built in one place (their meaning is in ``state.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from frazil.events.payloads import DeadLetter
from frazil.iceberg.offsets import Range, TopicPartition

Record = dict[str, Any]


def encode_ranges(ranges: Mapping[TopicPartition, Range]) -> dict[str, list[int]]:
    return {f"{t}/{p}": [r.start, r.end] for (t, p), r in sorted(ranges.items())}


def decode_ranges(encoded: Mapping[str, list[int]]) -> dict[TopicPartition, Range]:
    out = {}
    for key, (start, end) in encoded.items():
        topic, _, partition = key.rpartition("/")
        out[(topic, int(partition))] = Range(start, end)
    return out


def files(table: str, paths: Sequence[str], ranges: Mapping[TopicPartition, Range]) -> Record:
    return {"type": "files", "table": table, "files": list(paths), "ranges": encode_ranges(ranges)}


def reply(commit_id: str, table: str, paths: Sequence[str]) -> Record:
    return {"type": "reply", "commit_id": commit_id, "table": table, "files": list(paths)}


def settled(table: str, paths: Sequence[str], status: str) -> Record:
    return {"type": "settled", "table": table, "files": list(paths), "status": status}


def intent(commit_id: str, table: str, paths: Sequence[str], ranges: Mapping[TopicPartition, Range],
           dead_letters: Sequence[DeadLetter] = ()) -> Record:
    out: Record = {"type": "intent", "commit_id": commit_id, "table": table, "ranges": encode_ranges(ranges),
                   "files": list(paths)}
    if dead_letters:
        out["dead_letters"] = [[d.topic, d.partition, d.offset, d.field, d.reason]
                               + ([] if d.meant_for is None else [d.meant_for]) for d in dead_letters]
    return out


def decode_dead_letters(encoded: Sequence[Sequence[Any]]) -> list[DeadLetter]:
    """Five fields (bad for the table carrying it), or six: the table routing meant it for."""
    return [DeadLetter(*d) for d in encoded]


def dead_lettered(commit_id: str, table: str) -> Record:
    return {"type": "dead_lettered", "commit_id": commit_id, "table": table}


def outcome(commit_id: str, table: str, status: str, snapshot_id: int | None = None) -> Record:
    return {"type": "outcome", "commit_id": commit_id, "table": table, "status": status, "snapshot_id": snapshot_id}


def offsets(table: str, stored: Mapping[TopicPartition, int]) -> Record:
    return {"type": "offsets", "table": table, "offsets": {f"{t}/{p}": o for (t, p), o in sorted(stored.items())}}
