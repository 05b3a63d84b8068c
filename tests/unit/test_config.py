"""The config is validated once, and every error names the key and the fix."""

import dataclasses
import re
from pathlib import Path

import pydantic
import pytest

from frazil import config
from frazil.config import checks
from frazil.errors import ConfigError

MINIMAL = {
    "pipeline": {"name": "p"},
    "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["t"]},
    "table": {"name": "ns.t", "columns": [{"name": "id", "type": "long", "required": True}]},
}


def with_(section: str, **values: object) -> dict:
    data = {k: dict(v) for k, v in MINIMAL.items()}
    data[section].update(values)
    return data


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    cfg = config.parse(MINIMAL, base=tmp_path)
    assert cfg.commit_interval_s == 10.0
    assert cfg.kafka.group_id == "frazil-p"
    assert cfg.table.metadata_columns is True
    assert cfg.catalog.properties["uri"] == f"sqlite:///{tmp_path}/warehouse/catalog.db"
    assert cfg.catalog.properties["warehouse"] == f"file://{tmp_path}/warehouse"


def test_fetch_size_stays_under_the_mmap_ceiling_and_never_below_one_partition_fetch(tmp_path: Path) -> None:
    # 8 MiB by default: a whole fetch response under glibc's 32 MiB mmap threshold (its buffers reuse heap memory)
    assert config.parse(MINIMAL, base=tmp_path).kafka.fetch_max_bytes == 8 << 20
    # left out, it follows a larger partition fetch so one partition's fetch still fits
    larger = config.parse(with_("kafka", max_partition_fetch_bytes=16 << 20), base=tmp_path)
    assert larger.kafka.fetch_max_bytes == 16 << 20
    assert config.parse(with_("kafka", fetch_max_bytes=1 << 20, max_partition_fetch_bytes=1 << 20),
                        base=tmp_path).kafka.fetch_max_bytes == 1 << 20
    with pytest.raises(ConfigError, match=r"kafka.fetch_max_bytes \(1048576\) is below kafka.max_partition_fetch_bytes "
                                          r"\(4194304\).*raise fetch_max_bytes or leave it out"):
        config.parse(with_("kafka", fetch_max_bytes=1 << 20), base=tmp_path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({k: v for k, v in MINIMAL.items() if k != "kafka"}, "missing section [kafka]"),
        (with_("pipeline", commit_interval_s=0), "pipeline.commit_interval_s must be greater than 0"),
        (with_("pipeline", commit_interval_s="5"), "pipeline.commit_interval_s must be float"),
        (with_("pipeline", colour="red"), "unknown key(s) colour in [pipeline]"),
        (with_("kafka", topics=[]), "give kafka.topics (a list"),
        (with_("kafka", topic_pattern="orders.*"), "exactly one of the two"),
        (with_("kafka", topics=[], topic_pattern="orders.(*"),
         "kafka.topic_pattern 'orders.(*' is not a valid regular"),
        (with_("kafka", auto_offset_reset="none"), "kafka.auto_offset_reset"),
        (with_("table", name="flat"), 'table.name \'flat\' must be "namespace.table"'),
        (with_("table", columns=[{"name": "x", "type": "varchar"}]),
         "table.columns[0].type has unknown type 'varchar'"),
        (with_("table", columns=[{"name": "_kafka_offset", "type": "long"}]), "reserved prefix (_kafka_, _frazil_)"),
        (with_("table", partition_by=["day(missing)"]), "entry 'day(missing)': 'missing' is not a declared column; "
                                                        "partition by one of id, _kafka_topic"),
        (with_("table", columns=[{"name": "d", "type": "decimal(40, 2)"}]),
         "table.columns[0].type 'decimal(40, 2)' is not a decimal Iceberg can hold: decimal(P, S) needs 1 <= P <= 38 "
         "and S <= P"),
        (with_("table", columns=[{"name": "d", "type": "decimal(10, 12)"}]), "needs 1 <= P <= 38 and S <= P"),
        (with_("table", columns=[{"name": "s", "type": "string"}], partition_by=["day(s)"]),
         "day() does not apply to 's', a string column"),
        (with_("table", columns=[{"name": "s", "type": "string"}], partition_by=["bucket[0](s)"]),
         "bucket[N] needs N >= 1"),
        # inferred columns: the column and type are checked when the table is created, the shape now
        ({**MINIMAL, "table": {"name": "ns.t", "partition_by": ["bucket[0](s)"]}}, "bucket[N] needs N >= 1"),
        ({**MINIMAL, "table": {"name": "ns.t", "partition_by": ["bucket(s)"]}},
         "is not a partition transform; use e.g."),
        ({**MINIMAL, "table": {"name": "ns.t", "partition_by": [3]}}, "is not a partition transform; use e.g."),
        (with_("table", columns=[{"name": "t", "type": "timestamp"}], partition_by=["truncate[4](t)"]),
         "truncate() does not apply to 't', a timestamp column"),
        (with_("table", route_field="type"), "table.route_field and table.route go together"),
        (with_("table", route_field="a..b", route="x"), "must be a dotted path"),
        (with_("table", topics="("), "table.topics '(' is not a valid regular expression"),
        (with_("pipeline", on_bad_record="drop"), "on_bad_record 'drop' must be \"fail\""),
        (with_("table", unknown_fields="drop"), "table.unknown_fields 'drop' must be one of fail, ignore"),
        (with_("table", columns=[{"name": "t", "type": "timestamptz", "unit": "minutes"}]),
         "table.columns[0].unit 'minutes': a unit says what a number sent for the column counts: s, ms, us or ns for "
         "timestamp and timestamptz columns (since the epoch) and time columns (since midnight), d for date columns"),
        (with_("table", columns=[{"name": "n", "type": "long", "unit": "ms"}]), "a unit says what a number"),
        (with_("table", columns=[{"name": "d", "type": "date", "unit": "ms"}]), "d for date columns"),
        (with_("table", columns=[{"name": "t", "type": "time", "unit": "d"}]), "d for date columns"),
        (with_("table", columns=[{"name": "s", "type": "string", "rounding": "half_even"}]),
         "rounding is \"half_even\", for int, long and decimal columns"),
        (with_("table", columns=[{"name": "n", "type": "long", "rounding": "up"}]), "table.columns[0].rounding 'up'"),
        (with_("pipeline", on_bad_record="dead_letter", dead_letter_topic="t"),
         "kafka.topics lists 't', the pipeline's dead-letter topic"),
        (with_("pipeline", txlog_fsync="sometimes"), "pipeline.txlog_fsync 'sometimes' must be \"always\""),
        (with_("pipeline", log_level="trace"), "pipeline.log_level 'TRACE' must be one of DEBUG, INFO, WARNING, ERROR"),
        (with_("pipeline", log_format="xml"), "pipeline.log_format 'xml' must be one of text, json"),
        (with_("pipeline", memory_budget_mb=-5), "pipeline.memory_budget_mb must be greater than 0, got -5"),
        ({**MINIMAL, "coordination": {"mode": "many"}}, "coordination.mode 'many' must be \"single\""),
        (with_("kafka", colour="red"), "unknown key(s) colour in [kafka]"),
        (with_("kafka", heartbeat_interval_ms=4000), "kafka.heartbeat_interval_ms (4000) must be below a third of "
                                                     "kafka.session_timeout_ms (10000)"),
        (with_("table", columns=[{"name": "id", "type": "long", "colour": "red"}]),
         "unknown key(s) colour in [table.columns[0]]"),
        ({**MINIMAL, "kafka": "x:1"}, "[kafka] must be a table, got 'x:1'"),
        (with_("table", columns=[]), "table.columns must be a non-empty array of tables like {name = \"id\""),
    ],
)
def test_errors_name_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config.parse(data)
    assert message in str(exc.value)


