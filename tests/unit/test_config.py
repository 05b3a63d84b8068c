"""The config is validated once, and every error names the key and the fix."""

from pathlib import Path

import pytest

from frazil import config
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


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({k: v for k, v in MINIMAL.items() if k != "kafka"}, "missing section [kafka]"),
        (with_("pipeline", commit_interval_s=0), "pipeline.commit_interval_s must be greater than 0"),
        (with_("pipeline", commit_interval_s="5"), "pipeline.commit_interval_s must be float"),
        (with_("pipeline", colour="red"), "unknown key(s) colour in [pipeline]"),
        (with_("kafka", topics=[]), "kafka.topics must be a non-empty list"),
        (with_("kafka", auto_offset_reset="none"), "kafka.auto_offset_reset"),
        (with_("table", name="flat"), 'table.name \'flat\' must be "namespace.table"'),
        (with_("table", columns=[{"name": "x", "type": "varchar"}]), "table.columns[0].type has unknown type 'varchar'"),
        (with_("table", columns=[{"name": "_kafka_offset", "type": "long"}]), "reserved prefix _kafka_"),
        (with_("table", partition_by=["day(missing)"]), "not a partition transform on a declared column"),
        (with_("pipeline", on_bad_record="drop"), "on_bad_record 'drop' is not supported"),
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
