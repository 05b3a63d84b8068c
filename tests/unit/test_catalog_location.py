"""A local catalog (SQLite file, warehouse folder) that this process may not write is a
configuration error naming the path (exit status 2), found before anything is created; it used to
be reported as an outage ("cannot be reached ... check that it is up", exit 4), which a systemd
unit restarts forever."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from frazil.config import CatalogConfig
from frazil.errors import CatalogUnavailable, ConfigError
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



def test_an_aws_catalog_without_a_region_is_a_configuration_error_naming_the_property(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3 finds no region: set-up to fix, not an outage to wait out."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match=r"catalog g \(glue\) cannot be used: You must specify a region; set "
                                          r"catalog.properties \"client.region\"") as raised:
        iceberg_catalog.load(CatalogConfig("g", {"type": "glue"}))
    assert raised.value.exit_code == 2


def test_a_catalog_whose_client_library_is_missing_is_a_configuration_error_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The library went missing after config check (or check was skipped): exit 2 naming the
    extra, not exit 4 "cannot be reached"."""
    import sys

    monkeypatch.setitem(sys.modules, "pyiceberg.catalog.hive", None)   # import fails as it does without thrift
    with pytest.raises(ConfigError, match=re.escape("catalog h (hive thrift://h:9083) cannot be loaded: the client "
                                                    "library of its type is not installed; pip install "
                                                    "'frazil[hive]'")) as raised:
        iceberg_catalog.load(CatalogConfig("h", {"type": "hive", "uri": "thrift://h:9083"}))
    assert raised.value.exit_code == 2


def test_an_aws_catalog_without_credentials_says_what_to_set_when_the_tables_are_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3 looks for credentials at the first call, not when the catalog is loaded: opening the
    tables says what to set. Exit 4, as for an outage: an instance role's endpoint that did not
    answer for a moment looks the same, and the unit starts frazil again. No request is sent:
    signing fails first."""
    import asyncio

    from frazil import config
    from frazil.daemon import open_tables

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")   # no instance role probe
    cfg = config.parse({"pipeline": {"name": "p"}, "kafka": {"bootstrap_servers": "k:9092", "topics": ["t"]},
                        "table": {"name": "db.t", "columns": [{"name": "id", "type": "long"}]},
                        "maintenance": {"enabled": False},
                        "catalog": {"name": "g", "properties": {"type": "glue", "client.region": "eu-west-1",
                                                                "glue.endpoint": "http://127.0.0.1:9"}}})
    with pytest.raises(CatalogUnavailable, match=r"catalog g \(glue\) cannot be used: Unable to locate credentials; "
                                                 r"set catalog.properties \"client.region\"") as raised:
        asyncio.run(open_tables(cfg))
    assert raised.value.exit_code == 4
