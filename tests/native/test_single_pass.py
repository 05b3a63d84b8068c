"""The single-pass decoder (rust/src/buffer/fast.rs) against the arrow-json path: for any batch of
values, plain or not (wrong types, nulls, missing and unknown fields, repeated keys, escapes,
numbers in every JSON spelling, odd whitespace, nested structs and lists), the same rows and the
same bad records with the same reasons. The single pass runs with unknown_fields="reject" (the
default); with "report" it stays off, and the rows and errors are still the same."""

from __future__ import annotations

import json
import random
from typing import Literal

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from frazil import _native

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("small", pa.int8()),
    pa.field("mid", pa.int32()),
    pa.field("name", pa.string()),
    pa.field("lname", pa.large_string()),   # pyiceberg's tables use large strings and lists
    pa.field("score", pa.float64()),
    pa.field("ratio", pa.float32()),
    pa.field("ok", pa.bool_()),
    pa.field("at", pa.timestamp("us", tz="UTC")),
    pa.field("local", pa.timestamp("ms")),
    pa.field("geo", pa.struct([pa.field("lat", pa.float64()), pa.field("city", pa.string())])),
    pa.field("strict", pa.struct([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("ltags", pa.large_list(pa.large_string())),
    pa.field("nums", pa.list_(pa.field("item", pa.int64(), nullable=False))),
    pa.field("deep", pa.struct([pa.field("inner", pa.struct([pa.field("x", pa.float64())])),
                                pa.field("xs", pa.list_(pa.float64()))])),
])

INTS = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-200, 200),
                 st.sampled_from([0, -0, 127, 128, -129, 2**31, -2**31 - 1]))
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
NUMBER_TEXT = st.sampled_from(["1e3", "-0", "0.5E-2", "7.0", "7.9", "1E400", "-1e-400", "123456789012345678901234",
                               "3.141592653589793238", "0", "-12", "1.5e1"])
ODD = st.one_of(st.none(), st.booleans(), INTS, st.floats(allow_nan=False, allow_infinity=False), TEXT,
                st.lists(INTS, max_size=3),
                st.dictionaries(st.sampled_from(["lat", "city", "k", "x"]), INTS, max_size=2))
TIMES = st.sampled_from(["2026-11-01T10:00:00Z", "2026-11-01T10:00:00.123456Z", "2026-11-01T10:00:00+02:00",
                         "2026-11-01T10:00:00", "2026-11-01 10:00:00.5", "2026-11-01T10:00:00.1234567Z", "not a time",
                         "2026-13-01T00:00:00Z"])


def proper(field: str, draw: st.DrawFn) -> object:
    return {
        "id": lambda: draw(INTS), "small": lambda: draw(st.integers(-140, 140)), "mid": lambda: draw(INTS),
        "name": lambda: draw(TEXT), "lname": lambda: draw(TEXT),
        "score": lambda: draw(st.floats(allow_nan=False, allow_infinity=False)),
        "ratio": lambda: draw(st.floats(-1e39, 1e39, allow_nan=False)), "ok": lambda: draw(st.booleans()),
        "at": lambda: draw(TIMES), "local": lambda: draw(TIMES),
        "geo": lambda: {"lat": draw(st.floats(-90, 90)), "city": draw(TEXT)},
        "strict": lambda: draw(st.sampled_from([{"k": 1, "v": "a"}, {"v": "no k"}, {"k": None}, {"k": 2}])),
        "tags": lambda: draw(st.lists(st.one_of(TEXT, st.none()), max_size=4)),
        "ltags": lambda: draw(st.lists(st.one_of(TEXT, st.none()), max_size=4)),
        "nums": lambda: draw(st.lists(st.one_of(INTS, st.none()), max_size=4)),
        "deep": lambda: {"inner": draw(st.one_of(st.none(),
                                                 st.fixed_dictionaries({"x": st.floats(allow_nan=False,
                                                                                       allow_infinity=False)}))),
                         "xs": draw(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=3))},
    }[field]()


def render(value: object, draw: st.DrawFn) -> str:
    """JSON text of ``value`` in one of the spellings producers use."""
    ws = draw(st.sampled_from(["", " ", "\n  ", "\t"]))
    if isinstance(value, dict):
        items = list(value.items())
        if draw(st.booleans()):
            random.Random(draw(st.integers(0, 99))).shuffle(items)
        return "{" + ws + ("," + ws).join(f"{json.dumps(k)}{ws}:{ws}{render(v, draw)}" for k, v in items) + ws + "}"
    if isinstance(value, list):
        return "[" + ws + ("," + ws).join(render(v, draw) for v in value) + ws + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=draw(st.booleans()))
    if isinstance(value, float) and draw(st.integers(0, 4)) == 0:
        return repr(value).replace("e+", "E")
    return json.dumps(value)