def test_types_and_partitioning() -> None:
    cfg = config.parse(with_("table", columns=[{"name": "amount", "type": "Decimal(10, 2)"},
                                               {"name": "at", "type": "timestamptz"}],
                             partition_by=["day(at)", "bucket[8](amount)"]))
    assert [c.type for c in cfg.table.columns] == ["decimal(10, 2)", "timestamptz"]
    assert cfg.table.partition_by == ("day(at)", "bucket[8](amount)")


def test_column_types_and_partition_transforms_are_parsed_once_into_typed_values() -> None:
    columns = [{"name": "amount", "type": " Decimal( 10 ,2)"}, {"name": "at", "type": "TIMESTAMPTZ"},
               {"name": "who", "type": "string"}]
    cfg = config.parse(with_("table", columns=columns,
                             partition_by=["day(at)", "bucket[8](amount)", " truncate[4](who) ", "who"]))
    amount, at, _ = (c.type for c in cfg.table.columns)
    assert (amount.kind, amount.precision, amount.scale, str(amount)) == ("decimal", 10, 2, "decimal(10, 2)")
    assert (at.kind, at.precision, at.scale, str(at)) == ("timestamptz", None, None, "timestamptz")
    assert [(f.transform, f.width, f.source) for f in cfg.table.partition_by] == [
        ("day", None, "at"), ("bucket", 8, "amount"), ("truncate", 4, "who"), ("identity", None, "who")]
    assert [str(f) for f in cfg.table.partition_by] == ["day(at)", "bucket[8](amount)", "truncate[4](who)", "who"]
    day = config.PartitionField("day(at)")
    assert day.applies_to(at) and day.applies_to("date") and not day.applies_to("string")
    assert cfg.table.partition_by[1].applies_to("decimal(38, 0)") and not day.applies_to("fixed[16]")
    assert day.takes == ("date", "timestamp", "timestamptz")
    with pytest.raises(AttributeError):
        day.width = 3   # type: ignore[misc]


@pytest.mark.parametrize("spec", ["day(_kafka_timestamp)", "hour(_kafka_timestamp)", "bucket[4](_kafka_partition)",
                                  "truncate[2](_kafka_topic)", "_kafka_key", "identity(_kafka_offset)"])
def test_the_kafka_metadata_columns_can_be_partitioned_by_when_the_table_has_them(spec: str) -> None:
    assert config.parse(with_("table", partition_by=[spec])).table.partition_by == (spec,)
    inferred = {**MINIMAL, "table": {"name": "ns.t", "partition_by": [spec]}}
    assert config.parse(inferred).table.partition_by == (spec,)
    column = spec.split("(")[-1].rstrip(")")
    with pytest.raises(ConfigError, match=re.escape(
            f"table.partition_by entry {spec!r}: {column} is a Kafka metadata column, and this table has "
            "metadata_columns = false; set table.metadata_columns = true or partition by a declared column")):
        config.parse(with_("table", partition_by=[spec], metadata_columns=False))


def test_a_transform_of_a_metadata_column_of_another_type_names_the_types_it_takes() -> None:
    with pytest.raises(ConfigError, match=re.escape("table.partition_by entry 'day(_kafka_offset)': day() does not "
                                                    "apply to '_kafka_offset', a long column; it takes date, "
                                                    "timestamp, timestamptz")):
        config.parse({**MINIMAL, "table": {"name": "ns.t", "partition_by": ["day(_kafka_offset)"]}})


def test_a_nested_field_is_a_partition_source_of_an_inferred_schema_and_of_a_declared_struct() -> None:
    inferred = {**MINIMAL, "table": {"name": "ns.t", "partition_by": ["day(meta.at)", "meta.region.code"]}}
    assert [f.source for f in config.parse(inferred).table.partition_by] == ["meta.at", "meta.region.code"]
    meta = {"name": "meta", "type": "struct<at: timestamptz, tags: list<struct<day: date>>, region: string>"}
    declared = with_("table", columns=[*MINIMAL["table"]["columns"], meta],  # type: ignore[index]
                     partition_by=["day(meta.at)", "meta.region"])
    assert [f.source for f in config.parse(declared).table.partition_by] == ["meta.at", "meta.region"]
    for source, message in [("meta.missing", "is not a field of a declared struct column"),
                            ("meta.tags.day", "never inside a list or a map"),
                            ("id.x", "is not a field of a declared struct column")]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            config.parse({**declared, "table": {**declared["table"], "partition_by": [source]}})
    with pytest.raises(ConfigError, match=re.escape("month() does not apply to 'meta.region', a string column")):
        config.parse({**declared, "table": {**declared["table"], "partition_by": ["month(meta.region)"]}})
    for wrong in ("day(meta.)", "day(.at)", "meta..at"):
        with pytest.raises(ConfigError, match="is not a partition transform"):
            config.parse({**MINIMAL, "table": {"name": "ns.t", "partition_by": [wrong]}})


