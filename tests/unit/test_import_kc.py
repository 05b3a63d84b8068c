"""``frazil import-kc``: the Iceberg Kafka Connect docs' example connectors (single table, static
and dynamic routing) and a connector using most settings become configs that ``frazil config
check`` accepts, and every setting that is not carried over (or changes behaviour) is listed.
Secrets are never written (the config names environment variables for them), and a malformed
number is a configuration error naming the setting."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from frazil import cli, kafka_connect
from frazil import config as config_mod
from frazil.errors import ConfigError
from frazil.iceberg import catalog as iceberg_catalog

EXAMPLES = Path(__file__).parent / "kafka_connect"
# the secrets in the example connectors: environment variable -> the value in the connector
CREDENTIAL = {"FRAZIL_CATALOG_CREDENTIAL": "<credential>"}
SECRETS = {"single-table.json": CREDENTIAL, "static-routing.json": CREDENTIAL, "dynamic-routing.json": CREDENTIAL,
           "everything.properties": {"FRAZIL_KAFKA_SASL_PASSWORD": "orders-secret",
                                     "FRAZIL_CATALOG_S3_SECRET_ACCESS_KEY": "AWS-SECRET"}}


@pytest.fixture(autouse=True)
def _secrets_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """As an operator would before `config check`: each variable the config names holds its secret."""
    for secrets in SECRETS.values():
        for var, value in secrets.items():
            monkeypatch.setenv(var, value)


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
    assert cfg["catalog"] == {"name": "iceberg", "properties": {"credential_env": "FRAZIL_CATALOG_CREDENTIAL",
                                                                "type": "rest", "uri": "https://localhost",
                                                                "warehouse": "<warehouse name>"}}
    assert cfg["coordination"] == {"mode": "distributed"}
    for key in ("tasks.max", "iceberg.catalog.credential", "iceberg.control.commit.interval-ms",
                "iceberg.tables.evolve-schema-enabled", "(offsets)"):
        assert f"\n  {key}: " in report, (key, report)


def test_the_static_routing_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, _ = run_import(tmp_path, "static-routing.json", capsys)
    assert [(t["name"], t["route_field"], t["route"]) for t in cfg["tables"]] == [
        ("default.events_list", "type", "list"), ("default.events_create", "type", "create")]


def test_json_with_the_schema_envelope_is_read_through_it_and_routes_on_its_payload(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    connector = json.loads((EXAMPLES / "static-routing.json").read_text())
    connector["config"].update({"value.converter": "org.apache.kafka.connect.json.JsonConverter",
                                "value.converter.schemas.enable": "true"})
    (tmp_path / "enveloped.json").write_text(json.dumps(connector))
    out = tmp_path / "frazil.toml"
    assert cli.main(["import-kc", str(tmp_path / "enveloped.json"), "--bootstrap-servers", "b:9092", "-o",
                     str(out)]) == 0, capsys.readouterr()
    cfg = tomllib.loads(out.read_text())
    assert [(t["connect_envelope"], t["route_field"]) for t in cfg["tables"]] == [(True, "payload.type")] * 2
    assert "schemas.enable" not in capsys.readouterr().out   # carried over, not reported as left behind
    assert config_mod.load(out).tables[0].connect_envelope


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
    assert (cfg["kafka"]["security_protocol"], cfg["kafka"]["sasl_mechanism"], cfg["kafka"]["sasl_username"],
            cfg["kafka"]["sasl_password_env"]) == ("SASL_SSL", "SCRAM-SHA-512", "orders", "FRAZIL_KAFKA_SASL_PASSWORD")
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


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_no_secret_is_written_to_the_config_or_the_report(tmp_path: Path, name: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--bootstrap-servers", "b:9092", "--dynamic-namespace", "default"]
    assert cli.main(["import-kc", str(EXAMPLES / name), *extra]) == 0   # the config on stdout, the report on stderr
    printed = capsys.readouterr()
    out = tmp_path / "frazil.toml"
    assert cli.main(["import-kc", str(EXAMPLES / name), *extra, "-o", str(out)]) == 0
    report = capsys.readouterr().out
    for text in (printed.out, printed.err, out.read_text(), report):
        for value in SECRETS[name].values():
            assert value not in text, (value, text)
    environment = next(line for line in report.splitlines() if line.startswith("  (environment): "))
    for var in SECRETS[name]:
        assert f'_env" = "{var}"' in out.read_text() or f'_env = "{var}"' in out.read_text()
        assert var in environment
    if name == "everything.properties":
        assert ("set FRAZIL_KAFKA_SASL_PASSWORD to the password in iceberg.kafka.sasl.jaas.config; "
                "FRAZIL_CATALOG_S3_SECRET_ACCESS_KEY to the value of iceberg.catalog.s3.secret-access-key") \
            in environment
        assert ('  iceberg.kafka.sasl.jaas.config: its password is not written to the file: kafka.sasl_password_env = '
                '"FRAZIL_KAFKA_SASL_PASSWORD" reads it from that environment variable') in report
    # `frazil config check` reads the secrets from the variables
    cfg = config_mod.load(out)
    assert set(SECRETS[name].values()) <= {cfg.kafka.security.sasl_password, *cfg.catalog.properties.values()}


def test_the_check_puts_a_placeholder_in_exactly_the_secret_variables(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, connector = kafka_connect.read((EXAMPLES / "everything.properties").read_text(), "everything.properties")
    done = kafka_connect.convert("orders-sink", connector, bootstrap_servers="127.0.0.1:9092")
    assert done.env == {"FRAZIL_KAFKA_SASL_PASSWORD": "the password in iceberg.kafka.sasl.jaas.config",
                        "FRAZIL_CATALOG_S3_SECRET_ACCESS_KEY": "iceberg.catalog.s3.secret-access-key"}
    monkeypatch.delenv("FRAZIL_KAFKA_SASL_PASSWORD")
    monkeypatch.setenv("FRAZIL_CATALOG_S3_SECRET_ACCESS_KEY", "set-here")
    monkeypatch.setenv("FRAZIL_OTHER", "untouched")
    with pytest.raises(ConfigError, match="FRAZIL_KAFKA_SASL_PASSWORD.*which is not set"):   # validation needs them
        config_mod.parse(tomllib.loads(done.toml), base=tmp_path)
    cfg = kafka_connect.check(done, tmp_path)
    assert cfg.kafka.security.sasl_password == kafka_connect.PLACEHOLDER
    assert cfg.catalog.properties["s3.secret-access-key"] == kafka_connect.PLACEHOLDER
    # the environment is as it was
    assert "FRAZIL_KAFKA_SASL_PASSWORD" not in os.environ
    assert (os.environ["FRAZIL_CATALOG_S3_SECRET_ACCESS_KEY"], os.environ["FRAZIL_OTHER"]) == ("set-here", "untouched")


def test_import_kc_is_accepted_without_the_secret_variables_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    for var in SECRETS["everything.properties"]:
        monkeypatch.delenv(var)
    out = tmp_path / "frazil.toml"
    assert cli.main(["import-kc", str(EXAMPLES / "everything.properties"), "--bootstrap-servers", "b:9092",
                     "-o", str(out)]) == 0
    assert "accepted by `frazil config check`" in capsys.readouterr().out
    assert "FRAZIL_KAFKA_SASL_PASSWORD" not in os.environ


def test_catalog_secrets_follow_frazils_masking_rule() -> None:
    assert (kafka_connect._SECRET_KEYS.pattern, kafka_connect._SECRET_KEYS.flags) == \
        (iceberg_catalog._SECRET_KEYS.pattern, iceberg_catalog._SECRET_KEYS.flags)
    connector = {"connector.class": kafka_connect.CONNECTOR_CLASSES[0], "topics": "t", "iceberg.tables": "db.t",
                 "iceberg.catalog.type": "rest", "iceberg.catalog.uri": "https://user:s3cr3t-1@rest.example/api",
                 "iceberg.catalog.token": "s3cr3t-2", "iceberg.catalog.rest.auth.Api-KEY": "s3cr3t-3",
                 "iceberg.catalog.a.key": "s3cr3t-4", "iceberg.catalog.a_key": "s3cr3t-5",
                 "iceberg.catalog.warehouse": "wh"}
    done = kafka_connect.convert("c", connector, bootstrap_servers="b:9092")
    assert done.env == {"FRAZIL_CATALOG_A_KEY": "iceberg.catalog.a.key",
                        "FRAZIL_CATALOG_A_KEY_2": "iceberg.catalog.a_key",
                        "FRAZIL_CATALOG_REST_AUTH_API_KEY": "iceberg.catalog.rest.auth.Api-KEY",
                        "FRAZIL_CATALOG_TOKEN": "iceberg.catalog.token", "FRAZIL_CATALOG_URI": "iceberg.catalog.uri"}
    text = done.toml + repr(done.not_carried)
    assert "s3cr3t" not in text
    assert tomllib.loads(done.toml)["catalog"]["properties"] == {
        "a.key_env": "FRAZIL_CATALOG_A_KEY", "a_key_env": "FRAZIL_CATALOG_A_KEY_2",
        "rest.auth.Api-KEY_env": "FRAZIL_CATALOG_REST_AUTH_API_KEY", "token_env": "FRAZIL_CATALOG_TOKEN",
        "type": "rest", "uri_env": "FRAZIL_CATALOG_URI", "warehouse": "wh"}


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("iceberg.control.commit.interval-ms", "5m", "milliseconds"),
    ("iceberg.control.commit.interval-ms", "0", "milliseconds"),
    ("iceberg.control.commit.timeout-ms", "30s", "milliseconds"),
    ("iceberg.control.commit.timeout-ms", "-1", "milliseconds"),
    ("tasks.max", "two", "tasks"),
    ("tasks.max", "", "tasks"),
])
def test_a_malformed_number_is_a_config_error_naming_the_setting(tmp_path: Path, key: str, value: str, expected: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    message = f"{key} = {value!r} is not a whole number of {expected} (1 or more)"
    connector = {"connector.class": kafka_connect.CONNECTOR_CLASSES[0], "topics": "t", "iceberg.tables": "db.t",
                 key: value}
    with pytest.raises(ConfigError) as raised:
        kafka_connect.convert("c", connector, bootstrap_servers="b:9092")
    assert str(raised.value) == message
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"name": "c", "config": connector}))
    assert cli.main(["import-kc", str(path), "--bootstrap-servers", "b:9092"]) == 2
    err = capsys.readouterr().err
    assert err == f"frazil: configuration error: {path}: {message}\n"


def test_an_oauthbearer_connector_becomes_frazils_oauth_keys_with_the_secret_in_the_environment() -> None:
    connector = {
        "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector", "topics": "orders",
        "iceberg.tables": "db.orders", "iceberg.catalog.type": "rest", "iceberg.catalog.uri": "http://rest:8181",
        "iceberg.kafka.security.protocol": "SASL_SSL", "iceberg.kafka.sasl.mechanism": "OAUTHBEARER",
        "iceberg.kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token",
        "iceberg.kafka.sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule '
                                          'required clientId="orders-sink" clientSecret="oauth-s3cret" scope="kafka";',
    }
    done = kafka_connect.convert("orders-sink", connector, bootstrap_servers="b:9093")
    kafka = tomllib.loads(done.toml)["kafka"]
    assert {k: v for k, v in kafka.items() if k.startswith("sasl_")} == {
        "sasl_mechanism": "OAUTHBEARER", "sasl_oauthbearer_client_id": "orders-sink",
        "sasl_oauthbearer_scope": "kafka", "sasl_oauthbearer_client_secret_env": "FRAZIL_KAFKA_OAUTH_CLIENT_SECRET",
        "sasl_oauthbearer_token_endpoint_url": "https://idp.example/oauth2/token"}
    assert "oauth-s3cret" not in done.toml and "FRAZIL_KAFKA_OAUTH_CLIENT_SECRET" in done.env
    assert "iceberg.kafka.sasl.oauthbearer.token.endpoint.url" in done.carried
