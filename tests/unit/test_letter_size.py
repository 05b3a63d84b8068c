"""How many bad records a worker holds for the dead-letter topic before it asks for a cycle: as
many as a reply can carry, whatever their reasons (bad_records.LetterSize, too_many)."""

from __future__ import annotations

from frazil.events import DataWritten, DeadLetter, Event, encode
from frazil.ingest.bad_records import MAX_DEAD_LETTERS, MAX_LETTER_BYTES, LetterSize, too_many

SAME = ("user_id", '"n/a" is not a number; the column is a long (64-bit)', None)


def reply_bytes(letters: list[DeadLetter]) -> int:
    return len(encode(Event("p", "w", 1, payload=DataWritten("c", "db.t", (), (), "u", tuple(letters)))))


def test_records_with_one_cause_are_held_up_to_the_count_limit() -> None:
    size = LetterSize()
    size.found("clicks", [SAME] * 10_000)
    assert not too_many(MAX_DEAD_LETTERS - 1, size)
    assert too_many(MAX_DEAD_LETTERS, size)


def test_records_each_with_its_own_reason_ask_for_a_cycle_before_the_reply_outgrows_the_limit() -> None:
    problems = [("ts", f'"{i:08d}-not-a-time" is not an ISO-8601 timestamp', None) for i in range(20_000)]
    size = LetterSize()
    size.found("clicks", problems)
    held = next(n for n in range(0, 20_000, 100) if too_many(n, size))
    letters = [DeadLetter("clicks", 0, i, *p) for i, p in enumerate(problems[:held])]
    assert 1_000 < held < MAX_DEAD_LETTERS
    assert reply_bytes(letters) <= MAX_LETTER_BYTES * 1.1   # the estimate is close to the real reply


def test_the_estimate_follows_a_change_of_cause_at_once() -> None:
    size = LetterSize()
    size.found("clicks", [SAME] * 40_000)
    assert not too_many(20_000, size)
    size.found("clicks", [("f", "x" * 200 + str(i), None) for i in range(50)])
    assert too_many(20_000, size)


def test_nothing_found_yet_costs_nothing() -> None:
    assert LetterSize().of(10) == 0.0
    assert not too_many(0, LetterSize())