@pytest.mark.parametrize(("text", "spelled"), [
    ("LONG", "long"), ("Decimal( 10 ,2 )", "decimal(10, 2)"), ("fixed[16]", "fixed[16]"),
    ("list<decimal(5,1)>", "list<decimal(5, 1)>"), ("map<string,list<long>>", "map<string, list<long>>"),
    ("STRUCT<At: timestamptz, tags: list<string>, m: map<string, struct<x: int>>>",
     "struct<At: timestamptz, tags: list<string>, m: map<string, struct<x: int>>>"),
])
def test_declared_types_nest_and_keep_their_field_names(text: str, spelled: str) -> None:
    parsed = config.ColumnType(text)
    assert str(parsed) == spelled and config.ColumnType(spelled) == parsed
    if parsed.kind == "struct":
        assert parsed.at("tags") == "list<string>" and parsed.at("At") == "timestamptz" and parsed.at("m.x") is None
        assert parsed.at("tags.x") is None and parsed.at("at") is None
        assert config.ColumnType("struct<a: struct<b: date>>").at("a.b") == "date"


@pytest.mark.parametrize(("text", "message"), [
    ("struct<a int>", "has 'int' where ':' belongs"), ("list<long", "ends too early"),
    ("list<long>>", "goes on after a whole type ('>')"), ("struct<>", "has '>' where a field name belongs"),
    ("map<long, int>", "a map's keys are string"), ("fixed[0]", "fixed[N] needs 1 <= N < 2^31"),
    ("fixed[4294967297]", "fixed[N] needs 1 <= N < 2^31"),
    ("struct<a: int, a: long>", "struct field 'a' is named twice"), ("struct<a: strng>", "has unknown type"),
    ("decimal(40, 2)", "needs 1 <= P <= 38"), ("list<decimal(39, 0)>", "needs 1 <= P <= 38"),
])
def test_a_declared_type_that_does_not_parse_says_where_and_what_the_types_are(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.parse(with_("table", columns=[{"name": "x", "type": text}]))


def test_a_nested_column_cannot_be_an_identifier_or_carry_a_unit() -> None:
    nested = {"name": "s", "type": "struct<id: long>", "required": True}
    with pytest.raises(ConfigError, match=re.escape("not float, double, struct, list or map")):
        config.parse(with_("table", columns=[nested], identifier_columns=["s"]))
    with pytest.raises(ConfigError, match="unit"):
        config.parse(with_("table", columns=[{"name": "s", "type": "list<timestamp>", "unit": "ms"}]))


def test_load_reports_bad_toml(tmp_path: Path) -> None:
    path = tmp_path / "f.toml"
    path.write_text("[pipeline\nname=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(path)
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.toml")


def test_the_example_config_is_valid() -> None:
    from frazil.cli import main

    example = Path(__file__).parents[2] / "examples" / "frazil.toml"
    cfg = config.load(example)
    assert cfg.table.partition_by == ("day(event_time)",)
    assert main(["check-config", "--config", str(example)]) == 0



def test_metrics_section() -> None:
    assert config.parse(MINIMAL).metrics.port == 0
    data = {**MINIMAL, "metrics": {"port": 9464, "host": "0.0.0.0"}}
    assert config.parse(data).metrics == config.MetricsConfig(9464, "0.0.0.0")
    with pytest.raises(ConfigError, match="metrics.port 70000"):
        config.parse({**MINIMAL, "metrics": {"port": 70000}})


TWO_TABLES = {
    "pipeline": {"name": "p"},
    "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic_pattern": r"shop\..*"},
    "tables": [
        {"name": "ns.orders", "topics": r"shop\.orders", "columns": [{"name": "id", "type": "long"}]},
        {"name": "ns.big", "route_field": "meta.size", "route": "big|huge", "columns": [{"name": "id", "type": "long"}],
         "partition_by": ["bucket[4](id)"]},
    ],
}


def test_several_tables_with_routing() -> None:
    cfg = config.parse(TWO_TABLES)
    assert cfg.kafka.topics == () and cfg.kafka.topic_pattern == r"shop\..*"
    assert [t.name for t in cfg.tables] == ["ns.orders", "ns.big"]
    orders, big = cfg.tables
    assert orders.topics == r"shop\.orders" and orders.route_field == () and orders.routed
    assert big.route_field == ("meta", "size") and big.route == "big|huge" and big.partition_by == ("bucket[4](id)",)
    assert cfg.table is orders and cfg.table_named("ns.big") is big


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(table=MINIMAL["table"]), "not both"),
    (lambda d: d.update(tables=[]), "at least one table"),
    (lambda d: d["tables"].append(dict(d["tables"][0])), "'ns.orders' appears more than once"),
    (lambda d: d["tables"][1].update(colour="red"), "unknown key(s) colour in [tables[1]]"),
    (lambda d: d["tables"][1].update(route="("), "tables[1].route '(' is not a valid regular expression"),
])
def test_table_list_errors_name_the_entry(change, message: str) -> None:  # type: ignore[no-untyped-def]
    data = {**TWO_TABLES, "tables": [dict(t) for t in TWO_TABLES["tables"]]}  # type: ignore[union-attr]
    change(data)
    with pytest.raises(ConfigError) as exc:
        config.parse(data)
    assert message in str(exc.value)


def test_source_topics_by_list_or_pattern_never_the_control_topic() -> None:
    listed = config.parse(MINIMAL)
    assert listed.kafka.takes("t") and not listed.kafka.takes("u")
    cfg = config.parse(TWO_TABLES)
    assert cfg.kafka.takes("shop.orders") and not cfg.kafka.takes("xshop.orders") and not cfg.kafka.takes("shop")
    everything = config.parse({**TWO_TABLES, "kafka": {"bootstrap_servers": "b:1", "topic_pattern": ".*"}})
    assert everything.kafka.takes("any") and not everything.kafka.takes("frazil-control-p")
    with pytest.raises(ConfigError, match="'frazil-control-p', the pipeline's control topic"):
        config.parse(with_("kafka", topics=["t", "frazil-control-p"]))


