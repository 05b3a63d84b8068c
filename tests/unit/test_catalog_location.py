"""A local catalog (SQLite file, warehouse folder) that this process may not write is a
configuration error naming the path (exit status 2), found before anything is created; it used to
be reported as an outage ("cannot be reached ... check that it is up", exit 4), which a systemd
unit restarts forever."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from frazil.config import CatalogConfig
from frazil.errors import ConfigError
from frazil.iceberg import catalog as iceberg_catalog


def local(tmp_path: Path) -> CatalogConfig:
    return CatalogConfig("frazil", {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat/catalog.db",
                                    "warehouse": f"file://{tmp_path}/wh"})


def test_a_catalog_folder_this_user_may_not_write_is_a_configuration_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cat").mkdir()
    real = os.access
    # root may write anywhere: the permission check is what is under test
    monkeypatch.setattr(iceberg_catalog.os, "access",
                        lambda path, mode: False if Path(path) == tmp_path / "cat" else real(path, mode))
    with pytest.raises(ConfigError, match=rf"properties.uri: {tmp_path}/cat is not writable by this user") as raised:
        iceberg_catalog.load(local(tmp_path))
    assert raised.value.exit_code == 2
    assert not (tmp_path / "cat" / "catalog.db").exists()


def test_a_warehouse_that_cannot_be_created_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "wh").write_text("a file where the folder should be")
    with pytest.raises(ConfigError, match=rf"properties.warehouse: cannot create {tmp_path}/wh"):
        iceberg_catalog.load(local(tmp_path))

