"""An append table's buffer of values in Kafka Connect's JSON envelope (``connect_envelope``): the
payload lands as the row; anything else is a bad record that says what it is."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from frazil.buffers.envelope import NOT_ENVELOPE, EnvelopeBuffer


@dataclass
class Record:
    offset: int
    value: bytes
    timestamp: int = 0
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def test_the_payload_lands_and_what_is_not_an_envelope_is_a_bad_record_saying_what_it_is() -> None:
    buffer = EnvelopeBuffer(pa.schema([("id", pa.int64())]), metadata_columns=False)
    envelope = b'{"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]}, "payload": %s}'
    problems = buffer.append("t", 0, [Record(0, envelope % b'{"id": 5}'), Record(1, b'{"id": 1}'),
                                      Record(2, envelope % b"null"), Record(3, envelope % b"[1]")])
    assert [(p.offset, p.reason) for p in problems] == [
        (1, NOT_ENVELOPE),
        (2, "the envelope's payload is null, not an object of the row's fields; a value in Kafka Connect's JSON "
            "envelope carries its row as an object"),
        (3, "the envelope's payload is list, not an object of the row's fields; a value in Kafka Connect's JSON "
            "envelope carries its row as an object")]
    data = buffer.drain()
    assert data is not None and data.column("id").to_pylist() == [5]