def test_dynamic_tables_named_by_a_template_over_topic_and_fields() -> None:
    data = {k: v for k, v in MINIMAL.items() if k != "table"}
    cfg = config.parse({**data, "dynamic": {"table": "raw.{topic}_{meta.kind}", "maps": ["attrs"],
                                            "partition_by": ["day(at)"]}})
    dyn = cfg.dynamic
    assert dyn is not None and cfg.tables == () and dyn.create and dyn.columns == ()
    assert dyn.placeholders == ("topic", "meta.kind") and dyn.fields == (("meta", "kind"),)
    assert dyn.name({"topic": "Shop.Orders-EU", "meta.kind": "9x"}) == "raw.shop_orders_eu_9x"
    assert config.parse({**data, "dynamic": {"table": "raw.{topic}"}}).dynamic.name({"topic": "7up"}) == "raw._7up"
    assert dyn.partition_by == ("day(at)",) and dyn.maps == ("attrs",)
    made = dyn.table_config("raw.shop_orders")
    assert (made.name, made.columns, made.partition_by, made.maps, made.routed) == (
        "raw.shop_orders", (), ("day(at)",), ("attrs",), False)
    with pytest.raises(ConfigError, match="needs a table named in the config"):
        _ = cfg.table
    for bad in ("raw.events", "{topic}", "raw.{}", "raw.{a..b}", "r aw.{topic}"):
        with pytest.raises(ConfigError, match="must be a \"namespace.table\" template"):
            config.parse({**data, "dynamic": {"table": bad}})
    with pytest.raises(ConfigError, match="dynamic.partition_by entry 'day\\(s\\)': day\\(\\) does not apply"):
        config.parse({**data, "dynamic": {"table": "raw.{topic}", "columns": [{"name": "s", "type": "string"}],
                                          "partition_by": ["day(s)"]}})
    with pytest.raises(ConfigError, match="missing section \\[table\\]"):
        config.parse(data)


def test_the_routed_example_config_is_valid() -> None:
    from frazil.cli import main

    example = Path(__file__).parents[2] / "examples" / "routed.toml"
    cfg = config.load(example)
    assert [t.name for t in cfg.tables] == ["shop.orders", "shop.refunds"] and cfg.dynamic is not None
    assert cfg.kafka.takes("shop.payments") and cfg.dynamic.name({"topic": "shop.payments"}) == "raw.shop_payments"
    assert main(["check-config", "--config", str(example)]) == 0


def test_the_debezium_avro_example_config_is_valid() -> None:
    from frazil.cli import main

    example = Path(__file__).parents[2] / "examples" / "cdc-avro.toml"
    cfg = config.load(example)
    assert cfg.dynamic is not None and cfg.dynamic.changes is not None and cfg.values.format == "avro-confluent"
    assert cfg.dynamic.name({"topic[1]": "public", "topic[2]": "items"}) == "public.items"
    assert cfg.kafka.takes("pg.public.items") and not cfg.kafka.takes("pg.other.items")
    assert main(["check-config", "--config", str(example)]) == 0


@pytest.mark.parametrize(("table", "message"), [
    ({"identifier_columns": ["missing"]}, "identifier_columns entry 'missing' must be a declared column with required"),
    ({"columns": [{"name": "x", "type": "double", "required": True}], "identifier_columns": ["x"]},
     "not float, double, struct, list or map"),
    ({"sort_order": "id sideways"}, "table.sort_order 'id sideways' must be columns"),
    ({"sort_order": "nope"}, "names 'nope', which is not a declared column"),
    ({"properties": {"frazil.offsets.p": "{}"}}, "frazil.offsets.p are set by frazil itself"),
])
def test_table_layout_errors(table: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.parse(with_("table", **table))


def test_table_layout_parsed() -> None:
    cfg = config.parse(with_("table", identifier_columns=["id"], sort_order="id DESC", properties={"a.b": 1}))
    assert cfg.table.identifier_columns == ("id",) and cfg.table.sort_order == "id DESC"
    assert cfg.table.properties == {"a.b": "1"}
    data = {k: v for k, v in MINIMAL.items() if k != "table"}
    with pytest.raises(ConfigError, match="identifier_columns needs \\[dynamic\\] columns"):
        config.parse({**data, "dynamic": {"table": "raw.{topic}", "identifier_columns": ["id"]}})


def test_units_and_unknown_fields_reach_the_table_config() -> None:
    cfg = config.parse(with_("table", unknown_fields="ignore", columns=[
        {"name": "id", "type": "long"}, {"name": "at", "type": "timestamptz", "unit": "ms"},
        {"name": "day", "type": "date", "unit": "d"}, {"name": "clock", "type": "time", "unit": "us"}]))
    assert cfg.table.unknown_fields == "ignore"
    assert [(c.name, c.unit) for c in cfg.table.columns] == [("id", None), ("at", "ms"), ("day", "d"), ("clock", "us")]
    assert config.parse(MINIMAL).table.unknown_fields == "fail"   # never a silent drop by default
    assert not config.parse(MINIMAL).table.case_insensitive and config.parse(MINIMAL).on_bad_record == "fail"
    cfg = config.parse({**with_("table", unknown_fields="evolve", case_insensitive=True, columns=[
        {"name": "id", "type": "long", "rounding": "half_even"}, {"name": "d", "type": "decimal(9, 2)",
                                                                  "rounding": "half_even"}]),
                        "pipeline": {"name": "p", "on_bad_record": "dead_letter"}})
    assert (cfg.table.unknown_fields, cfg.table.case_insensitive) == ("evolve", True)
    assert [c.rounding for c in cfg.table.columns] == ["half_even", "half_even"]
    assert (cfg.on_bad_record, cfg.dead_letter_topic) == ("dead_letter", "frazil-dead-letters-p")
    assert cfg.dead_letter_topic in cfg.kafka.exclude_topics   # never consumed, even by a pattern


def test_avro_values_take_a_schema_file_or_a_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "e.avsc").write_text('{"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]}')
    cfg = config.parse({**MINIMAL, "values": {"format": "avro", "schema_file": "e.avsc"}}, base=tmp_path)
    assert cfg.values.format == "avro" and cfg.values.schema_file == str(tmp_path / "e.avsc")
    assert cfg.values.registry is None
    monkeypatch.setenv("REG_PW", "s3cret")
    cfg = config.parse({**MINIMAL, "values": {"format": "avro-confluent"},
                        "schema_registry": {"url": "https://r:8081/", "username": "u", "password_env": "REG_PW"}},
                       base=tmp_path)
    assert cfg.values.registry is not None
    assert (cfg.values.registry.url, cfg.values.registry.password) == ("https://r:8081", "s3cret")
    assert "s3cret" not in repr(cfg)
    cfg = config.parse({**MINIMAL, "values": {"format": "json-schema-confluent"},
                        "schema_registry": {"url": "http://r:8081"}}, base=tmp_path)
    assert cfg.values.format == "json-schema-confluent" and cfg.values.registry is not None


