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


def test_a_pass_cut_short_by_a_rebalance_is_followed_by_another_and_failing_commits_are_not(
        tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A pass that read everything, had no commit fail, was reassigned, moved the tables and yet left
    records unlanded (a rebalance after the end check dropped its buffers) is followed by another
    from where the tables stand, up to ``PASSES``. A pass whose commits failed, or that saw no
    rebalance, or that moved nothing (records no table takes) ends the backfill at once, short, with
    where a restart resumes: another pass would end the same."""
    import pytest

    import support
    from frazil import backfill as bf
    from frazil.errors import BackfillIncomplete
    from frazil.metrics import Stats
    from frazil.status import Restart

    cfg = support.load(support.write_config(tmp_path, "127.0.0.1:1", ["t"]))
    ends = {("t", 0): 100}
    held: list[int] = [0]   # what the table holds after each pass, in order
    passes: list[dict] = []  # type: ignore[type-arg]

    async def topics(_: object) -> list[str]:
        return ["t"]

    async def end_offsets(_: object, __: object) -> dict:  # type: ignore[type-arg]
        return ends

    def after() -> Restart:
        return Restart({}, {("t", 0): held[0]})

    def serve_with(outcomes: list[tuple[int, int]], assignments: int = 2):  # type: ignore[no-untyped-def]
        async def serve(_cfg, stop, *, until, from_offsets):  # type: ignore[no-untyped-def]
            passes.append(dict(from_offsets))
            landed, failed = outcomes[len(passes) - 1]
            held[0] = landed
            return Stats(rows_committed=landed, commits=1, failed_commits=failed, assignments=assignments)
        return serve

    monkeypatch.setattr(bf, "source_topics", topics)
    monkeypatch.setattr(bf, "end_offsets", end_offsets)
    monkeypatch.setattr(bf.iceberg_catalog, "load", lambda _: None)
    monkeypatch.setattr(bf, "_restart", lambda *_: after())

    monkeypatch.setattr(bf, "serve", serve_with([(60, 0), (100, 0)]))   # dropped 40 rows, then the rest
    stats = bf.backfill(cfg, batch_rows=1000, memory_mb=64)
    assert passes == [{("t", 0): 0}, {("t", 0): 60}] and stats.commits == 2 and stats.rows_committed == 160

    passes.clear()
    held[0] = 0
    monkeypatch.setattr(bf, "serve", serve_with([(20, 0), (40, 0), (60, 0)]))   # short every time: bounded
    with pytest.raises(BackfillIncomplete, match=r"t/0.*\(60, 100\)"):
        bf.backfill(cfg, batch_rows=1000, memory_mb=64)
    assert len(passes) == bf.PASSES

    for outcomes, assignments in (([(60, 0), (60, 0)], 2),    # the second pass moved nothing: no third
                                  ([(60, 0)], 1)):            # never reassigned: no rebalance to blame
        passes.clear()
        held[0] = 0
        monkeypatch.setattr(bf, "serve", serve_with(outcomes, assignments))
        with pytest.raises(BackfillIncomplete):
            bf.backfill(cfg, batch_rows=1000, memory_mb=64)
        assert len(passes) == len(outcomes)

    passes.clear()
    held[0] = 0
    monkeypatch.setattr(bf, "serve", serve_with([(0, 3)]))   # commits failed: no second pass
    with pytest.raises(BackfillIncomplete):
        bf.backfill(cfg, batch_rows=1000, memory_mb=64)
    assert len(passes) == 1
