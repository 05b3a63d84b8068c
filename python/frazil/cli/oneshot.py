"""What the one-shot commands share: a catalog that answers at once or fails in one line (exit 4),
and a Kafka client whose own connection errors reach the user as one line of ours."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from frazil.errors import CatalogUnavailable, FrazilError, NotFound

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from frazil import config as config_mod

T = TypeVar("T")
CATALOG_WAIT_S = 2.0   # one-shot commands: how long a locked SQLite catalog is waited for per statement


def load_catalog(cfg: config_mod.Config) -> Catalog:
    """The catalog, tried once, waiting at most ``CATALOG_WAIT_S`` for a locked SQLite catalog."""
    from frazil.iceberg import catalog as iceberg_catalog

    return iceberg_catalog.load(cfg.catalog, attempts=1, busy_timeout_s=CATALOG_WAIT_S)


def catalog_call(cfg: config_mod.Config, call: Callable[[], T]) -> T:
    """A read from the catalog in a command: a catalog that cannot answer is one line, exit 4."""
    from pyiceberg.exceptions import NoSuchTableError

    from frazil.iceberg.catalog_errors import aws_setup_error, aws_setup_missing, describe, unserved_call

    try:
        return call()
    except NoSuchTableError as exc:
        raise NotFound(f"{exc}; `frazil run` creates the configured tables on start") from None
    except FrazilError:
        raise
    except aws_setup_missing() as exc:   # set-up to fix, not an outage
        raise aws_setup_error(cfg.catalog, exc) from None
    except Exception as exc:  # noqa: BLE001 - locked, down, refused: say so in one line
        unserved = unserved_call(cfg.catalog, exc)
        if unserved is not None:
            raise unserved from None
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise CatalogUnavailable(f"catalog {cfg.catalog.name} ({describe(cfg.catalog)}) did not answer: "
                                 f"{type(exc).__name__}: {first}") from None


def pipeline_tables(cfg: config_mod.Config, catalog: Catalog, *,
                    merge_targets: bool = False) -> dict[str, Table | None]:
    """The pipeline's tables (``status.table_names``: configured, then ``[dynamic]``-created), each
    loaded, or None when not created yet."""
    from frazil import status

    names = catalog_call(cfg, partial(status.table_names, catalog, cfg, merge_targets=merge_targets))
    return catalog_call(cfg, partial(status.load_tables, catalog, names))


def quiet_kafka_client() -> None:
    """For one-shot commands: aiokafka's own connection errors reach the user as one line of ours
    (``kafka_clients.connect`` keeps the reason), not as log lines before it."""
    quiet = logging.getLogger("aiokafka")
    quiet.propagate = False
    if not any(isinstance(h, logging.NullHandler) for h in quiet.handlers):
        quiet.addHandler(logging.NullHandler())   # else Python's last-resort handler prints them raw


def dash(value: object) -> str:
    return "-" if value is None else str(value)
