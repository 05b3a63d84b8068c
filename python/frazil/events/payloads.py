"""The control-topic events of the distributed commit cycle, as plain frozen data (no I/O).

One cycle, for one commit id:
- the coordinator sends ``StartCommit``;
- each worker answers, in one Kafka transaction, with one ``DataWritten`` per table it wrote
  (the files and, per source partition, the offset range they cover) and one ``DataComplete``
  (every partition it owns, with its assignment generation, and its last record timestamp);
- the coordinator commits each table once, then sends ``CommitToTable`` per table and
  ``CommitComplete``.

Between cycles a worker may send ``CommitRequest`` to start the next one early.

Partition values and column bounds travel as Iceberg's own single-value binary encoding
(``pyiceberg.conversions``), so this module needs no knowledge of Iceberg types.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ColumnStat:
    """One column's metrics in a data file, keyed by field id."""

    field_id: int
    value_count: int | None = None
    null_count: int | None = None
    nan_count: int | None = None
    size_bytes: int | None = None
    lower: bytes | None = None
    upper: bytes | None = None


@dataclass(frozen=True)
class DataFileRef:
    """A written, not yet committed data file, with what a commit needs to add it."""

    path: str
    file_format: str                  # "PARQUET"
    record_count: int
    size_bytes: int
    spec_id: int
    partition: tuple[bytes | None, ...] = ()    # one value per partition field, Iceberg single-value encoding
    columns: tuple[ColumnStat, ...] = ()
    split_offsets: tuple[int, ...] = ()
    sort_order_id: int | None = None


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[start, end)`` of one source partition, read under assignment ``generation`` from
    the topic whose id is ``topic_id`` ("" when the broker gave none)."""

    topic: str
    partition: int
    start: int
    end: int
    generation: int
    topic_id: str = ""


@dataclass(frozen=True)
class Assignment:
    topic: str
    partition: int
    generation: int
    # the first offset of the partition the worker has not landed in every table that takes it
    # (its low watermark; None: not known yet, or a version-2 reply)
    progress: int | None = None
    # the same once every part of this reply has landed (None: not known, or a version-5 reply)
    landed: int | None = None


@dataclass(frozen=True)
class DeadLetter:
    """A record of a table's range that could not become a row (``on_bad_record = "dead_letter"``):
    it counts as consumed in the commit that stores the range, and the coordinator sends it to the
    dead-letter topic after that commit lands (it reads the record itself again from the source)."""

    topic: str
    partition: int
    offset: int
    field: str      # dotted path of the field at fault; "" when the record as a whole is
    reason: str
    # None: bad for the table whose range carries it. Otherwise routing found it bad and another
    # table carries it (the pipeline's first table): "" when it names no table, else the table it
    # names, which could not be opened.
    meant_for: str | None = None


@dataclass(frozen=True)
class LetterRun:
    """Dead letters in a row of one source partition with the same field, reason and
    ``meant_for``: said once, with their offsets. A flood of bad records usually has one cause, so
    a reply or an intent naming tens of thousands of them stays small."""

    topic: str
    partition: int
    field: str
    reason: str
    meant_for: str | None
    offsets: tuple[int, ...]


def letter_runs(letters: Iterable[DeadLetter]) -> list[LetterRun]:
    """``letters`` as runs, their order kept (pure; :func:`letters_of` is the inverse)."""
    runs: list[LetterRun] = []
    key: tuple[str, int, str, str, str | None] | None = None
    offsets: list[int] = []
    for d in letters:
        k = (d.topic, d.partition, d.field, d.reason, d.meant_for)
        if k != key:
            if key is not None:
                runs.append(LetterRun(*key, tuple(offsets)))
            key, offsets = k, []
        offsets.append(d.offset)
    if key is not None:
        runs.append(LetterRun(*key, tuple(offsets)))
    return runs


def letters_of(runs: Iterable[LetterRun]) -> tuple[DeadLetter, ...]:
    return tuple(DeadLetter(r.topic, r.partition, o, r.field, r.reason, r.meant_for) for r in runs for o in r.offsets)


@dataclass(frozen=True)
class StartCommit:
    commit_id: str


@dataclass(frozen=True)
class DataWritten:
    commit_id: str
    table: str
    files: tuple[DataFileRef, ...]
    ranges: tuple[OffsetRange, ...]
    # the table's UUID when the files were written: the coordinator refuses them for another
    # table of that name (dropped and recreated, or another deployment under the same pipeline
    # name). "" in version-1 events.
    table_uuid: str = ""
    # the bad records of ``ranges`` (version 4; () before)
    dead_letters: tuple[DeadLetter, ...] = ()


@dataclass(frozen=True)
class DataComplete:
    commit_id: str
    assignments: tuple[Assignment, ...]
    last_record_ms: int | None = None    # the newest record timestamp the worker has taken


@dataclass(frozen=True)
class CommitToTable:
    commit_id: str
    table: str
    snapshot_id: int | None              # None: nothing new landed (everything was already there)
    valid_through_ms: int | None = None  # VTTS; None for a partial commit (timeout)


@dataclass(frozen=True)
class CommitComplete:
    commit_id: str
    valid_through_ms: int | None = None
    # tables whose commit failed in a way worth retrying (catalog or storage down): their workers
    # keep the files and report them again in the next cycle (rule 6). () in version-1 events.
    failed_tables: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommitRequest:
    """A worker asks for a cycle now: its buffer reached ``max_buffer_records`` or its memory
    budget (the record-count and bytes triggers). The coordinator starts one unless it is in one."""

    reason: str


Payload = StartCommit | DataWritten | DataComplete | CommitToTable | CommitComplete | CommitRequest


@dataclass(frozen=True)
class Event:
    """What goes on the control topic: who sent it, when, and the payload."""

    group: str                            # the pipeline; events of other pipelines are ignored
    sender: str                           # the member id of the worker or coordinator
    sent_ms: int
    payload: Payload = field(kw_only=True)
