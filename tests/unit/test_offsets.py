"""Rule 3 of exactly-once.md as a pure function: every case of the contiguity check."""

import pytest

from frazil.iceberg import offsets
from frazil.iceberg.offsets import Range, Verdict


@pytest.mark.parametrize(
    ("stored", "rng", "verdict"),
    [
        (None, Range(0, 10), Verdict.COMMIT),            # nothing stored yet: first commit
        (None, Range(500, 510), Verdict.COMMIT),         # retention moved the log start
        (10, Range(10, 20), Verdict.COMMIT),             # starts at the stored offset
        (20, Range(10, 20), Verdict.ALREADY_COMMITTED),  # whole range already in
        (25, Range(10, 20), Verdict.ALREADY_COMMITTED),
        (15, Range(10, 20), Verdict.OVERLAP),            # must re-read from 15
        (10, Range(11, 20), Verdict.GAP),                # offset 10 would be skipped
    ],
)
def test_classify(stored: int | None, rng: Range, verdict: Verdict) -> None:
    assert offsets.classify(stored, rng) is verdict


def test_plan_and_advance() -> None:
    stored = {("a", 0): 10, ("a", 1): 5}
    ranges = {("a", 0): Range(10, 12), ("b", 0): Range(0, 3)}
    plan = offsets.plan(stored, ranges)
    assert plan.committable and not plan.all_committed
    assert offsets.advance(stored, ranges) == {("a", 0): 12, ("a", 1): 5, ("b", 0): 3}
    mixed = offsets.plan(stored, {("a", 0): Range(0, 10), ("a", 1): Range(5, 6)})
    assert not mixed.committable and not mixed.all_committed
    assert mixed.where(Verdict.ALREADY_COMMITTED) == [("a", 0)]


def test_property_round_trip_is_keyed_by_pipeline() -> None:
    value = {("clicks", 0): 12, ("clicks", 11): 7, ("orders", 3): 0}
    props = {offsets.property_key("p1"): offsets.encode(value), offsets.property_key("p2"): offsets.encode({})}
    assert offsets.stored_offsets(props, "p1") == value
    assert offsets.stored_offsets(props, "p2") == {}
    assert offsets.stored_offsets(props, "other") == {}
    assert offsets.encode(value) == '{"clicks":{"0":12,"11":7},"orders":{"3":0}}'


def test_range_rejects_empty_or_negative() -> None:
    with pytest.raises(ValueError):
        Range(5, 5)
    with pytest.raises(ValueError):
        Range(-1, 3)


def test_a_rolled_back_table_is_believed_from_its_data_not_its_property() -> None:
    key, mark = offsets.property_key("p"), offsets.progress_key("p")
    enc = offsets.encode
    props = {key: enc({("t", 0): 300, ("t", 1): 90}), mark: enc({("t", 0): 300})}
    newest = {key: props[key], mark: props[mark]}
    older = {key: enc({("t", 0): 100, ("t", 1): 90}), mark: enc({("t", 0): 100})}
    rewrite: dict[str, str] = {}   # a maintenance snapshot carries no offsets
    other = {offsets.property_key("q"): enc({("t", 0): 5})}

    agree = offsets.held(props, [rewrite, newest, older], "p")
    assert agree == offsets.Held({("t", 0): 300, ("t", 1): 90}, {("t", 0): 300})
    # rolled back to the older snapshot: the property (untouched by a rollback) is not believed
    back = offsets.held(props, [other, rewrite, older], "p")
    assert (back.offsets, back.progress) == ({("t", 0): 100, ("t", 1): 90}, {("t", 0): 100})
    said = back.rolled_back
    assert said is not None and 'says {"t":{"0":300}} but' in said and 'holds {"t":{"0":100}}' in said
    assert "\"1\"" not in back.rolled_back   # names only the partitions that differ
    # no summary of the pipeline left (expired): the property is all there is
    assert offsets.held(props, [rewrite, other], "p") == agree
    assert offsets.held({}, [], "p") == offsets.Held({}, {})


def test_topic_ids_are_kept_per_pipeline_and_a_rollback_takes_the_ids_of_the_data() -> None:
    key, ids = offsets.property_key("p"), offsets.topic_ids_key("p")
    props = {key: offsets.encode({("t", 0): 300}), ids: offsets.encode_topic_ids({"t": "B", "u": "U"})}
    assert offsets.stored_topic_ids(props, "p") == {"t": "B", "u": "U"} and offsets.stored_topic_ids(props, "q") == {}
    assert offsets.held(props, [dict(props)], "p").topic_ids == {"t": "B", "u": "U"}
    # rolled back to a snapshot from before the topic was recreated: its offsets and its ids
    older = {key: offsets.encode({("t", 0): 100}), ids: offsets.encode_topic_ids({"t": "A"})}
    assert offsets.held(props, [older], "p").topic_ids == {"t": "A"}
    # a snapshot from before ids were kept: none, so nothing is judged by them
    assert offsets.held(props, [{key: offsets.encode({("t", 0): 100})}], "p").topic_ids == {}


def test_only_a_topic_with_two_known_and_different_ids_counts_as_recreated() -> None:
    stored = {"same": "A", "new": "B", "gone": "C", "unknown": ""}
    current = {"same": "A", "new": "B2", "unknown": "D", "fresh": "E"}
    assert offsets.recreated(stored, current) == {"new": ("B", "B2")}
    assert offsets.recreated({}, current) == {} and offsets.recreated(stored, {}) == {}
