"""A table's layout, its partition spec and sort order, as the config says them (``partition_by``,
``sort_order``): made for a new table, and kept for an existing one. A difference from an existing
table is applied at start as Iceberg partition-spec and sort-order evolution: metadata only, the
files already written keep the spec and order they were written with and new ones take the new
(every engine reads both). A config that leaves either out leaves the table's own as it is: an
existing table's layout is never dropped by omission. :func:`plan` decides (pure), :func:`keep`
commits."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import PartitionField as IcebergPartitionField
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.types import IcebergType, NestedField, StructType

from frazil.config import PartitionField, TableConfig
from frazil.errors import ConfigError, FrazilError

log = logging.getLogger(__name__)

ATTEMPTS = 5   # processes starting together race on the change; the loser plans again


def sort_order_for(schema: Schema, sort_order: str) -> SortOrder:
    """``"event_time DESC, user_id NULLS FIRST"`` as an Iceberg sort order (identity transforms)."""
    fields = []
    for term in filter(None, (t.strip() for t in sort_order.split(","))):
        words = term.upper().split()
        column = schema.find_field(term.split()[0])
        direction = SortDirection.DESC if "DESC" in words else SortDirection.ASC
        nulls = (NullOrder.NULLS_LAST if "LAST" in words else NullOrder.NULLS_FIRST if "FIRST" in words
                 else NullOrder.NULLS_FIRST if direction is SortDirection.ASC else NullOrder.NULLS_LAST)
        fields.append(SortField(source_id=column.field_id, transform=IdentityTransform(), direction=direction,
                                null_order=nulls))
    return SortOrder(*fields) if fields else UNSORTED_SORT_ORDER


def _transform(field: PartitionField) -> Transform:  # type: ignore[type-arg]
    simple: dict[str, Transform] = {  # type: ignore[type-arg]
        "identity": IdentityTransform(), "year": YearTransform(), "month": MonthTransform(),
        "day": DayTransform(), "hour": HourTransform()}
    if field.transform in simple:
        return simple[field.transform]
    assert field.width is not None   # bucket[N] and truncate[W]: the config checked N and W
    return BucketTransform(field.width) if field.transform == "bucket" else TruncateTransform(field.width)


def _source_type(schema: Schema, source: str) -> IcebergType | None:
    """The type of partition source ``source``: a top-level column, or a field nested in struct
    columns by its dotted path (never inside a list or a map: one row holds many of those)."""
    fields: tuple[NestedField, ...] = tuple(schema.fields)
    found: IcebergType | None = None
    for step in source.split("."):
        if found is not None:
            if not isinstance(found, StructType):
                return None
            fields = tuple(found.fields)
        field = next((f for f in fields if f.name == step), None)
        if field is None:
            return None
        found = field.field_type
    return found


def check_spec_fits(schema: Schema, partition_by: tuple[PartitionField, ...], table: str) -> None:
    """Each partition transform names a primitive column, or a primitive field nested in struct
    columns, of a type it applies to (for a schema inferred from records, where the config could
    not check it)."""
    for field in partition_by:
        column_type = _source_type(schema, field.source)
        if column_type is None or not column_type.is_primitive:
            raise ConfigError(f"{table}: partition_by entry {str(field)!r} needs a column (or a field nested in "
                              f"struct columns) {field.source!r} of a primitive type; the table would have "
                              f"{', '.join(f.name for f in schema.fields)}")
        if not field.applies_to(str(column_type)):
            raise ConfigError(f"{table}: partition_by entry {str(field)!r}: {field.transform}() does not apply to "
                              f"{field.source!r}, a {column_type} column; it takes {', '.join(field.takes)}")


def partition_name(field: PartitionField) -> str:
    """A partition field's name: its source's (``meta.at`` as ``meta_at``), with the transform
    after it but for identity (``meta_at_day``)."""
    base = field.source.replace(".", "_")
    return base if field.transform == "identity" else f"{base}_{field.transform}"


def spec_for(schema: Schema, partition_by: tuple[PartitionField, ...]) -> PartitionSpec:
    fields = []
    for i, field in enumerate(partition_by):
        source = schema.find_field(field.source)
        name = partition_name(field)
        fields.append(IcebergPartitionField(source.field_id, 1000 + i, _transform(field), name))
    return PartitionSpec(*fields)


@dataclass(frozen=True)
class Layout:
    """What keeping ``cfg``'s layout changes in a table: nothing when false."""

    partitions_from: tuple[str, ...]
    partitions_to: tuple[str, ...]
    remove: tuple[str, ...]                 # the table's partition fields (by name) the config drops
    add: tuple[PartitionField, ...]         # the config's fields the table lacks
    sort_from: str
    sort_to: str
    sort: SortOrder | None                  # the new sort order; None: unchanged

    def __bool__(self) -> bool:
        return bool(self.remove or self.add or self.sort is not None)

    def describe(self) -> str:
        said = []
        if self.remove or self.add:
            said.append(f"partition spec [{', '.join(self.partitions_from)}] -> [{', '.join(self.partitions_to)}]")
        if self.sort is not None:
            said.append(f"sort order [{self.sort_from}] -> [{self.sort_to}]")
        return "; ".join(said)


