"""What ``frazil offsets`` and ``frazil status`` show, decided without a broker or a catalog: under
each table only the partitions of topics routing may send it, where a restart resumes (the
worker's own ``resume_at``), and the rows a reader sees in a keyed table."""

from __future__ import annotations

from frazil import config
from frazil.iceberg.offsets import Held
from frazil.ingest.routing import Router
from frazil.status import PartitionRow, live_rows, restart, table_partitions

ENDS = {("shop", 0): 100, ("shop", 1): 80, ("web", 0): 50, ("logs", 0): 30}


def routed(dynamic: dict | None = None, *tables: dict) -> Router:
    data: dict = {"pipeline": {"name": "p"}, "kafka": {"bootstrap_servers": "b:1", "topics": ["shop", "web", "logs"]}}
    if tables:
        data["tables"] = [{"columns": [{"name": "id", "type": "long"}], **t} for t in tables]
    if dynamic is not None:
        data["dynamic"] = dynamic
    cfg = config.parse(data)
    return Router(cfg.tables, cfg.dynamic)


ROUTER = routed(None, {"name": "db.shop", "topics": "shop"},
                {"name": "db.refunds", "route_field": "kind", "route": "refund"}, {"name": "db.web", "topics": "web"})


def test_a_table_lists_the_partitions_of_the_topics_it_may_take_and_no_other() -> None:
    rows = table_partitions("db.shop", {("shop", 0): 100, ("shop", 1): 70}, ENDS, ROUTER)
    assert rows == [PartitionRow("shop", 0, 100, 100, "every record"), PartitionRow("shop", 1, 70, 80, "every record")]
    assert [r.lag for r in rows] == [0, 10]
    # a table that never took a record of web lists it all the same, with its whole log as lag
    assert [(r.topic, r.partition, r.table_offset, r.lag) for r in table_partitions("db.web", {}, ENDS, ROUTER)] == [
        ("web", 0, None, 50)]


def test_a_route_field_table_takes_some_records_of_every_topic_and_says_so() -> None:
    rows = table_partitions("db.refunds", {("shop", 0): 97}, ENDS, ROUTER)
    assert {(r.topic, r.partition) for r in rows} == set(ENDS)
    assert {r.takes for r in rows} == {"some records"}
    assert next(r for r in rows if (r.topic, r.partition) == ("shop", 0)).lag == 3   # at most: not all are refunds


def test_offsets_kept_for_a_topic_the_table_no_longer_takes_are_shown_without_a_lag() -> None:
    rows = table_partitions("db.web", {("web", 0): 50, ("old", 0): 12}, ENDS, ROUTER)
    assert [(r.topic, r.takes, r.lag) for r in rows] == [("old", "no record", None), ("web", "every record", 0)]


def test_where_a_restart_resumes_is_the_workers_decision_over_every_table() -> None:
    held = {"db.shop": Held({("shop", 0): 100, ("shop", 1): 70}, {("shop", 0): 90, ("web", 0): 40, ("logs", 0): 30}),
            "db.refunds": Held({("shop", 0): 60}, {("shop", 0): 95, ("shop", 1): 75, ("web", 0): 50}),
            "db.web": Held({("web", 0): 45}, {})}
    found = restart(sorted(ENDS), held, ROUTER)
    # the watermark is the highest any table keeps (a lower one is only stale)
    assert found.watermark == {("shop", 0): 95, ("shop", 1): 75, ("web", 0): 50, ("logs", 0): 30}
    # shop[0]: db.refunds is at 60 but the watermark says all below 95 is landed, and db.shop, which takes
    # every record of shop, holds up to 100: 95. shop[1]: the watermark says 75, but db.shop, which takes
    # every record of shop, holds only up to 70: a table that takes everything is never passed, 70.
    # web[0]: db.web takes every record of web and holds up to 45: 45, below the watermark's 50.
    # logs[0]: no table but db.refunds takes it (by a field); it needs the watermark
    assert found.resume == {("shop", 0): 95, ("shop", 1): 70, ("web", 0): 45, ("logs", 0): 30}


def test_a_topic_no_table_takes_resumes_at_the_watermark_and_a_partition_nobody_knows_is_left_out() -> None:
    router = routed(None, {"name": "db.shop", "topics": "shop"})
    found = restart(sorted(ENDS), {"db.shop": Held({("shop", 0): 100}, {("web", 0): 20})}, router)
    assert found.resume == {("shop", 0): 100, ("web", 0): 20}   # shop[1], logs[0]: auto_offset_reset
    assert table_partitions("db.shop", {("shop", 0): 100}, ENDS, router)[1] == PartitionRow("shop", 1, None, 80,
                                                                                            "every record")


def test_a_dynamic_only_pipeline_lists_each_named_table_under_the_topics_that_may_name_it() -> None:
    by_topic = routed({"table": "raw.{topic}"})
    assert [(r.topic, r.partition) for r in table_partitions("raw.web", {}, ENDS, by_topic)] == [("web", 0)]
    assert table_partitions("raw.web", {}, ENDS, by_topic)[0].takes == "every record"
    by_field = routed({"table": "raw.{kind}", "topics": "shop|web"})
    assert {(r.topic, r.takes) for r in table_partitions("raw.click", {}, ENDS, by_field)} == {
        ("shop", "some records"), ("web", "some records")}
    found = restart(sorted(ENDS), {"raw.click": Held({("shop", 0): 40}, {("shop", 0): 70, ("logs", 0): 30})}, by_field)
    # any table the records name may need what the watermark says; logs is named by no template
    assert found.resume == {("shop", 0): 70, ("logs", 0): 30}


def test_live_rows_subtract_position_deletes_and_equality_deletes_make_it_an_upper_bound() -> None:
    assert live_rows({"total-records": "12440", "total-position-deletes": "4865"}) == (7575, True)
    assert live_rows({"total-records": "20"}) == (20, True)
    equality = {"total-records": "20", "total-position-deletes": "0", "total-equality-deletes": "3"}
    assert live_rows(equality) == (20, False)
    assert live_rows({}) == (None, True)
