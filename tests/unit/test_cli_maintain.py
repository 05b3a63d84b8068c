"""``frazil maintain`` and ``compact`` choose their tables before Spark starts: every table of the
pipeline that exists, or the one ``--table`` names; an unknown name is exit 5 naming the tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from frazil import config
from frazil.cli import main
from frazil.iceberg import catalog as iceberg_catalog


def write(tmp_path: Path) -> Path:
    path = tmp_path / "frazil.toml"
    path.write_text(f"""[pipeline]
name = "p"
txlog_dir = "{tmp_path / 'txlog'}"

[kafka]
bootstrap_servers = "127.0.0.1:9"
topics = ["t"]

[catalog]
properties = {{ uri = "sqlite:///{tmp_path / 'catalog.db'}", warehouse = "file://{tmp_path / 'warehouse'}" }}

[[tables]]
name = "db.a"
columns = [{{ name = "id", type = "long" }}]

[[tables]]
name = "db.b"
columns = [{{ name = "id", type = "long" }}]
""")
    return path


@pytest.mark.parametrize("command", ["maintain", "compact"])
def test_a_table_the_pipeline_does_not_have_is_exit_5_naming_those_it_has(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    path = write(tmp_path)
    assert main([command, "--config", str(path), "--table", "db.nope"]) == 5
    err = capsys.readouterr().err
    assert "--table db.nope" in err and "db.a, db.b" in err, err
    assert main([command, "--config", str(path), "--table", "db.a"]) == 5
    assert "not created yet" in capsys.readouterr().err


def test_with_no_table_created_yet_there_is_nothing_to_maintain_and_spark_is_not_started(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    assert main(["maintain", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "table db.a: not created yet" in out and "table db.b: not created yet" in out and "no table yet" in out
    iceberg_catalog.ensure_table(iceberg_catalog.load(config.load(path).catalog), config.load(path).tables[1])
    assert main(["compact", "--config", str(path), "--table", "db.a"]) == 5   # db.b exists; db.a still does not
