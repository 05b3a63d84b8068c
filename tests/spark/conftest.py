"""One Spark session for the in-process Spark tests, on one SQLite catalog they share (tables
are per test). Spark is never skipped: if it cannot start, these tests fail with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog

from frazil.config import CatalogConfig
from frazil.iceberg import catalog as iceberg_catalog
from frazil.spark import jars, session

CATALOG = "lake"


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> CatalogConfig:
    root = Path(tmp_path_factory.mktemp("spark-warehouse"))
    return CatalogConfig(CATALOG, {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}"})


@pytest.fixture(scope="session")
def catalog(warehouse: CatalogConfig) -> Catalog:
    return iceberg_catalog.load(warehouse)


@pytest.fixture(scope="session")
def spark(warehouse: CatalogConfig, catalog: Catalog) -> Iterator[Any]:
    missing = session.available()
    assert missing is None, f"the Spark tests need Spark: {missing}"
    settings = session.conf(CATALOG, warehouse.properties, jars=jars.jars(aws=True), master="local[2]",
                            extra={"spark.driver.memory": "1g"})
    yield session.get(settings)
    session.stop()
