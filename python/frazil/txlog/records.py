"""The journal's records, built in one place (their meaning is in ``state.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from frazil.events.payloads import DeadLetter, letter_runs
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
           dead_letters: Sequence[DeadLetter] = (), topic_ids: Mapping[str, str] | None = None,
           letters_from: str = "") -> Record:
    out: Record = {"type": "intent", "commit_id": commit_id, "table": table, "ranges": encode_ranges(ranges),
                   "files": list(paths)}
    if topic_ids:   # the topic ids the ranges were read from: checked again if the commit is replayed
        out["topic_ids"] = dict(sorted(topic_ids.items()))
    if dead_letters:
        # as runs (payloads.letter_runs): a flood of bad records with one cause is a few bytes each
        out["dead_letters"] = [[r.topic, r.partition, list(r.offsets), r.field, r.reason]
                               + ([] if r.meant_for is None else [r.meant_for]) for r in letter_runs(dead_letters)]
        if letters_from:   # where the dead-letter topic stood before the commit: its letters are past it
            out["letters_from"] = letters_from
    return out


def decode_dead_letters(encoded: Sequence[Sequence[Any]]) -> list[DeadLetter]:
    """Each entry is five fields (bad for the table carrying it) or six (the table routing meant it
    for): topic, partition, then the offsets of a run, or one offset (a log written before runs)."""
    out: list[DeadLetter] = []
    for topic, partition, at, *rest in encoded:
        out.extend(DeadLetter(topic, partition, o, *rest) for o in (at if isinstance(at, list) else (at,)))
    return out


def dead_lettered(commit_id: str, table: str) -> Record:
    return {"type": "dead_lettered", "commit_id": commit_id, "table": table}


def outcome(commit_id: str, table: str, status: str, snapshot_id: int | None = None) -> Record:
    return {"type": "outcome", "commit_id": commit_id, "table": table, "status": status, "snapshot_id": snapshot_id}


def offsets(table: str, stored: Mapping[TopicPartition, int]) -> Record:
    return {"type": "offsets", "table": table, "offsets": {f"{t}/{p}": o for (t, p), o in sorted(stored.items())}}