@pytest.mark.parametrize(("extra", "message"), [
    ({"values": {"format": "thrift"}}, "values.format 'thrift' must be"),
    ({"values": {"format": "avro"}}, "needs values.schema_file"),
    ({"values": {"format": "avro", "schema_file": "nope.avsc"}}, "nope.avsc"),
    ({"values": {"format": "avro-confluent"}}, "needs a [schema_registry] section"),
    ({"values": {"format": "avro-confluent"}, "schema_registry": {"url": "r:8081"}}, "must be an http"),
    ({"values": {"format": "avro-confluent"}, "schema_registry": {"url": "http://r", "username": "u"}},
     "go together"),
    ({"schema_registry": {"url": "http://r"}},
     "is for values.format = \"avro-confluent\", \"json-schema-confluent\" or \"protobuf-confluent\""),
    ({"values": {"format": "protobuf-confluent"}}, "needs a [schema_registry] section"),
    ({"values": {"format": "protobuf-confluent"}, "schema_registry": {"url": "http://r"},
      "table": {"name": "ns.t", "route_field": "kind", "route": "a"}}, "route_field reads plain JSON values"),
    ({"values": {"format": "json-schema-confluent"}}, "needs a [schema_registry] section"),
    ({"values": {"format": "json-schema-confluent"}, "schema_registry": {"url": "http://r"},
      "table": {"name": "ns.t", "mode": "upsert", "identifier_columns": ["id"],
                "columns": [{"name": "id", "type": "long", "required": True}]}}, "keyed tables (mode = 'upsert')"),
    ({"values": {"format": "json-schema-confluent"}, "schema_registry": {"url": "http://r"},
      "table": {"name": "ns.t", "route_field": "kind", "route": "a"}}, "route_field reads plain JSON values"),
    ({"values": {"format": "json-schema-confluent"}, "schema_registry": {"url": "http://r"},
      "table": {"name": "ns.t", "connect_envelope": True}}, "carry their schema's id instead"),
    ({"values": {"format": "json-schema-confluent"}, "schema_registry": {"url": "http://r"},
      "dynamic": {"table": "raw.{kind}"}}, "must name tables by {topic} only"),
    ({"values": {"format": "avro-confluent"}, "schema_registry": {"url": "http://r"},
      "table": {"name": "ns.t", "route_field": "kind", "route": "a",
                "columns": [{"name": "id", "type": "long"}]}}, "route_field reads JSON values"),
    ({"values": {"format": "avro-confluent"}, "schema_registry": {"url": "http://r"},
      "dynamic": {"table": "raw.{kind}"}}, "must name tables by {topic} only"),
])
def test_avro_config_errors_name_the_key(tmp_path: Path, extra: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.parse({**MINIMAL, **extra}, base=tmp_path)


def test_kafka_security_reads_secrets_from_the_environment_or_a_file_and_never_shows_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PW", "s3cret-env")
    (tmp_path / "ca.pem").write_text("not checked here")
    cfg = config.parse(with_("kafka", security_protocol="sasl_ssl", sasl_mechanism="scram-sha-512",
                             sasl_username="svc", sasl_password_env="KAFKA_PW", ssl_cafile="ca.pem"), base=tmp_path)
    sec = cfg.kafka.security
    assert (sec.protocol, sec.sasl_mechanism, sec.sasl_username, sec.sasl_password) == \
        ("SASL_SSL", "SCRAM-SHA-512", "svc", "s3cret-env")
    assert sec.ssl_cafile == str(tmp_path / "ca.pem") and sec.ssl_check_hostname
    assert "s3cret" not in repr(cfg) and "s3cret" not in sec.describe()
    (tmp_path / "pw").write_text("s3cret-file\n")
    cfg = config.parse(with_("kafka", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_username="svc", sasl_password_file="pw"), base=tmp_path)
    assert cfg.kafka.security.sasl_password == "s3cret-file"
    assert config.parse(MINIMAL).kafka.security.protocol == "PLAINTEXT"
    monkeypatch.setenv("KAFKA_OAUTH", "s3cret-client")
    cfg = config.parse(with_("kafka", security_protocol="SASL_SSL", sasl_mechanism="oauthbearer",
                             sasl_oauthbearer_token_endpoint_url="https://idp.example/realms/r/token",
                             sasl_oauthbearer_client_id="frazil", sasl_oauthbearer_client_secret_env="KAFKA_OAUTH",
                             sasl_oauthbearer_scope="kafka"))
    sec = cfg.kafka.security
    assert sec.oauth and sec.sasl_oauthbearer_client_secret == "s3cret-client"
    assert sec.describe() == ("SASL_SSL OAUTHBEARER as client frazil from https://idp.example/realms/r/token (secret "
                              "set) CA system")
    assert "s3cret" not in repr(cfg)


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        ({"security_protocol": "TLS"}, "kafka.security_protocol 'TLS' must be one of PLAINTEXT, SSL"),
        ({"security_protocol": "SASL_SSL"}, "needs kafka.sasl_mechanism"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "sasl_username": "u", "sasl_password": "p"},
         "needs kafka.sasl_mechanism, one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (got GSSAPI)"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "sasl_oauthbearer_client_id": "c"},
         "sasl_mechanism = \"OAUTHBEARER\" needs kafka.sasl_oauthbearer_token_endpoint_url, "
         "kafka.sasl_oauthbearer_client_secret"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "sasl_username": "u",
          "sasl_password": "p"}, "kafka.sasl_username, kafka.sasl_password: sasl_mechanism = \"OAUTHBEARER\" takes no"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "sasl_oauthbearer_client_id": "c",
          "sasl_oauthbearer_client_secret": "s", "sasl_oauthbearer_token_endpoint_url": "http://idp.example/token"},
         "kafka.sasl_oauthbearer_token_endpoint_url 'http://idp.example/token' must be an https:// URL"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "sasl_oauthbearer_client_id": "c",
          "sasl_oauthbearer_client_secret": "s",
          "sasl_oauthbearer_token_endpoint_url": "http://localhost:80@evil.example/token"}, "must be an https:// URL"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p",
          "sasl_oauthbearer_scope": "kafka"},
         "kafka.sasl_oauthbearer_scope: for sasl_mechanism = \"OAUTHBEARER\" only"),
        ({"sasl_oauthbearer_client_id": "c"}, "kafka.sasl_oauthbearer_client_id: kafka.sasl_* settings need"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u"},
         "needs kafka.sasl_username and a password"),
        ({"sasl_username": "u", "sasl_password": "p"}, "kafka.sasl_* settings need security_protocol"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u",
          "sasl_password_env": "NOT_SET_ANYWHERE"}, "kafka.sasl_password_env names the environment variable"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u",
          "sasl_password": "p", "sasl_password_file": "pw"},
         "give one of kafka.sasl_password, kafka.sasl_password_file"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u",
          "sasl_password_file": "missing"}, "kafka.sasl_password_file: cannot read"),
        ({"ssl_cafile": "ca.pem"}, "kafka.ssl_cafile"),
        ({"security_protocol": "SSL", "ssl_cafile": "missing.pem"}, "kafka.ssl_cafile"),
        ({"security_protocol": "SSL", "ssl_check_hostname": False, "ssl_certfile": "ca.pem"},
         "kafka.ssl_certfile and kafka.ssl_keyfile go together"),
        ({"ssl_check_hostname": False}, "kafka.ssl_* settings need security_protocol"),
    ],
)
def test_kafka_security_errors_name_the_key(tmp_path: Path, kafka: dict, message: str) -> None:
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(ConfigError) as info:
        config.parse(with_("kafka", **kafka), base=tmp_path)
    assert message in str(info.value)


