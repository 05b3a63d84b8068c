"""Control-topic events as bytes: a two-byte header (magic, schema version) and an Avro body (fastavro).

The version names the writer's schema. A reader resolves any version it knows against its own,
newest schema, so fields a newer writer added are ignored and fields it lacks take their
defaults. A version the reader does not know (a newer frazil) is an error that says to upgrade
the readers first; bytes that are not a frazil event are an error that names what came instead.
"""

from __future__ import annotations

import copy
import functools
import io
import itertools
from typing import Any

from frazil.errors import EventDecodeError
from frazil.events.payloads import (
    Assignment,
    ColumnStat,
    CommitComplete,
    CommitRequest,
    CommitToTable,
    DataComplete,
    DataFileRef,
    DataWritten,
    DeadLetter,
    Event,
    LetterRun,
    OffsetRange,
    Payload,
    StartCommit,
    letter_runs,
    letters_of,
)

MAGIC = 0xF7
VERSION = 8
NAMESPACE = "io.frazil.events.v1"


def _opt(name: str, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None}


_COLUMN = {"type": "record", "name": "ColumnStat", "fields": [
    {"name": "field_id", "type": "int"},
    _opt("value_count", "long"), _opt("null_count", "long"), _opt("nan_count", "long"), _opt("size_bytes", "long"),
    _opt("lower", "bytes"), _opt("upper", "bytes"),
]}
_FILE = {"type": "record", "name": "DataFileRef", "fields": [
    {"name": "path", "type": "string"},
    {"name": "file_format", "type": "string"},
    {"name": "record_count", "type": "long"},
    {"name": "size_bytes", "type": "long"},
    {"name": "spec_id", "type": "int"},
    {"name": "partition", "type": {"type": "array", "items": ["null", "bytes"]}, "default": []},
    {"name": "columns", "type": {"type": "array", "items": _COLUMN}, "default": []},
    {"name": "split_offsets", "type": {"type": "array", "items": "long"}, "default": []},
    _opt("sort_order_id", "int"),
]}
_RANGE = {"type": "record", "name": "OffsetRange", "fields": [
    {"name": "topic", "type": "string"}, {"name": "partition", "type": "int"},
    {"name": "start", "type": "long"}, {"name": "end", "type": "long"}, {"name": "generation", "type": "int"},
]}
_ASSIGNMENT = {"type": "record", "name": "Assignment", "fields": [
    {"name": "topic", "type": "string"}, {"name": "partition", "type": "int"}, {"name": "generation", "type": "int"},
]}
_PAYLOADS: list[dict[str, Any]] = [
    {"type": "record", "name": "StartCommit", "fields": [{"name": "commit_id", "type": "string"}]},
    {"type": "record", "name": "DataWritten", "fields": [
        {"name": "commit_id", "type": "string"}, {"name": "table", "type": "string"},
        {"name": "files", "type": {"type": "array", "items": _FILE}},
        {"name": "ranges", "type": {"type": "array", "items": _RANGE}},
    ]},
    {"type": "record", "name": "DataComplete", "fields": [
        {"name": "commit_id", "type": "string"},
        {"name": "assignments", "type": {"type": "array", "items": _ASSIGNMENT}},
        _opt("last_record_ms", "long"),
    ]},
    {"type": "record", "name": "CommitToTable", "fields": [
        {"name": "commit_id", "type": "string"}, {"name": "table", "type": "string"},
        _opt("snapshot_id", "long"), _opt("valid_through_ms", "long"),
    ]},
    {"type": "record", "name": "CommitComplete", "fields": [
        {"name": "commit_id", "type": "string"}, _opt("valid_through_ms", "long"),
    ]},
    {"type": "record", "name": "CommitRequest", "fields": [{"name": "reason", "type": "string"}]},
]
SCHEMA_V1: dict[str, Any] = {
    "type": "record", "name": "Event", "namespace": NAMESPACE, "fields": [
        {"name": "group", "type": "string"},
        {"name": "sender", "type": "string"},
        {"name": "sent_ms", "type": "long"},
        {"name": "payload", "type": _PAYLOADS},
    ],
}

# Version 2: DataWritten carries the table's UUID (a version-1 reply reads as "": not checked);
# CommitComplete names the tables whose commit failed and is carried to the next cycle.
SCHEMA_V2: dict[str, Any] = copy.deepcopy(SCHEMA_V1)
_V2_RECORDS = {p["name"]: p for p in SCHEMA_V2["fields"][3]["type"]}
_V2_RECORDS["DataWritten"]["fields"].append({"name": "table_uuid", "type": "string", "default": ""})
_V2_RECORDS["CommitComplete"]["fields"].append(
    {"name": "failed_tables", "type": {"type": "array", "items": "string"}, "default": []})

