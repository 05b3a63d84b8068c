"""The ingest path's own catalog calls (a schema change, a table opened on its first records) wait
out a catalog that cannot be reached, for up to ``outage_timeout_s`` (two minutes at most: the
loop does not poll meanwhile), then stop with exit status 4; an answer that refuses the call is
raised at once. Before, a PostgreSQL catalog restarting under a schema change ended the process
with a traceback (exit 1) that no service manager restarts as an outage. The schema-change case
runs on a real SQLite catalog held locked by another connection; no broker."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy.exc
from pyiceberg.exceptions import (
    BadRequestError,
    CommitStateUnknownException,
    ForbiddenError,
    NoSuchTableError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
)

import support
from frazil.buffers.positions import Takers
from frazil.buffers.state import Buffers
from frazil.buffers.targets import Targets
from frazil.errors import CatalogUnavailable, EvolutionError, SchemaRegistryError
from frazil.flow import retry
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import catalog_errors
from frazil.ingest.evolve import Evolver
from frazil.ingest.formats import ValueFormats
from frazil.kafka.fetch import Record
from frazil.metrics import Metrics

TABLE = "db.events"


async def _no_sleep(_: float) -> None:
    return None


def test_an_outage_is_waited_out_and_the_call_made_once_it_is_over() -> None:
    calls = []

    async def op() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError("connection refused")
        return "done"

    assert asyncio.run(retry.catalog_wait(op, what="x", timeout_s=60, outage=catalog_errors.outage,
                                          sleep=_no_sleep)) == "done"
    assert len(calls) == 3


# outage_timeout_s, the clock's step per failed call, what the error says: the ingest path waits
# outage_timeout_s, but two minutes at most whatever it says
@pytest.mark.parametrize(("timeout_s", "step", "said"), [(60, 40, "for 80s .*waits 60s at most"),
                                                         (900, 50, "for 150s .*waits 120s at most")])
def test_an_outage_longer_than_the_wait_stops_with_catalog_unavailable(timeout_s: float, step: float,
                                                                       said: str) -> None:
    now = [0.0]

    async def op() -> None:
        now[0] += step
        raise OSError("connection refused")

    with pytest.raises(CatalogUnavailable, match=f"table t: cannot open {said}.*refused"):
        asyncio.run(retry.catalog_wait(op, what="table t: cannot open", timeout_s=timeout_s,
                                       outage=catalog_errors.outage, clock=lambda: now[0], sleep=_no_sleep))


OUTAGES = [ConnectionRefusedError("refused"), TimeoutError("timed out"), sqlite3.OperationalError("database is locked"),
           sqlalchemy.exc.OperationalError("SELECT", {}, Exception("terminating connection")),
           ServerError("500"), ServiceUnavailableError("503"), TooManyRequestsError("429"),
           CommitStateUnknownException("lost"), CatalogUnavailable("down")]
REFUSALS = [NoSuchTableError("x"), BadRequestError("400"), ForbiddenError("403"), FileNotFoundError("gone"),
            PermissionError("denied"), SchemaRegistryError("registry down"), EvolutionError("not allowed"),
            ValueError("bad argument"), KeyError("x"), RuntimeError("a bug")]


@pytest.mark.parametrize("error", OUTAGES, ids=lambda e: type(e).__name__)
def test_what_may_be_the_catalog_down_for_now_is_an_outage(error: Exception) -> None:
    assert catalog_errors.outage(error)


@pytest.mark.parametrize("error", REFUSALS, ids=lambda e: type(e).__name__)
def test_an_answer_a_missing_file_or_an_error_of_the_call_is_not(error: Exception) -> None:
    assert not catalog_errors.outage(error)


@pytest.mark.parametrize("error", REFUSALS, ids=lambda e: type(e).__name__)
def test_a_refusal_is_raised_at_once(error: Exception) -> None:
    calls = []

    async def op() -> None:
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        asyncio.run(retry.catalog_wait(op, what="x", timeout_s=60, outage=catalog_errors.outage, sleep=_no_sleep))
    assert len(calls) == 1


def test_a_schema_change_waits_for_a_locked_catalog_and_lands(tmp_path: Path) -> None:
    path = support.write_config(tmp_path, "127.0.0.1:1", ["t"], extra="")
    path.write_text(path.read_text().replace(f'name = "{TABLE}"\n', f'name = "{TABLE}"\nunknown_fields = "evolve"\n'))
    cfg = support.load(path)
    catalog = iceberg_catalog.load(cfg.catalog, busy_timeout_s=0.2)
    database = Path(str(cfg.catalog.properties["uri"]).removeprefix("sqlite:///"))
    try:
        table = iceberg_catalog.ensure_table(catalog, cfg.table, {})
        buffers = Buffers(Targets(cfg, catalog, {TABLE: table}, takers=lambda topic: Takers((TABLE,))))
        target = buffers.targets[TABLE]
        records = [Record("t", 0, i, 1_700_000_000_000, None, json.dumps({"id": i, "x1": f"v{i}"}).encode(), ())
                   for i in range(3)]
        errors = target.buffer.append("t", 0, records)
        assert [e.field for e in errors] == ["x1"] * 3
        holder = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN EXCLUSIVE")   # another process holds the catalog: every statement fails busy
        released = threading.Timer(1.5, holder.execute, args=("ROLLBACK",))
        released.start()
        started = time.monotonic()
        evolver = Evolver(cfg, buffers, Metrics(cfg.pipeline, TABLE), ValueFormats(cfg.values))
        still = asyncio.run(evolver.rescue(TABLE, ("t", 0), records, errors, target.buffer))
        released.join()
        holder.close()
        assert time.monotonic() - started >= 1.4   # it did wait for the lock, not pass it by
        assert still == []
        assert "x1" in [f.name for f in catalog.load_table(TABLE).schema().fields]
        drained = buffers.targets[TABLE].buffer.drain()
        assert drained is not None and drained.column("x1").to_pylist() == ["v0", "v1", "v2"]
    finally:
        support.close_catalog(catalog)
