"""A Connect Decimal the JSON converter sent as base64 text (``decimal.format=BASE64``) is read as its
number in a top-level decimal column only; anywhere else (a column of another type, a field of a
struct, an element of a list, a value of a map) its record is bad, never its text read as digits.
Sent as a number (``NUMERIC``) it lands as the column reads it."""

from __future__ import annotations

import json

from frazil import _native

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def decimal(name: str) -> dict[str, object]:
    return {"field": name, "type": "bytes", "optional": True, "name": DECIMAL, "parameters": {"scale": "2"}}


SCHEMA = {"type": "struct", "fields": [
    decimal("d"), decimal("n"),
    {"field": "meta", "type": "struct", "optional": True, "fields": [decimal("amount")]},
    {"field": "items", "type": "array", "optional": True, "items": decimal("")},
    {"field": "by", "type": "map", "optional": True, "keys": {"type": "string"}, "values": decimal("")}]}


def split(payload: dict[str, object]) -> tuple[list[bytes | None], list[tuple[int, str, str]]]:
    value = json.dumps({"schema": SCHEMA, "payload": payload}).encode()
    _, rows, bad = _native.split_changes([value], op=[], after=[], before=[], upsert_ops=[], delete_ops=[],
                                         unwrap_envelope=True, units=[], decimals=["d"], keys=[])
    return rows, bad


def test_base64_lands_as_its_number_in_a_top_level_decimal_column() -> None:
    rows, bad = split({"d": "BNI=", "n": 7})
    assert bad == [] and rows[0] is not None and json.loads(rows[0]) == {"d": 12.34, "n": 7}


def test_base64_anywhere_else_is_a_bad_record_naming_where() -> None:
    for payload, field, where in [({"n": "1234"}, "n", "this is"), ({"meta": {"amount": "1234"}}, "meta", "amount is"),
                                  ({"items": [1.5, "AeI="]}, "items", "[1] is"),
                                  ({"by": {"x": 1, "y": "AeI="}}, "by", '["y"] is')]:
        rows, bad = split(payload)
        assert rows == [None] and [(i, f) for i, f, _ in bad] == [(0, field)], payload
        assert f"the schema says {where} a decimal" in bad[0][2] and "decimal.format=NUMERIC" in bad[0][2], bad
        assert ("no decimal column of this name" in bad[0][2]) == (field == "n"), bad


def test_numbers_anywhere_land_as_sent() -> None:
    payload = {"n": 1234, "meta": {"amount": 12.34}, "items": [1.5, None], "by": {"x": 0.01}}
    rows, bad = split(payload)
    assert bad == [] and rows[0] is not None and json.loads(rows[0]) == payload
