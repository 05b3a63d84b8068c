"""Start-up stays light (``make bench-startup``, docs/benchmarks.md "Start-up"): the libraries a
command may not need are imported by the functions that use them, so ``import frazil.daemon``, the
``frazil`` command line (``--help``, ``txlog``) and a REST catalog's start do not pay for them.
Each import is made in a fresh interpreter: this test process has loaded them all long ago."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError

from frazil import cli
from frazil.config import CatalogConfig
from frazil.errors import ConfigError
from frazil.iceberg import catalog as iceberg_catalog

ICEBERG_ARROW_SQL = ("pyiceberg", "pyarrow", "numpy", "sqlalchemy")


def loaded_after(statement: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after running ``statement`` (the last line it prints)."""
    code = f"import sys\n{statement}\nprint(*[m for m in {modules!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[-1].split()


@pytest.mark.parametrize(("statement", "heavy"), [
    # the daemon's module: the run's parts load as the run starts
    ("import frazil.daemon", (*ICEBERG_ARROW_SQL, "prometheus_client", "aiokafka", "pydantic", "uvloop")),
    # the command line: each command loads the config and what it needs when it runs
    ("import frazil.cli", (*ICEBERG_ARROW_SQL, "aiokafka", "pydantic")),
    # the catalog's module: SQLAlchemy comes with a SQL catalog, not with a REST one
    ("import frazil.iceberg.catalog", ("sqlalchemy",)),
])
def test_importing_loads_no_library_the_module_itself_does_not_run(statement: str, heavy: tuple[str, ...]) -> None:
    assert loaded_after(statement, heavy) == []


def test_help_answers_without_loading_them() -> None:
    heavy = (*ICEBERG_ARROW_SQL, "aiokafka", "pydantic", "importlib.metadata")
    statement = "from frazil.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert loaded_after(statement, heavy) == []


def test_a_kafka_error_a_command_raises_is_still_one_line_and_exit_status_3(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def txlog(_args: object) -> int:
        raise KafkaConnectionError("the brokers went away")

    monkeypatch.setattr(cli.inspection, "txlog", txlog)
    assert cli.main(["txlog", "--dir", "."]) == 3
    assert capsys.readouterr().err == ("frazil: KafkaUnavailable: Kafka: KafkaConnectionError: "
                                       "KafkaConnectionError: the brokers went away\n")


def test_any_other_error_a_command_raises_is_not_taken_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def txlog(_args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli.inspection, "txlog", txlog)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["txlog", "--dir", "."])


def test_a_sql_catalog_uri_sqlalchemy_cannot_parse_is_still_a_configuration_error(tmp_path: Path) -> None:
    cfg = CatalogConfig(name="c", properties={"type": "sql", "uri": "not a database url",
                                              "warehouse": f"file://{tmp_path}"})
    with pytest.raises(ConfigError, match=r"catalog c \(sql not a database url\) cannot be loaded: .*parse"):
        iceberg_catalog.load(cfg)
