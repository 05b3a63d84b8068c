"""Where the dead-letter topic stood before a commit, kept with it, and how a letter found there
is told to be one of the commit's (pure; ``coordination/dead_letters.py``)."""

from __future__ import annotations

from frazil.coordination.dead_letters import decode_anchor, encode_anchor, headers_of, identity_of
from frazil.events.payloads import DeadLetter


def test_an_anchor_reads_back_as_written_and_an_empty_one_is_none() -> None:
    text = encode_anchor("dlq", {1: 7, 0: 12})
    assert text == '{"topic":"dlq","from":{"0":12,"1":7}}'
    assert decode_anchor(text) == ("dlq", {0: 12, 1: 7})
    assert decode_anchor("") is None
    assert decode_anchor('{"from": 3}') is None   # hand-edited: no anchor, said in the log


def test_a_letter_is_told_by_the_table_that_counted_it_and_its_source_position() -> None:
    own = DeadLetter("src", 2, 41, "id", "is required")
    routed = DeadLetter("src", 0, 5, "", "names no table", "db.gone")
    headers = headers_of(own, pipeline="p", table="db.t", commit_id="c1", timestamp_ms=None,
                         original=[("origin", b"x")])
    assert identity_of(headers, "p") == ("db.t", ("src", 2, 41))
    # routing found it bad: the table whose commit carried it counts, not the one it was meant for
    assert identity_of(headers_of(routed, pipeline="p", table="db.carrier", commit_id="c1", timestamp_ms=1),
                       "p") == ("db.carrier", ("src", 0, 5))
    assert identity_of(headers, "other") is None   # another pipeline's letter on a shared topic
    assert identity_of([("origin", b"x")], "p") is None   # not a frazil letter
    # a source record that was itself a dead letter (another pipeline's, with a carrier): its
    # frazil.* headers come before frazil's own block and count for nothing
    relayed = headers_of(own, pipeline="p", table="db.t", commit_id="c2", timestamp_ms=None,
                         original=[("frazil.error", b"e"), ("frazil.pipeline", b"p"), ("frazil.carried_by", b"db.x")])
    assert identity_of(relayed, "p") == ("db.t", ("src", 2, 41))
