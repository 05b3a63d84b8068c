"""Tables opened while the pipeline runs: a table named by the records (``[dynamic]``), or a
configured one without declared columns that does not exist yet, is loaded or created on the
first records that go there (with the configured columns, or a schema inferred from them)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pyiceberg.catalog import Catalog

from frazil.buffers.state import Buffers
from frazil.config import Config, TableConfig
from frazil.errors import ConfigError, InferenceError, RecordDecodeError
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import inference
from frazil.iceberg.offsets import TopicPartition

log = logging.getLogger(__name__)


class Opener:
    def __init__(self, cfg: Config, catalog: Catalog, buffers: Buffers, *,
                 on_new_table: Callable[[str], None] | None = None) -> None:
        """``on_new_table``: told each table opened (maintenance takes it on)."""
        self._cfg, self._catalog, self._targets = cfg, catalog, buffers.targets
        self._on_new_table = on_new_table

    def _config(self, name: str) -> TableConfig:
        try:
            return self._cfg.table_named(name)   # a configured table created on its first records
        except KeyError:
            assert self._cfg.dynamic is not None
            return self._cfg.dynamic.table_config(name)

    async def open(self, name: str, tp: TopicPartition, offset: int, sample: list[bytes]) -> None:
        """Open table ``name`` for the records of ``tp`` from ``offset`` on that go there
        (``sample``: their values, for an inferred schema). When it cannot be had, the record at
        ``offset`` is a bad record (RecordDecodeError)."""
        table_cfg = self._config(name)
        inferred = None if table_cfg.columns else (lambda: inference.schema(
            inference.infer(sample, maps=table_cfg.maps),
            iceberg_catalog.META_COLUMNS if table_cfg.metadata_columns else ()))
        try:
            table = await asyncio.to_thread(iceberg_catalog.ensure_table, self._catalog, table_cfg,
                                            iceberg_catalog.maintenance_properties(self._cfg.maintenance),
                                            schema=inferred)
            target = await asyncio.to_thread(self._targets.build, table_cfg, table, inferred=inferred is not None)
            self._targets.add_built(target)   # on the loop: worker threads iterate over copies
        except (ConfigError, InferenceError) as exc:
            raise RecordDecodeError(topic=tp[0], partition=tp[1], offset=offset, field="",
                                    reason=f"it goes to table {name}, which cannot be opened: {exc}") from exc
        log.info("table %s: taking the records that name it (%d columns%s)", name, len(table.schema().fields),
                 ", schema inferred from the first ones: a field it does not have is a bad record" if inferred else "")
        if self._on_new_table is not None:
            self._on_new_table(name)
