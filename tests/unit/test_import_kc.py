"""``frazil import-kc``: the Iceberg Kafka Connect docs' example connectors (single table, static
and dynamic routing) and a connector using most settings become configs that ``frazil config
check`` accepts, and every setting that is not carried over (or changes behaviour) is listed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from frazil import cli, kafka_connect

EXAMPLES = Path(__file__).parent / "kafka_connect"


def run_import(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    out = tmp_path / "frazil.toml"
    assert cli.main(["import-kc", str(EXAMPLES / name), "--bootstrap-servers", "127.0.0.1:9092", "-o", str(out),
                     *extra]) == 0, capsys.readouterr()
    report = capsys.readouterr().out
    assert cli.main(["config", "check", "--config", str(out)]) == 0, capsys.readouterr()
    assert f"{out}: ok" in capsys.readouterr().out
    return tomllib.loads(out.read_text()), report


def test_the_single_table_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, report = run_import(tmp_path, "single-table.json", capsys)
    assert cfg["pipeline"]["name"] == "events-sink" and cfg["kafka"]["topics"] == ["events"]
    assert cfg["table"] == {"name": "default.events", "create": False, "unknown_fields": "fail",
                            "metadata_columns": False}
    assert cfg["catalog"] == {"name": "iceberg", "properties": {"credential": "<credential>", "type": "rest",
                                                                "uri": "https://localhost", "warehouse": "<warehouse name>"}}
    assert cfg["coordination"] == {"mode": "distributed"}
    for key in ("tasks.max", "iceberg.catalog.credential", "iceberg.control.commit.interval-ms",
                "iceberg.tables.evolve-schema-enabled", "(offsets)"):
        assert f"\n  {key}: " in report, (key, report)


def test_the_static_routing_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, _ = run_import(tmp_path, "static-routing.json", capsys)
    assert [(t["name"], t["route_field"], t["route"]) for t in cfg["tables"]] == [
        ("default.events_list", "type", "list"), ("default.events_create", "type", "create")]


def test_the_dynamic_routing_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["import-kc", str(EXAMPLES / "dynamic-routing.json"), "--bootstrap-servers", "b:9092"]) == 2
    assert "give --dynamic-namespace NS" in capsys.readouterr().err
    cfg, report = run_import(tmp_path, "dynamic-routing.json", capsys, "--dynamic-namespace", "default")
    assert cfg["dynamic"] == {"table": "default.{db_table}", "create": False, "unknown_fields": "fail"}
    assert "tables" not in cfg and "table" not in cfg
    assert "a record naming a missing table is a bad record" in report


def test_a_connector_with_most_settings_lists_every_one_it_cannot_carry(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    cfg, report = run_import(tmp_path, "everything.properties", capsys)
    assert cfg["kafka"]["topic_pattern"] == r"orders\..*"    # the properties escape \\ read as one backslash
    assert cfg["kafka"]["bootstrap_servers"] == "127.0.0.1:9092"   # the command line wins over iceberg.kafka.*
    assert (cfg["kafka"]["security_protocol"], cfg["kafka"]["sasl_mechanism"], cfg["kafka"]["sasl_username"]) == \
        ("SASL_SSL", "SCRAM-SHA-512", "orders")
    assert cfg["pipeline"] == {"name": "orders-sink", "commit_interval_s": 60.0, "on_bad_record": "dead_letter",
                               "dead_letter_topic": "orders-dlq"}
    assert cfg["coordination"] == {"control_topic": "orders-control", "commit_timeout_s": 20.0}
    assert cfg["catalog"]["name"] == "lake" and cfg["catalog"]["properties"]["type"] == "glue"
    assert cfg["maintenance"] == {"enabled": False}
    assert cfg["table"]["partition_by"] == ["day(created_at)", "bucket[16](customer_id)"]
    assert cfg["table"]["unknown_fields"] == "evolve" and cfg["table"]["case_insensitive"] is True
    listed = {line.split(": ", 1)[0].strip() for line in report.splitlines() if line.startswith("  ")}
    for key in ("iceberg.tables.upsert-mode-enabled", "iceberg.tables.default-id-columns",
                "iceberg.tables.auto-create-props.format-version", "iceberg.table.lake.orders.commit-branch",
                "iceberg.control.commit.threads", "iceberg.catalog.io-impl", "iceberg.catalog.s3.secret-access-key",
                "iceberg.hadoop.fs.s3a.endpoint", "iceberg.kafka.sasl.jaas.config",
                "iceberg.kafka.ssl.truststore.location", "iceberg.kafka.linger.ms", "key.converter", "transforms",
                "transforms.meta.type", "errors.deadletterqueue.context.headers.enable", "iceberg.catalog.*"):
        assert key in listed, (key, sorted(listed))
    # nothing in the connector is left unaccounted for: carried or listed
    _, connector = kafka_connect.read((EXAMPLES / "everything.properties").read_text(), "everything.properties")
    done = kafka_connect.convert("orders-sink", connector, bootstrap_servers="127.0.0.1:9092")
    accounted = set(done.carried) | {k for k, _ in done.not_carried} | {"connector.class", "name"}
    assert set(connector) <= accounted, set(connector) - accounted


def test_what_is_not_an_iceberg_sink_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "s3.json"
    other.write_text('{"name": "s3", "config": {"connector.class": "io.confluent.connect.s3.S3SinkConnector"}}')
    assert cli.main(["import-kc", str(other), "--bootstrap-servers", "b:9092"]) == 2
    assert "import-kc reads Apache Iceberg sink connectors" in capsys.readouterr().err
    assert cli.main(["import-kc", str(EXAMPLES / "single-table.json")]) == 2
    assert "give --bootstrap-servers" in capsys.readouterr().err
