"""A value format per topic (``[values.topics]``): which format each topic and each table has,
what ``config check`` refuses (a table that may take two formats, each format's own rules), and
the hold at run time: a table reads the format of the first topic it takes, and a topic of
another format reaching it later is a configuration error, not records read the wrong way."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import support
from frazil import config
from frazil.buffers.positions import Takers
from frazil.buffers.record_buffer import AvroRecordBuffer, RecordBuffer
from frazil.buffers.targets import Targets
from frazil.errors import ConfigError
from frazil.iceberg import catalog as iceberg_catalog
from frazil.ingest.protobuf import ProtoValues
from frazil.ingest.registry import WriterSchemas
from frazil_dev import protowire as pw

BASE: dict[str, Any] = {
    "pipeline": {"name": "p"},
    "kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["orders", "clicks.web", "clicks.app", "logs"]},
    "schema_registry": {"url": "http://127.0.0.1:9"},
    "values": {"format": "json", "topics": {"orders": "avro-confluent", r"clicks\..*": "protobuf-confluent"}},
    "tables": [{"name": "shop.orders", "topics": "orders"}, {"name": "web.clicks", "topics": r"clicks\..*"},
               {"name": "ops.logs", "topics": "logs"}],
}


def parse(**changed: Any) -> config.Config:
    data = copy.deepcopy(BASE)
    for key, value in changed.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return config.parse(data)


def test_each_topic_has_the_format_of_the_first_entry_it_fully_matches_else_values_format() -> None:
    values = parse().values
    assert [values.format_of(t) for t in ["orders", "clicks.web", "clicks", "orders2", "logs"]] == [
        "avro-confluent", "protobuf-confluent", "json", "json", "json"]
    first = parse(values={"topics": {"clicks\\.web": "json-schema-confluent", "clicks\\..*": "protobuf-confluent"}},
                  tables=[{"name": "ops.logs", "topics": "logs"}])
    assert first.values.format_of("clicks.web") == "json-schema-confluent"   # file order decides
    assert first.values.format_of("clicks.app") == "protobuf-confluent"


def test_each_table_reads_the_format_of_the_listed_topics_it_takes() -> None:
    cfg = parse()
    assert [cfg.formats_of(t) for t in cfg.tables] == [("avro-confluent",), ("protobuf-confluent",), ("json",)]


def test_with_a_topic_pattern_a_table_whose_regex_is_an_entry_reads_that_entry_s_format() -> None:
    cfg = parse(kafka={"bootstrap_servers": "127.0.0.1:9", "topic_pattern": ".*"})
    assert [cfg.formats_of(t) for t in cfg.tables] == [("avro-confluent",), ("protobuf-confluent",), ("json",)]


def test_a_table_that_may_take_two_formats_is_refused_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"tables\[0\] \(shop\.all\) may take topics of several value formats "
                                          r"\(avro-confluent, protobuf-confluent, json"):
        parse(tables=[{"name": "shop.all"}])
    with pytest.raises(ConfigError, match=r"\(shop\.some\) may take topics of several value formats \(json, "
                                          r"protobuf-confluent"):   # a regex that is no entry, with a pattern
        parse(kafka={"bootstrap_servers": "127.0.0.1:9", "topic_pattern": ".*"},
              tables=[{"name": "shop.some", "topics": "clicks.*"}])


def test_dynamic_tables_of_several_formats_must_each_be_named_by_one_whole_topic() -> None:
    dynamic = parse(tables=None, dynamic={"table": "raw.{topic}"})
    assert dynamic.formats_of(dynamic.dynamic) == ("avro-confluent", "protobuf-confluent", "json")
    with pytest.raises(ConfigError, match=r"must name each table by its whole topic \(\{topic\}\)"):
        parse(tables=None, dynamic={"table": "raw.{topic[0]}"})


def test_each_table_is_held_to_the_rules_of_its_own_format() -> None:
    keyed_json = {"name": "ops.logs", "topics": "logs", "mode": "upsert", "identifier_columns": ["id"],
                  "columns": [{"name": "id", "type": "long", "required": True}]}
    parse(tables=[keyed_json])   # a keyed table of a JSON topic, beside Protobuf topics
    with pytest.raises(ConfigError, match=r"table web\.clicks: keyed tables \(mode = 'upsert'\) read plain JSON or "
                                          r"Avro for now; with values.format = 'protobuf-confluent'"):
        parse(tables=[{**keyed_json, "name": "web.clicks", "topics": r"clicks\..*"}])
    with pytest.raises(ConfigError, match=r"table shop\.orders: route_field reads JSON values; with values.format = "
                                          r"'avro-confluent'"):
        parse(tables=[{"name": "shop.orders", "topics": "orders", "route_field": "kind", "route": "a"}])


def test_a_format_in_values_topics_needs_what_that_format_needs() -> None:
    with pytest.raises(ConfigError, match=r"values.topics.orders 'proto' must be \"json\", \"avro\""):
        parse(values={"topics": {"orders": "proto"}})
    with pytest.raises(ConfigError, match=r"values.format = \"avro\" needs values.schema_file"):
        parse(values={"topics": {"orders": "avro"}})
    with pytest.raises(ConfigError, match=r"values.format = \"avro-confluent\" needs a \[schema_registry\]"):
        parse(schema_registry=None)
    with pytest.raises(ConfigError, match=r"not a valid regular expression"):
        parse(values={"topics": {"orders[": "avro-confluent"}})


class _Formats:
    avro_key = None

    def __init__(self, values: config.ValuesConfig) -> None:
        self._values = values

    def of(self, topic: str) -> str:
        return self._values.format_of(topic)

    def protobuf(self, fmt: str) -> None:
        return None


def test_a_table_reads_its_first_topic_s_format_and_refuses_a_topic_of_another(tmp_path: Path) -> None:
    path = support.write_config(tmp_path, "127.0.0.1:1", ["orders"], extra="")
    base = support.load(path)
    # a [dynamic] table from an earlier run: its format cannot be known before its records
    cfg = _without_tables(base, BASE)
    catalog = iceberg_catalog.load(cfg.catalog)
    try:
        dynamic = cfg.dynamic
        assert dynamic is not None
        table_cfg = dynamic.table_config("db.orders")
        table = iceberg_catalog.ensure_table(catalog, table_cfg, {})
        targets = Targets(cfg, catalog, {"db.orders": table}, takers=lambda topic: Takers(()),
                          formats=_Formats(cfg.values))
        target = targets["db.orders"]
        assert target.format == "json" and type(target.buffer) is RecordBuffer   # a first guess
        targets.fit_format(target, "orders")   # its first records: Avro, so an Avro buffer takes over (empty)
        assert target.format == "avro-confluent" and isinstance(target.buffer, AvroRecordBuffer)
        targets.fit_format(target, "orders")
        with pytest.raises(ConfigError, match=r"table db.orders takes topics of two value formats: orders "
                                              r"\(avro-confluent\) and logs \(json\)"):
            targets.fit_format(target, "logs")
        assert target.format == "avro-confluent" and isinstance(target.buffer, AvroRecordBuffer)
    finally:
        support.close_catalog(catalog)


def _without_tables(base: config.Config, data: dict[str, Any]) -> config.Config:
    raw = copy.deepcopy(data)
    raw.pop("tables")
    raw["catalog"] = {"properties": dict(base.catalog.properties)}
    raw["kafka"] = {"bootstrap_servers": "127.0.0.1:9", "topic_pattern": ".*"}
    raw["dynamic"] = {"table": "db.{topic}", "columns": [{"name": "id", "type": "long"}]}
    return config.parse(raw)


def test_bare_protobuf_messages_need_a_proto_file_that_compiles_and_names_the_message(tmp_path: Path) -> None:
    proto = tmp_path / "o.proto"
    proto.write_text('syntax = "proto3"; package shop; message Order { int64 id = 1; message Line { int32 n = 1; } }')
    plain = {"format": "protobuf", "schema_file": str(proto)}
    minimal = {"pipeline": {"name": "p"}, "kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
               "table": {"name": "db.t"}}
    assert config.parse({**minimal, "values": plain}).values.message == ""   # the file's first
    config.parse({**minimal, "values": {**plain, "message": "shop.Order.Line"}})
    with pytest.raises(ConfigError, match=r"has no message \"Orders\"; it has shop.Order, shop.Order.Line"):
        config.parse({**minimal, "values": {**plain, "message": "Orders"}})
    proto.write_text('syntax = "proto3"; message Order { int64 id = 1 }')
    with pytest.raises(ConfigError, match=r"values.schema_file .*o.proto: the schema does not compile"):
        config.parse({**minimal, "values": plain})
    with pytest.raises(ConfigError, match=r"values.format = \"protobuf\" needs values.schema_file"):
        config.parse({**minimal, "values": {"format": "protobuf"}})
    with pytest.raises(ConfigError, match=r"values.message is for values.format = \"protobuf\""):
        config.parse({**minimal, "values": {"message": "shop.Order"}})
    with pytest.raises(ConfigError, match=r"\"avro\" and \"protobuf\" each read values.schema_file"):
        config.parse({**minimal, "values": {**plain, "topics": {"x": "avro"}}})


def test_bare_protobuf_messages_read_a_descriptor_set_by_any_other_file_name(tmp_path: Path) -> None:
    desc = tmp_path / "o.desc"
    desc.write_bytes(pw.descriptor_set("o.proto", "shop", {"Order": [("id", 1, "int64")],
                                                           "Line": [("n", 1, "int64"), ("sku", 2, "string")]}))
    minimal = {"pipeline": {"name": "p"}, "kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
               "table": {"name": "db.t"}}
    plain = {"format": "protobuf", "schema_file": str(desc)}
    config.parse({**minimal, "values": {**plain, "message": "Line"}})
    values = ProtoValues(WriterSchemas(config.parse({**minimal, "values": {**plain, "message": "Line"}}).values),
                         plain="Line")
    assert values.made == f"made from the message shop.Line of {desc}"
    assert values.native.columns(0, [1]) == [("n", "long"), ("sku", "string")]
    with pytest.raises(ConfigError, match=r"no message \"Orders\"; it has shop.Order, shop.Line"):
        config.parse({**minimal, "values": {**plain, "message": "Orders"}})
    desc.write_text('syntax = "proto3"; message Order { int64 id = 1; }')   # source, under another name
    with pytest.raises(ConfigError, match=r"o.desc: cannot be read as a Protobuf descriptor set .* ending in .proto"):
        config.parse({**minimal, "values": plain})


def test_with_a_topic_pattern_entries_count_in_file_order_and_a_dot_matches_any_character() -> None:
    pattern = {"bootstrap_servers": "127.0.0.1:9", "topic_pattern": ".*"}
    ordered = {"topics": {"orders-eu": "avro-confluent", "orders-.*": "protobuf-confluent"}}
    cfg = parse(kafka=pattern, values=ordered, tables=[{"name": "shop.eu", "topics": "orders-eu"}])
    assert cfg.formats_of(cfg.table) == ("avro-confluent",)   # one topic: its format
    with pytest.raises(ConfigError, match=r"several value formats \(avro-confluent, protobuf-confluent"):
        parse(kafka=pattern, values=ordered, tables=[{"name": "shop.all", "topics": "orders-.*"}])   # eu is first
    dotted = {"topics": {"orders.v1": "avro-confluent"}}
    for table, formats in [("orders-v1", ("avro-confluent",)), ("logs", ("json",)), ("ordersXv2", ("json",)),
                           ("orders.v1", ("avro-confluent",))]:
        cfg = parse(kafka=pattern, values=dotted, tables=[{"name": "db.t", "topics": table}])
        assert cfg.formats_of(cfg.table) == formats, table
    with pytest.raises(ConfigError, match=r"several value formats \(json, avro-confluent"):
        parse(kafka=pattern, values=dotted, tables=[{"name": "db.t", "topics": "orders.v."}])   # may overlap


def test_a_topic_of_a_format_config_check_did_not_find_for_the_table_stops_it(tmp_path: Path) -> None:
    base = support.load(support.write_config(tmp_path, "127.0.0.1:1", ["orders"], extra=""))
    cfg = config.parse({**copy.deepcopy(BASE), "catalog": {"properties": dict(base.catalog.properties)},
                        "tables": [{"name": "shop.orders", "topics": "orders", "columns": [
                            {"name": "id", "type": "long"}]}]})
    catalog = iceberg_catalog.load(cfg.catalog)
    try:
        table = iceberg_catalog.ensure_table(catalog, cfg.table, {})
        targets = Targets(cfg, catalog, {"shop.orders": table}, takers=lambda topic: Takers(()),
                          formats=_Formats(cfg.values))
        target = targets["shop.orders"]
        assert target.formats == ("avro-confluent",)
        with pytest.raises(ConfigError, match=r"table shop.orders takes logs, whose values are json .* which config "
                                              r"check did not find it may take \(it found avro-confluent\)"):
            targets.fit_format(target, "logs")   # a topic the listed ones did not foresee
    finally:
        support.close_catalog(catalog)
