"""``frazil config check`` says what a keyed table's Spark merge really does (spark/merge.py: due
every merge_interval_s when changes wait, or sooner once merge_min_changes wait; 0: the interval
alone), and where a table without declared columns takes them from."""

from __future__ import annotations

from pathlib import Path

import pytest

from frazil.cli import main

CONFIG = """[pipeline]
name = "items"

[kafka]
bootstrap_servers = "127.0.0.1:9092"
topics = ["items"]

[table]
name = "shop.items"
mode = "upsert"
identifier_columns = ["id"]
columns = [{ name = "id", type = "long", required = true }, { name = "name", type = "string" }]
merge = "spark"
merge_interval_s = 5
"""


@pytest.mark.parametrize(("changes", "said"), [
    (0, "merged by Spark into shop.items every 5s when changes wait\n"),
    (2000, "merged by Spark into shop.items every 5s when changes wait, or sooner once 2000 changes wait\n"),
])
def test_a_spark_merge_is_described_as_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: int,
                                               said: str) -> None:
    path = tmp_path / "frazil.toml"
    path.write_text(CONFIG + f"merge_min_changes = {changes}\n")
    assert main(["config", "check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert said in out and "or 0 changes" not in out, out


DYNAMIC = """[pipeline]
name = "pg"

[kafka]
bootstrap_servers = "127.0.0.1:9092"
topic_pattern = "pg\\\\.public\\\\..*"

[dynamic]
table = "{topic[1]}.{topic[2]}"
"""


@pytest.mark.parametrize(("extra", "said"), [
    ("", "columns inferred from the first records"),
    ('mode = "cdc"\nidentifier_columns = ["id"]\n', "columns from the first record's Kafka Connect schema envelope"),
    ('mode = "cdc"\nidentifier_columns = ["id"]\n[values]\nformat = "avro-confluent"\n[schema_registry]\n'
     'url = "http://127.0.0.1:8081"\n', "columns from the first record's writer schema"),
])
def test_where_undeclared_columns_come_from_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str,
                                                    said: str) -> None:
    path = tmp_path / "frazil.toml"
    path.write_text(DYNAMIC + extra)
    assert main(["config", "check", "--config", str(path)]) == 0
    assert said in capsys.readouterr().out