@st.composite
def record(draw: st.DrawFn, plain: bool = False) -> bytes:
    row: dict[str, object] = {}
    for field in SCHEMA.names:
        how = draw(st.integers(3, 19) if plain and field in ("id", "strict") else st.integers(0, 19))
        if how == 0:
            continue                      # missing
        if how == 1:
            row[field] = None
        elif how == 2 and not plain:
            row[field] = draw(ODD)        # a value of another type
        elif plain and field in ("at", "local"):
            row[field] = draw(st.sampled_from(["2026-11-01T10:00:00Z", "2026-11-01T10:00:00.123456+02:00"]
                                              if field == "at" else ["2026-11-01T10:00:00", "2026-11-01T10:00:00.5"]))
        elif plain and field in ("ratio", "small", "strict", "nums", "mid"):
            row[field] = {"ratio": 0.5, "small": -3, "strict": {"k": 4, "v": "x"},
                          "nums": draw(st.lists(INTS, max_size=3)), "mid": draw(st.integers(-2**31, 2**31 - 1))}[field]
        else:
            row[field] = proper(field, draw)
    text = render(row, draw)
    tweak = 99 if plain else draw(st.integers(0, 29))
    if tweak == 0:
        text = text[:-1] + ', "unknown": 1}' if len(row) else '{"unknown": 1}'
    elif tweak == 1 and row:
        first = next(iter(row))
        text = text[:-1] + f', {json.dumps(first)}: {render(row[first], draw)}' + "}"   # a repeated key
    elif tweak == 2:
        text = text.replace('"score":', f'"score": {draw(NUMBER_TEXT)}, "_":', 1) if '"score":' in text else text
    elif tweak == 3:
        text = text.replace('"id":', '"id": "12", "_":', 1) if '"id":' in text else text   # a number as text
    elif tweak == 4:
        text = text + draw(st.sampled_from(["", " ", "x", "{}"]))
    elif tweak == 5:
        text = text.replace('"name":', '"name": "a\\ud800b", "_":', 1)   # a lone surrogate
    elif tweak == 6:
        text = text.replace('"mid":', f'"mid": {draw(NUMBER_TEXT)}, "_":', 1)
    return text.encode()


UnknownFields = Literal["reject", "report"]


def decoded(values: list[bytes], *, single_pass: bool, unknown_fields: UnknownFields = "reject",
            took: list[int] | None = None) -> tuple[object, object]:
    buf = _native.JsonBuffer(schema=SCHEMA, unknown_fields=unknown_fields, single_pass=single_pass)
    result = buf.append(topic="t", partition=0, offsets=list(range(len(values))), timestamps_ms=[0] * len(values),
                        keys=[None] * len(values), values=values)
    batch = buf.drain()
    if took is not None:
        took.append(buf.single_pass_rows)
    return ([(e.offset, e.field, e.reason) for e in result.errors],
            None if batch is None else pa.Table.from_batches([batch]))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(record(), min_size=1, max_size=12), unknown_fields=st.sampled_from(["reject", "report"]))
def test_the_single_pass_gives_the_arrow_json_paths_rows_and_errors(values: list[bytes],
                                                                   unknown_fields: UnknownFields) -> None:
    compare(values, unknown_fields)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(record(plain=True), min_size=1, max_size=12))
def test_plain_batches_take_the_single_pass_with_the_same_rows(values: list[bytes]) -> None:
    took: list[int] = []
    compare(values, "reject", took)
    assert took == [len(values)]   # the single pass read the whole batch


def compare(values: list[bytes], unknown_fields: UnknownFields, took: list[int] | None = None) -> None:
    fast_errors, fast_rows = decoded(values, single_pass=True, unknown_fields=unknown_fields, took=took)
    slow_errors, slow_rows = decoded(values, single_pass=False, unknown_fields=unknown_fields)
    assert fast_errors == slow_errors
    if slow_rows is None:
        assert fast_rows is None
    else:
        assert fast_rows is not None and fast_rows.equals(slow_rows), (fast_rows.to_pylist(), slow_rows.to_pylist())


def test_plain_values_take_the_single_pass_and_land_exactly() -> None:
    values = [json.dumps({"id": i, "small": -5, "mid": 70000, "name": f"n\u00e9\"{i}\\", "score": 0.1 + i,
                          "ratio": 1.5, "ok": i % 2 == 0, "at": "2026-11-01T10:00:00.123456Z",
                          "local": "2026-11-01T10:00:00", "geo": {"lat": 1.25, "city": "Z\U0001F600"},
                          "strict": {"k": 1}, "tags": ["a", None, "é"], "nums": [1, 2],
                          "deep": {"inner": None, "xs": [1e-300]}}).encode() for i in range(50)]
    fast = decoded(values, single_pass=True)
    assert fast == decoded(values, single_pass=False)
    rows = fast[1].to_pylist()   # type: ignore[union-attr]
    assert fast[0] == [] and rows[3]["name"] == 'n\u00e9"3\\' and rows[0]["geo"]["city"] == "Z\U0001F600"
    assert rows[7]["score"] == 7.1 and rows[0]["deep"] == {"inner": None, "xs": [1e-300]}
