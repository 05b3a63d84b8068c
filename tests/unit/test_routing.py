"""Static routing: topic regexes, route-field regexes, fan-out, unrouted records."""

import json

import pytest

from frazil import config
from frazil.errors import ConfigError
from frazil.ingest.routing import Group, Router


def tables(*specs: dict) -> tuple[config.TableConfig, ...]:
    return config.parse({"pipeline": {"name": "p"}, "kafka": {"bootstrap_servers": "b:1", "topics": ["t"]},
                         "tables": [{"columns": [{"name": "id", "type": "long"}], **s} for s in specs]}).tables


def values(*records: dict) -> list[bytes]:
    return [json.dumps(r).encode() for r in records]


def test_one_table_without_rules_takes_everything_without_reading_values() -> None:
    router = Router(tables({"name": "ns.all"}))
    assert router.groups("any", [b"not even json"]) == [Group(("ns.all",), None)]


def test_topics_by_full_regex_match() -> None:
    router = Router(tables({"name": "ns.orders", "topics": r"shop\.orders(\..*)?"},
                           {"name": "ns.rest", "topics": "shop.*"}))
    assert router.groups("shop.orders.eu", []) == [Group(("ns.orders", "ns.rest"), None)]
    assert router.groups("shop.payments", []) == [Group(("ns.rest",), None)]
    assert router.groups("xshop.orders", []) == [Group((), None)], "a partial match takes nothing"


def test_route_field_fans_out_and_leaves_unrouted_records_in_their_own_group() -> None:
    router = Router(tables(
        {"name": "ns.clicks", "route_field": "kind", "route": "click|view"},
        {"name": "ns.views", "route_field": "kind", "route": "view"},
        {"name": "ns.big", "route_field": "meta.size", "route": "[0-9]{3,}"},
        {"name": "ns.audit"},
    ))
    got = router.groups("t", values({"kind": "click"}, {"kind": "view", "meta": {"size": 1200}}, {"kind": "other"},
                                    {"kind": "click"}, {"meta": {"size": 5}}, {"kind": None}))
    assert [(g.tables, g.indices) for g in got] == [
        (("ns.audit", "ns.clicks"), [0, 3]),
        (("ns.audit", "ns.clicks", "ns.views", "ns.big"), [1]),
        (("ns.audit",), [2]),
        (("ns.audit",), [4]),
        (("ns.audit",), [5]),
    ]


def test_a_record_no_table_takes_is_a_group_with_no_table() -> None:
    router = Router(tables({"name": "ns.clicks", "topics": "web", "route_field": "kind", "route": "click"}))
    assert router.groups("web", values({"kind": "click"}, {"kind": "clickx"}, {})) == [
        Group(("ns.clicks",), [0]), Group((), [1]), Group((), [2])]
    assert router.groups("other", values({"kind": "click"})) == [Group((), None)]


def test_a_value_that_is_not_one_json_object_is_a_bad_record_for_routing_not_an_unrouted_one() -> None:
    router = Router(tables({"name": "ns.clicks", "route_field": "kind", "route": "click"}, {"name": "ns.all"}))
    got = router.groups("web", [b'{"kind": "click"}', b'{"kind": "cl', b"[1, 2]", b'{"other": 1}', b'{"kind": "x'])
    assert [(g.tables, g.indices) for g in got if g.bad is None] == [(("ns.all", "ns.clicks"), [0]), (("ns.all",), [3])]
    bad = {i: (g.tables, g.bad) for g in got if g.bad is not None for i in g.indices or ()}
    assert sorted(bad) == [1, 2, 4], "to no table, not even ns.all: its decoder would report it once per table"
    assert all(tables == () and field == "" for tables, (field, _) in bad.values())
    assert "not valid JSON" in bad[1][1][1] and bad[1][1][1].endswith("its route field(s) kind cannot be read")
    assert "not an object" in bad[2][1][1]


def test_dynamic_tables_named_by_topic_and_field_and_a_missing_field_is_a_bad_record() -> None:
    data = {"pipeline": {"name": "p"}, "kafka": {"bootstrap_servers": "b:1", "topics": ["t"]},
            "tables": [{"name": "ns.all", "columns": [{"name": "id", "type": "long"}]}]}
    by_topic = config.parse({**data, "dynamic": {"table": "raw.{topic}", "topics": "shop.*"}})
    router = Router(by_topic.tables, by_topic.dynamic)
    assert router.groups("shop.Orders", []) == [Group(("ns.all", "raw.shop_orders"), None)]
    assert router.groups("web", []) == [Group(("ns.all",), None)], "dynamic routing only for its topics"
    by_field = config.parse({**data, "dynamic": {"table": "ev.{topic}_{meta.kind}"}})
    router = Router(by_field.tables, by_field.dynamic)
    got = router.groups("t", values({"meta": {"kind": "Click"}}, {"meta": {"kind": 7}}, {"meta": {}},
                                    {"meta": {"kind": "Click"}}, {"meta": {"kind": ""}}))
    assert [(g.tables, g.indices, g.bad and g.bad[0]) for g in got] == [
        (("ns.all", "ev.t_click"), [0, 3], None), (("ns.all", "ev.t_7"), [1], None),
        (("ns.all",), [2], "meta.kind"), (("ns.all",), [4], "meta.kind")]
    assert got[2].bad is not None and "it names no table" in got[2].bad[1]


def test_parts_of_a_dotted_topic_name_a_table_and_a_topic_without_the_part_is_a_config_error() -> None:
    data = {"pipeline": {"name": "p"}, "kafka": {"bootstrap_servers": "b:1", "topics": ["t"]}}
    debezium = config.parse({**data, "dynamic": {"table": "{topic[1]}.{topic[-1]}"}})   # server.schema.table
    router = Router(debezium.tables, debezium.dynamic)
    assert router.groups("pg.public.Order-Items", []) == [Group(("public.order_items",), None)]
    assert router.takes("pg.public.items", "public.items")
    with pytest.raises(ConfigError, match=r"names no table for topic 'flat': it has no topic\[1\]"):
        router.groups("flat", [])
    mixed = config.parse({**data, "dynamic": {"table": "{topic[0]}.{meta.kind}"}})
    router = Router(mixed.tables, mixed.dynamic)
    got = router.groups("pg.x", values({"meta": {"kind": "A"}}))
    assert [(g.tables, g.bad) for g in got] == [(("pg.a",), None)]
    for template in ("{topic[x]}.t", "ns.{topic[1}", "ns.{meta[0]}"):
        with pytest.raises(ConfigError, match="must be a"):
            config.parse({**data, "dynamic": {"table": template}})


def test_a_restart_takes_only_the_dynamic_tables_holding_its_pipelines_offsets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`{topic[1]}.{topic[2]}` could name any table of the catalog: another pipeline's, or one
    another engine wrote, is left alone."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg import offsets

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    schema = Schema(NestedField(1, "id", LongType()))
    for namespace in ("public", "finance"):
        catalog.create_namespace(namespace)
    for name, owner in (("public.items", "p"), ("public.users", "other"), ("finance.ledger", None)):
        catalog.create_table(name, schema, properties={offsets.property_key(owner): "{}"} if owner else {})
    cfg = config.parse({"pipeline": {"name": "p"}, "kafka": {"bootstrap_servers": "b:1", "topics": ["t"]},
                        "dynamic": {"table": "{topic[1]}.{topic[2]}"}})
    assert cfg.dynamic is not None
    assert iceberg_catalog.dynamic_tables(catalog, cfg.dynamic, "p") == ["public.items"]
