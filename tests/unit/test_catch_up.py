"""When a backlog's last rows land (``flow/catch_up.py``): pure decisions, no broker."""

from __future__ import annotations

from frazil.flow.catch_up import CatchUp


def test_caught_up_while_a_cycle_is_written_the_ask_waits_for_that_cycle_to_end() -> None:
    """The partitions reach their ends while a cycle runs (no ask can be made): the ask is still
    due after it, for the rows it did not take, and only once."""
    c = CatchUp(lag=50_000)
    c.polled(behind=1_900_000, taken=100_000, buffered=100_000)
    assert not c.due(100_000)                 # still behind: the record and memory limits pace cycles
    c.polled(behind=0, taken=75_000, buffered=75_000)   # a cycle is being written now
    assert c.due(75_000) and c.due(75_000)    # not asked yet: due at every loop turn until then
    c.asked()
    assert not c.due(75_000)


def test_an_ask_lapses_when_a_cycle_took_every_row() -> None:
    c = CatchUp(lag=50_000)
    c.polled(behind=60_000, taken=1_000, buffered=1_000)
    c.polled(behind=0, taken=60_000, buffered=61_000)
    assert not c.due(0)                       # the running cycle drained them all
    assert not c.due(5)                       # rows arriving later keep to the interval


def test_a_pipeline_that_keeps_up_never_asks() -> None:
    c = CatchUp(lag=50_000)
    for _ in range(100):
        c.polled(behind=0, taken=3_000, buffered=30_000)
        assert not c.due(30_000)