# Version 3: each Assignment of a DataComplete carries the worker's progress (low watermark) on
# that partition (a version-2 reply reads as None: no watermark reported).
SCHEMA_V3: dict[str, Any] = copy.deepcopy(SCHEMA_V2)
_V3_RECORDS = {p["name"]: p for p in SCHEMA_V3["fields"][3]["type"]}
_V3_RECORDS["DataComplete"]["fields"][1]["type"]["items"]["fields"].append(_opt("progress", "long"))

# Version 4: DataWritten carries the bad records of its ranges, for the dead-letter topic (a
# version-3 reply reads as none).
SCHEMA_V4: dict[str, Any] = copy.deepcopy(SCHEMA_V3)
_V4_RECORDS = {p["name"]: p for p in SCHEMA_V4["fields"][3]["type"]}
_V4_RECORDS["DataWritten"]["fields"].append({"name": "dead_letters", "type": {"type": "array", "items": {
    "type": "record", "name": "DeadLetter", "fields": [
        {"name": "topic", "type": "string"}, {"name": "partition", "type": "int"}, {"name": "offset", "type": "long"},
        {"name": "field", "type": "string"}, {"name": "reason", "type": "string"}]}}, "default": []})

# Version 5: a dead letter found bad by routing (carried by another table's range) names the
# table it was meant for ("" for none); a version-4 letter reads as null (bad for its carrier).
SCHEMA_V5: dict[str, Any] = copy.deepcopy(SCHEMA_V4)
_V5_RECORDS = {p["name"]: p for p in SCHEMA_V5["fields"][3]["type"]}
_V5_RECORDS["DataWritten"]["fields"][-1]["type"]["items"]["fields"].append(_opt("meant_for", "string"))

# Version 6: each Assignment also carries the watermark the partition will have once every part of
# the reply has landed (a version-5 reply reads as None: the coordinator keeps the watermark as sent).
SCHEMA_V6: dict[str, Any] = copy.deepcopy(SCHEMA_V5)
_V6_RECORDS = {p["name"]: p for p in SCHEMA_V6["fields"][3]["type"]}
_V6_RECORDS["DataComplete"]["fields"][1]["type"]["items"]["fields"].append(_opt("landed", "long"))

# Version 7: a DataWritten's bad records go as runs (one source partition, one field, reason and
# meant_for, with their offsets: the first, then each one's step from the one before), and its
# ``dead_letters`` stay empty; a flood of bad records with one cause costs a few bytes each.
SCHEMA_V7: dict[str, Any] = copy.deepcopy(SCHEMA_V6)
_V7_RECORDS = {p["name"]: p for p in SCHEMA_V7["fields"][3]["type"]}
_V7_RECORDS["DataWritten"]["fields"].append({"name": "letter_runs", "type": {"type": "array", "items": {
    "type": "record", "name": "LetterRun", "fields": [
        {"name": "topic", "type": "string"}, {"name": "partition", "type": "int"}, {"name": "field", "type": "string"},
        {"name": "reason", "type": "string"}, _opt("meant_for", "string"),
        {"name": "offsets", "type": {"type": "array", "items": "long"}}]}}, "default": []})

# Version 8: each range names the id of the topic it was read from (``kafka/topic_ids.py``; "" when
# the broker gives none): the committer keeps it with the offsets and refuses a recreated topic's.
SCHEMA_V8: dict[str, Any] = copy.deepcopy(SCHEMA_V7)
_V8_RECORDS = {p["name"]: p for p in SCHEMA_V8["fields"][3]["type"]}
next(f for f in _V8_RECORDS["DataWritten"]["fields"] if f["name"] == "ranges")["type"]["items"]["fields"].append(
    {"name": "topic_id", "type": "string", "default": ""})

# Every schema version this build can read, by the version byte. Add a version by adding its
# writer schema here and making it the reader schema; never change a published one.
_SCHEMAS = {1: SCHEMA_V1, 2: SCHEMA_V2, 3: SCHEMA_V3, 4: SCHEMA_V4, 5: SCHEMA_V5, 6: SCHEMA_V6, 7: SCHEMA_V7,
            8: SCHEMA_V8}


@functools.cache
def writer_schemas() -> dict[int, Any]:
    """The versions' schemas parsed by fastavro, on first use: a single-mode pipeline never sends an
    event, and fastavro's import is a tenth of a second of every start."""
    import fastavro

    return {version: fastavro.parse_schema(schema) for version, schema in _SCHEMAS.items()}


