"""When ``frazil backfill`` is done with several tables: every partition a table may take resumes
at or past the end it started with (``status.restart``), without a broker or Spark."""

from __future__ import annotations

from test_cli_views import ROUTER, routed

from frazil.backfill import not_landed
from frazil.iceberg.offsets import Held
from frazil.status import restart

ENDS = {("shop", 0): 100, ("web", 0): 50, ("logs", 0): 30}


def test_a_route_field_table_behind_the_end_is_done_once_the_watermark_reached_it() -> None:
    # db.refunds' last refund in shop[0] was at 59: its offset stays at 60, and every record is landed
    held = {"db.shop": Held({("shop", 0): 100}, {}), "db.web": Held({("web", 0): 50}, {}),
            "db.refunds": Held({("shop", 0): 60, ("web", 0): 12, ("logs", 0): 3},
                               {("shop", 0): 100, ("web", 0): 50, ("logs", 0): 30})}
    assert not_landed(ENDS, restart(sorted(ENDS), held, ROUTER).resume, ROUTER) == {}


def test_short_while_the_watermark_is_below_the_end_and_a_table_may_still_need_records() -> None:
    held = {"db.shop": Held({("shop", 0): 100}, {}), "db.web": Held({("web", 0): 50}, {}),
            "db.refunds": Held({("shop", 0): 60}, {("shop", 0): 90, ("web", 0): 50})}
    assert not_landed(ENDS, restart(sorted(ENDS), held, ROUTER).resume, ROUTER) == {("shop", 0): (90, 100),
                                                                                    ("logs", 0): (None, 30)}


def test_tables_that_take_every_record_are_done_when_each_holds_the_end_whatever_the_watermark() -> None:
    router = routed(None, {"name": "db.shop", "topics": "shop"}, {"name": "db.all"})
    held = {"db.shop": Held({("shop", 0): 100}, {("shop", 0): 10}),
            "db.all": Held({("shop", 0): 100, ("web", 0): 50, ("logs", 0): 30}, {})}
    assert not_landed(ENDS, restart(sorted(ENDS), held, router).resume, router) == {}
    held["db.all"] = Held({("shop", 0): 100, ("web", 0): 49, ("logs", 0): 30}, {})
    assert not_landed(ENDS, restart(sorted(ENDS), held, router).resume, router) == {("web", 0): (49, 50)}


def test_a_topic_no_table_takes_has_nothing_to_land() -> None:
    router = routed(None, {"name": "db.shop", "topics": "shop"})
    held = {"db.shop": Held({("shop", 0): 100}, {})}
    assert not_landed(ENDS, restart(sorted(ENDS), held, router).resume, router) == {}
    assert not_landed({("shop", 0): 0}, {}, router) == {}, "an empty partition is done"
