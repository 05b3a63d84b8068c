"""The outage clock behind rule 8 (pure)."""

from __future__ import annotations

from frazil.flow.outage import Outage


def test_an_outage_counts_from_its_first_failure_and_ends_with_a_success() -> None:
    o = Outage(timeout_s=60)
    assert not o.failing and o.seconds(5) == 0 and o.ended(5) is None
    assert o.failed(10) == 0 and o.failing
    assert o.failed(40) == 30 and not o.expired(69)
    assert o.expired(70)
    assert o.ended(71) == 61 and not o.failing and not o.expired(500)


def test_an_outage_may_begin_before_the_failure_is_known() -> None:
    o = Outage(timeout_s=10)
    assert o.failed(now=25, began=20) == 5
    assert o.failed(now=26, began=24) == 6   # the first failure's start counts