_TYPES: dict[str, type] = {cls.__name__: cls for cls in (StartCommit, DataWritten, DataComplete, CommitToTable,
                                                         CommitComplete, CommitRequest)}


def _run_record(run: LetterRun) -> dict[str, Any]:
    steps = [b - a for a, b in itertools.pairwise(run.offsets)]   # small numbers: a byte or two each
    return {**vars(run), "offsets": [run.offsets[0], *steps]}


def _run(record: dict[str, Any]) -> LetterRun:
    return LetterRun(**{**record, "offsets": tuple(itertools.accumulate(record["offsets"]))})


def _payload_record(payload: Payload) -> dict[str, Any]:
    if isinstance(payload, DataWritten):
        body: dict[str, Any] = {
            "commit_id": payload.commit_id, "table": payload.table,
            "files": [{**vars(f), "partition": list(f.partition), "columns": [vars(c) for c in f.columns],
                       "split_offsets": list(f.split_offsets)} for f in payload.files],
            "ranges": [vars(r) for r in payload.ranges], "table_uuid": payload.table_uuid,
            "dead_letters": [], "letter_runs": [_run_record(r) for r in letter_runs(payload.dead_letters)]}
    elif isinstance(payload, DataComplete):
        body = {"commit_id": payload.commit_id, "assignments": [vars(a) for a in payload.assignments],
                "last_record_ms": payload.last_record_ms}
    elif isinstance(payload, CommitComplete):
        body = {"commit_id": payload.commit_id, "valid_through_ms": payload.valid_through_ms,
                "failed_tables": list(payload.failed_tables)}
    else:
        body = dict(vars(payload))
    return {"-type": f"{NAMESPACE}.{type(payload).__name__}", **body}


def encode(event: Event) -> bytes:
    out = io.BytesIO()
    out.write(bytes((MAGIC, VERSION)))
    record = {"group": event.group, "sender": event.sender, "sent_ms": event.sent_ms,
              "payload": _payload_record(event.payload)}
    import fastavro  # see writer_schemas

    fastavro.schemaless_writer(out, writer_schemas()[VERSION], record)
    return out.getvalue()


def _payload(name: str, body: dict[str, Any]) -> Payload:
    kind = _TYPES.get(name.rsplit(".", 1)[-1])
    if kind is None:
        raise EventDecodeError(f"unknown event type {name}")
    if kind is DataWritten:
        files = tuple(DataFileRef(**{**f, "partition": tuple(f["partition"]),
                                     "columns": tuple(ColumnStat(**c) for c in f["columns"]),
                                     "split_offsets": tuple(f["split_offsets"])}) for f in body["files"])
        return DataWritten(body["commit_id"], body["table"], files, tuple(OffsetRange(**r) for r in body["ranges"]),
                           body["table_uuid"], tuple(DeadLetter(**d) for d in body["dead_letters"])
                           + letters_of(_run(r) for r in body["letter_runs"]))
    if kind is DataComplete:
        return DataComplete(body["commit_id"], tuple(Assignment(**a) for a in body["assignments"]),
                            body["last_record_ms"])
    if kind is CommitComplete:
        return CommitComplete(body["commit_id"], body["valid_through_ms"], tuple(body["failed_tables"]))
    return kind(**body)  # type: ignore[no-any-return]


def decode(data: bytes, *, where: str = "") -> Event:
    """``where`` (e.g. ``control[0]@1234``) is named in errors."""
    at = f" at {where}" if where else ""
    if len(data) < 2 or data[0] != MAGIC:
        raise EventDecodeError(f"control-topic record{at} is not a frazil event (starts with {data[:8]!r}); "
                               "is another application writing to the control topic?")
    import fastavro  # see writer_schemas

    schemas = writer_schemas()
    writer = schemas.get(data[1])
    if writer is None:
        raise EventDecodeError(f"control-topic event{at} has schema version {data[1]}, this frazil reads up to "
                               f"{max(schemas)}: upgrade every frazil process before any of them writes "
                               "a newer version")
    try:
        record = fastavro.schemaless_reader(io.BytesIO(data[2:]), writer, schemas[VERSION], return_record_name=True)
    except Exception as exc:  # truncated or corrupt Avro
        raise EventDecodeError(f"control-topic event{at} is corrupt ({type(exc).__name__}: {exc})") from exc
    assert isinstance(record, dict)
    name, body = record["payload"]
    return Event(record["group"], record["sender"], record["sent_ms"], payload=_payload(name, body))
