"""Hysteresis: pause at the high watermark, resume only below the low one."""

import pytest

from frazil.flow.backpressure import Action, Backpressure


def test_pause_and_resume_with_hysteresis() -> None:
    bp = Backpressure(budget_bytes=1000)
    assert [bp.update(b) for b in (100, 799, 800, 900, 600, 501, 500, 700, 799, 850)] == [
        Action.NONE, Action.NONE, Action.PAUSE, Action.NONE, Action.NONE, Action.NONE, Action.RESUME,
        Action.NONE, Action.NONE, Action.PAUSE]
    assert bp.pauses == 2 and bp.paused


def test_watermarks_are_validated() -> None:
    with pytest.raises(ValueError):
        Backpressure(budget_bytes=10, high=0.5, low=0.5)


def test_a_full_buffer_pauses_at_once_and_resumes_below_the_low_mark() -> None:
    bp = Backpressure(budget_bytes=1000)
    assert bp.full() is Action.PAUSE and bp.paused and bp.pauses == 1
    assert bp.full() is Action.NONE and bp.pauses == 1
    assert bp.update(600) is Action.NONE and bp.update(400) is Action.RESUME