def test_catalog_properties_can_come_from_the_environment_or_a_file(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATALOG_URI", "postgresql+psycopg://u:pw@db:5432/lake")
    (tmp_path / "s3.key").write_text("k3y\n")
    data = {**MINIMAL, "catalog": {"properties": {"uri_env": "CATALOG_URI", "warehouse": "s3://b/w",
                                                  "s3.secret-access-key_file": "s3.key"}}}
    props = config.parse(data, base=tmp_path).catalog.properties
    assert props["uri"] == "postgresql+psycopg://u:pw@db:5432/lake" and props["s3.secret-access-key"] == "k3y"
    assert "uri_env" not in props
    data["catalog"]["properties"]["uri"] = "sqlite:///x.db"
    with pytest.raises(ConfigError, match="give one of catalog.properties.uri, catalog.properties.uri_env"):
        config.parse(data, base=tmp_path)


@pytest.mark.parametrize("uri, shown", [
    ("postgresql+psycopg://u:s3cr/et@db:5432/x", "postgresql+psycopg://u:***@db:5432/x"),
    ("postgresql://:s3cret@host/db", "postgresql://:***@host/db"),
    ("postgresql://u:p@s3cret@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u@h/db?password=s3cret&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
    ("sqlite:////var/lib/frazil/catalog.db", "sqlite:////var/lib/frazil/catalog.db"),
])
def test_a_catalog_password_is_never_printed(uri: str, shown: str) -> None:
    from frazil.iceberg import catalog

    cfg = config.CatalogConfig("c", {"type": "sql", "uri": uri, "s3.secret-access-key": "s3cret"})
    assert catalog.describe(cfg) == f"sql {shown}"
    assert catalog.shown_properties(cfg) == {"type": "sql", "uri": shown, "s3.secret-access-key": "***"}
    assert "s3cret" not in repr(cfg)


KEYED = {"name": "ns.t", "identifier_columns": ["id"],
         "columns": [{"name": "id", "type": "long", "required": True}, {"name": "v", "type": "string"},
                     {"name": "op", "type": "string"}]}


def test_keyed_tables_read_debezium_by_default_and_flat_change_records_by_their_field(tmp_path: Path) -> None:
    cdc = config.parse({**MINIMAL, "table": {**KEYED, "mode": "cdc"}}, base=tmp_path).table
    assert cdc.mode == "cdc" and cdc.changes is not None
    assert (cdc.changes.op, cdc.changes.after, cdc.changes.before) == (("op",), ("after",), ("before",))
    assert cdc.changes.upsert_ops == ("c", "r", "u") and cdc.changes.delete_ops == ("d",)
    assert cdc.changes.tombstones == "skip" and cdc.changes.unwrap_envelope
    flat = config.parse({**MINIMAL, "table": {**KEYED, "mode": "cdc", "tombstones": "delete",
                                              "cdc": {"format": "field", "field": "op", "upsert": ["I", "U"],
                                                      "delete": ["D"]}}}, base=tmp_path).table
    assert flat.changes is not None
    assert (flat.changes.op, flat.changes.after, flat.changes.before) == (("op",), (), ())
    assert flat.changes.upsert_ops == ("I", "U") and flat.changes.tombstones == "delete"
    upsert = config.parse({**MINIMAL, "table": {**KEYED, "mode": "upsert"}}, base=tmp_path).table
    assert upsert.changes is not None and upsert.changes.op == () and upsert.changes.merge == "native"
    # the Spark merge flush: the pipeline writes the staging table, merged into the table declared
    staged = config.parse({**MINIMAL, "table": {**KEYED, "mode": "upsert", "merge": "spark", "merge_interval_s": 30,
                                                "merge_min_changes": 0}}, base=tmp_path).table
    assert staged.name == "ns.t__changes" and staged.changes is not None
    assert (staged.changes.target, staged.changes.merge_interval_s, staged.changes.merge_min_changes) == ("ns.t", 30, 0)
    assert config.merge_target(staged).name == "ns.t" and not config.merge_target(staged).changes.target
    dynamic = {"table": "raw.{topic}", "mode": "upsert", "merge": "spark", "identifier_columns": ["id"],
               "columns": KEYED["columns"]}
    with pytest.raises(ConfigError, match="for declared tables"):
        config.parse({**{k: v for k, v in MINIMAL.items() if k != "table"}, "dynamic": dynamic}, base=tmp_path)
    assert config.parse(MINIMAL, base=tmp_path).table.mode == "append"


@pytest.mark.parametrize(
    ("table", "extra", "message"),
    [
        ({"mode": "merge"}, {}, "table.mode 'merge' must be \"append\""),
        ({"mode": "upsert", "identifier_columns": []}, {}, "table.mode = \"upsert\" needs table.identifier_columns"),
        ({"mode": "upsert", "metadata_columns": False}, {}, "needs metadata_columns = true"),
        ({"mode": "upsert", "unknown_fields": "evolve", "merge": "spark"}, {}, "does not evolve the schema yet"),
        ({"mode": "upsert", "cdc": {"format": "debezium"}}, {}, "[table.cdc] needs table.mode = \"cdc\""),
        ({"tombstones": "delete"}, {}, "an append table has no key to delete"),
        ({"mode": "upsert", "tombstones": "drop"}, {}, "table.tombstones 'drop' must be \"skip\""),
        ({"mode": "cdc", "cdc": {"format": "maxwell"}}, {}, "table.cdc.format 'maxwell' must be \"debezium\""),
        ({"mode": "cdc", "cdc": {"field": "op"}}, {}, "table.cdc.field is for cdc.format = \"field\""),
        ({"mode": "cdc", "cdc": {"format": "field", "upsert": ["I"], "delete": ["D"]}}, {}, "missing required key "
         "'table.cdc.field'"),
        ({"mode": "cdc", "cdc": {"format": "field", "field": "op", "upsert": [], "delete": ["D"]}}, {},
         "table.cdc.upsert must list the operation values"),
        ({"mode": "cdc", "cdc": {"format": "field", "field": "op", "upsert": ["D"], "delete": ["D"]}}, {},
         "both list D"),
        ({"mode": "cdc", "cdc": {"format": "field", "field": "kind", "upsert": ["I"], "delete": ["D"]}}, {},
         "declare column 'kind'"),
        ({"mode": "cdc", "cdc": {"colour": "red"}}, {}, "unknown key(s) colour in [table.cdc]"),
        ({"mode": "cdc", "cdc": {"format": "field", "field": "op", "upsert": ["I"], "delete": ["D"]}},
         {"values": {"format": "avro", "schema_file": "x.avsc"}}, "mode = \"cdc\" reads Debezium's envelope"),
        ({"mode": "upsert", "merge": "spark"}, {"values": {"format": "avro", "schema_file": "x.avsc"}},
         "merge = \"spark\" reads JSON values for now"),
        ({"mode": "upsert", "merge": "flink"}, {}, "table.merge 'flink' must be \"native\""),
        ({"mode": "upsert", "merge_interval_s": 5}, {}, "are for table.merge = \"spark\""),
        ({"mode": "upsert", "merge": "spark", "merge_min_changes": -1}, {}, "table.merge_min_changes must be 0"),
    ],
)
def test_keyed_table_errors_name_the_key_and_the_fix(tmp_path: Path, table: dict, extra: dict, message: str) -> None:
    (tmp_path / "x.avsc").write_text('{"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}, '
                                     '{"name": "v", "type": ["null", "string"]}, '
                                     '{"name": "op", "type": ["null", "string"]}]}')
    with pytest.raises(ConfigError) as info:
        config.parse({**MINIMAL, "table": {**KEYED, **table}, **extra}, base=tmp_path)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize(("properties", "message"), [
    ({"uri": "postgres://u@db/lake"}, "catalog.properties.uri: 'postgres' is not a database SQLAlchemy can open "
                                      "with the drivers installed here; use one of sqlite://, postgresql://"),
    ({"uri": "sqlit:///c.db"}, "'sqlit' is not a database SQLAlchemy can open"),
    ({"uri": "http://127.0.0.1:8181"}, "or type = \"rest\" for a REST catalog"),
    ({"type": "nessie", "uri": "http://n"}, "catalog.properties.type 'nessie' is not a catalog type pyiceberg "
                                           "knows; use one of sql, in-memory, rest, hive, glue, dynamodb, bigquery"),
    ({"type": "glue", "glue.region": "eu-west-1", "glue.access-key-id": "AKIA"},
     "catalog.properties glue.region, glue.access-key-id: only pyiceberg reads these, Spark maintenance would use "
     "another region or identity; set the region as \"client.region\""),
    ({"type": "dynamodb"}, "catalog.properties.type = 'dynamodb': Spark maintenance shares \"sql\" (SQLite, "
                           "PostgreSQL), \"rest\", \"glue\" and \"hive\" catalogs only; set [maintenance] "
                           "enabled = false"),
])
def test_a_catalog_this_install_cannot_load_is_refused_at_load(properties: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.parse({**MINIMAL, "catalog": {"properties": properties}})
    assert message in str(info.value)


def test_a_catalog_type_whose_library_is_missing_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    no_maintenance = {**MINIMAL, "maintenance": {"enabled": False}}
    monkeypatch.setattr(checks, "_installed", lambda module: module not in ("thrift", "boto3"))
    with pytest.raises(ConfigError, match=re.escape("catalog.properties.type = 'hive' needs thrift, which this install "
                                                    "lacks: pip install 'frazil[hive]'")):
        config.parse({**no_maintenance, "catalog": {"properties": {"type": "hive", "uri": "thrift://h:9083"}}})
    with pytest.raises(ConfigError, match=re.escape("pip install 'frazil[glue]'")):
        config.parse({**no_maintenance, "catalog": {"properties": {"type": "GLUE"}}})
    signed = {"type": "rest", "uri": "https://cat", "rest.sigv4-enabled": "true"}
    lacks = "pyiceberg signs REST requests with botocore, which this install lacks: pip install 'frazil[glue]'"
    with pytest.raises(ConfigError, match=re.escape(lacks)):
        config.parse({**no_maintenance, "catalog": {"properties": signed}})
    monkeypatch.setattr(checks, "_installed", lambda module: True)
    assert config.parse({**no_maintenance, "catalog": {"properties": signed}}).catalog.properties == signed
    cfg = config.parse({**no_maintenance, "catalog": {"properties": {"type": "glue"}}})
    assert cfg.catalog.properties == {"type": "glue"}


def test_the_catalog_types_are_pyicebergs() -> None:
    from pyiceberg.catalog import CatalogType

    assert set(checks.CATALOG_TYPES) == {t.value for t in CatalogType}


def test_the_heartbeat_stays_below_a_third_of_the_session_timeout() -> None:
    assert config.parse(with_("kafka", session_timeout_ms=12_000, heartbeat_interval_ms=3_999)).kafka.session_timeout_ms
    with pytest.raises(ConfigError, match="lower heartbeat_interval_ms or raise session_timeout_ms"):
        config.parse(with_("kafka", session_timeout_ms=9_000))


def test_config_values_are_frozen_and_a_replacement_is_validated_again() -> None:
    cfg = config.parse(MINIMAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.pipeline = "q"   # type: ignore[misc]
    # frazil backfill's replacement (daemon.py)
    big = dataclasses.replace(cfg, max_buffer_records=10, memory_budget_bytes=1 << 30, commit_interval_s=600.0,
                              coordination=dataclasses.replace(cfg.coordination, commit_timeout_s=3600.0),
                              spark=dataclasses.replace(cfg.spark, bulk_min_rows=1),
                              maintenance=dataclasses.replace(cfg.maintenance, enabled=False))
    assert (big.commit_interval_s, big.spark.bulk_min_rows, big.maintenance.enabled) == (600.0, 1, False)
    assert big.kafka is cfg.kafka and big.pipeline == "p"
    widened = dataclasses.replace(cfg.table.columns[0], type="Decimal(12, 2)")
    assert (widened.type.kind, widened.type.precision) == ("decimal", 12)
    with pytest.raises(pydantic.ValidationError):
        dataclasses.replace(cfg.maintenance, max_snapshots=1)
    with pytest.raises(pydantic.ValidationError):
        dataclasses.replace(cfg.table, partition_by=("bucket(id)",))


def test_secrets_never_appear_in_repr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PW", "s3cret")
    cfg = config.parse({**with_("kafka", security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u",
                                sasl_password_env="PW", ssl_key_password_env="PW"),
                        "catalog": {"properties": {"s3.secret-access-key_env": "PW", "uri": "sqlite:///c.db"}},
                        "values": {"format": "avro-confluent"},
                        "schema_registry": {"url": "http://r", "username": "u", "password_env": "PW"}}, base=tmp_path)
    assert cfg.kafka.security.sasl_password == cfg.catalog.properties["s3.secret-access-key"] == "s3cret"
    assert "s3cret" not in repr(cfg) and "s3cret" not in cfg.kafka.security.describe()


def test_header_columns_are_for_append_tables_each_name_once(tmp_path: Path) -> None:
    headed = {"header_columns": [{"name": "trace", "header": "trace-id"}], "headers_column": "headers"}
    cfg = config.parse(with_("table", **headed, partition_by=["trace"]))
    assert [(h.name, h.header, h.type) for h in cfg.table.header_columns] == [("trace", "trace-id", "string")]
    for extra, message in [
            ({"mode": "upsert", "identifier_columns": ["id"]}, "header_columns and table.headers_column are for "
                                                              "append tables"),
            ({"headers_column": "trace"}, "column 'trace' is named more than once"),
            ({"header_columns": [{"name": "id", "header": "id"}]}, "column 'id' is named more than once"),
            ({"header_columns": [{"name": "at", "header": "at", "type": "timestamp"}]}, "a header lands in a string"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            config.parse(with_("table", **{**headed, **extra}))
    avsc = tmp_path / "e.avsc"
    avsc.write_text('{"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]}')
    avro = config.parse({**with_("table", **headed), "values": {"format": "avro", "schema_file": str(avsc)}})
    assert avro.values.format == "avro" and avro.table.headers_column == "headers"   # Avro values fill them too


def test_key_columns_take_the_whole_key_or_a_field_of_a_json_key_on_append_tables(tmp_path: Path) -> None:
    keyed = {"key_columns": [{"name": "raw_key"}, {"name": "user_id", "field": "user.id", "type": "long"}]}
    cfg = config.parse(with_("table", **keyed, partition_by=["bucket[4](user_id)"]))
    assert [(k.name, k.field, k.type) for k in cfg.table.key_columns] == [("raw_key", "", "string"),
                                                                          ("user_id", "user.id", "long")]
    for extra, message in [
            ({"mode": "upsert", "identifier_columns": ["id"]}, "table.key_columns is for append tables"),
            ({"key_columns": [{"name": "id"}]}, "column 'id' is named more than once"),
            ({"key_columns": [{"name": "k", "field": "a", "type": "binary"}]}, "binary, which takes the whole key"),
            ({"key_columns": [{"name": "k", "field": "a..b"}]}, "is not a dotted path"),
            ({"key_columns": [{"name": "k", "type": "date"}]}, "a key lands in a string"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            config.parse(with_("table", **{**keyed, **extra}))
    avsc = tmp_path / "e.avsc"
    avsc.write_text('{"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]}')
    avro = config.parse({**with_("table", **keyed), "values": {"format": "avro", "schema_file": str(avsc)}})
    assert [k.name for k in avro.table.key_columns] == ["raw_key", "user_id"]   # Avro values fill them too
