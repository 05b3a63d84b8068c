"""A catalog that stops answering while `frazil run` opens its tables (found by make chaos, seed
215986939: a SQLite lock taken between the catalog's load and the tables' load ended a starting
process with a traceback and exit status 1). It is CatalogUnavailable: one line, exit status 4,
nothing read, as when the catalog cannot be loaded at all. A real SQLite catalog, locked by a
second connection right after the daemon loaded it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import support
from frazil import daemon
from frazil.errors import CatalogUnavailable
from frazil.iceberg import catalog as iceberg_catalog

pytestmark = [pytest.mark.integration]


def test_a_catalog_locked_while_the_daemon_opens_its_tables_stops_it_with_catalog_unavailable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = support.load(support.write_config(tmp_path, "127.0.0.1:9", ["events"]))   # Kafka is not reached
    real_load = iceberg_catalog.load
    locks: list[sqlite3.Connection] = []

    def load_then_lock(catalog_cfg: Any, **kwargs: Any) -> Any:
        catalog = real_load(catalog_cfg, **kwargs)
        (db,) = tmp_path.rglob("catalog.db")
        conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)   # load runs on a worker thread
        conn.execute("BEGIN EXCLUSIVE")
        locks.append(conn)
        return catalog

    monkeypatch.setattr(iceberg_catalog, "load", load_then_lock)
    try:
        with pytest.raises(CatalogUnavailable, match=r"did not answer while the tables were opened: "
                                                     r"OperationalError: .*database is locked") as raised:
            asyncio.run(daemon.open_tables(cfg))
    finally:
        for conn in locks:
            conn.execute("ROLLBACK")
            conn.close()
    assert raised.value.exit_code == 4 and "\n" not in str(raised.value)
    # once the lock is gone the same start opens the table
    monkeypatch.setattr(iceberg_catalog, "load", real_load)
    catalog, tables = asyncio.run(daemon.open_tables(cfg))
    assert list(tables) == [cfg.table.name]
    support.close_catalog(catalog)
