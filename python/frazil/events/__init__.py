"""Control-topic wire format: event payloads and their Avro codec. Pure, no I/O."""

from frazil.errors import EventDecodeError
from frazil.events.codec import decode, encode
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
    OffsetRange,
    StartCommit,
)

__all__ = ["Assignment", "ColumnStat", "CommitComplete", "CommitRequest", "CommitToTable", "DataComplete",
           "DataFileRef", "DataWritten", "DeadLetter", "Event", "EventDecodeError", "OffsetRange", "StartCommit",
           "decode", "encode"]