def _spec_terms(spec: PartitionSpec) -> list[tuple[int, str, str]]:
    """(source id, transform, partition field name) of each of ``spec``'s fields that partitions
    (a format-1 table keeps a removed field as ``void``, which does not)."""
    return [(f.source_id, str(f.transform), f.name) for f in spec.fields if not isinstance(f.transform, VoidTransform)]


def _term(source: str, transform: str) -> str:
    return source if transform == "identity" else f"{transform}({source})"


def _sort_text(order: SortOrder, schema: Schema) -> str:
    return ", ".join(f"{schema.find_column_name(f.source_id)} {f.direction.name} {f.null_order.name.replace('_', ' ')}"
                     for f in order.fields)


def plan(table: Table, cfg: TableConfig) -> Layout:
    """Pure (of the table as loaded): what keeping ``cfg``'s ``partition_by`` and ``sort_order``
    changes. An empty ``partition_by`` or ``sort_order`` asks for nothing; a partition field the
    table has in another order is not a change. ConfigError when a field cannot apply to the
    table's columns."""
    schema = table.schema()
    have = _spec_terms(table.spec())
    named = [_term(schema.find_column_name(i) or str(i), t) for i, t, _ in have]
    remove: tuple[str, ...] = ()
    add: tuple[PartitionField, ...] = ()
    wanted_terms = named
    if cfg.partition_by:
        check_spec_fits(schema, cfg.partition_by, cfg.name)
        wanted = [(schema.find_field(f.source).field_id, str(_transform(f)), f) for f in cfg.partition_by]
        wanted_keys = {(i, t) for i, t, _ in wanted}
        have_keys = {(i, t) for i, t, _ in have}
        remove = tuple(name for i, t, name in have if (i, t) not in wanted_keys)
        add = tuple(f for i, t, f in wanted if (i, t) not in have_keys)
        wanted_terms = [_term(f.source, str(_transform(f))) for f in cfg.partition_by]
    sort: SortOrder | None = None
    current = table.sort_order()
    if cfg.sort_order.strip():
        try:
            order = sort_order_for(schema, cfg.sort_order)
        except ValueError as exc:
            raise ConfigError(f"{cfg.name}: sort_order {cfg.sort_order!r}: {exc}") from None
        if [(f.source_id, str(f.transform), f.direction, f.null_order) for f in order.fields] != [
                (f.source_id, str(f.transform), f.direction, f.null_order) for f in current.fields]:
            sort = order
    return Layout(tuple(named), tuple(wanted_terms), remove, add,
                  _sort_text(current, schema) or "unsorted", _sort_text(sort, schema) if sort is not None else "", sort)


def keep(load: Callable[[], Table], cfg: TableConfig) -> Table:
    """Blocking. The table with ``cfg``'s layout (:func:`plan`), changed in one commit when it
    differs, logged; planned again when another process changed it meanwhile."""
    last: Exception | None = None
    for _ in range(ATTEMPTS):
        table = load()
        change = plan(table, cfg)
        if not change:
            return table
        try:
            with table.transaction() as tx:
                if change.remove or change.add:
                    with tx.update_spec() as spec:
                        for name in change.remove:
                            spec.remove_field(name)
                        taken = {f.name for f in table.spec().fields}   # a name a field keeps is not reused
                        for field in change.add:
                            name = partition_name(field)
                            spec.add_field(field.source, _transform(field), name if name not in taken else None)
                if change.sort is not None:
                    with tx.update_sort_order() as order:
                        for f in change.sort.fields:
                            column = table.schema().find_column_name(f.source_id) or ""
                            (order.asc if f.direction is SortDirection.ASC else order.desc)(
                                column, f.transform, f.null_order)
        except CommitFailedException as exc:
            last = exc
            continue
        except ValueError as exc:   # a change Iceberg does not allow
            raise ConfigError(f"table {cfg.name}: cannot change its layout ({change.describe()}): {exc}; make "
                              "partition_by and sort_order say what the table has") from None
        table = load()
        log.warning("table %s: layout evolved to the config's: %s (files already written keep theirs; spec id %d, "
                    "sort order id %d)", cfg.name, change.describe(), table.spec().spec_id,
                    table.sort_order().order_id)
        return table
    raise FrazilError(f"table {cfg.name}: its layout kept changing under other writers ({last}); tried {ATTEMPTS} "
                      "times")
