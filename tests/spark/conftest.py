"""One Spark session for the in-process Spark tests, on one SQLite catalog they share (tables
are per test), started again if a test stopped it. Spark is never skipped: if it cannot start,
these tests fail with the reason."""

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
def spark_settings(warehouse: CatalogConfig, catalog: Catalog) -> Iterator[dict[str, str]]:
    missing = session.available()
    assert missing is None, f"the Spark tests need Spark: {missing}"
    yield session.conf(CATALOG, warehouse.properties, jars=jars.jars(aws=True), master="local[2]",
                       extra={"spark.driver.memory": "1g"})
    session.stop()


@pytest.fixture
def spark(spark_settings: dict[str, str]) -> Any:
    """The process's Spark session (frazil.spark.session's), started once. A test that ran frazil
    in this process may have stopped it on its way out, as frazil does: then it starts again. It is
    made the JVM's default session too, which calls from other threads fall back on."""
    current = session.get(spark_settings)
    jsc = current.sparkContext._jsc   # None once PySpark stopped it
    if jsc is None or jsc.sc().isStopped():
        session.stop()
        current = session.get(spark_settings)
    current._jvm.org.apache.spark.sql.SparkSession.setDefaultSession(current._jsparkSession)
    return current
