"""Sharing pyiceberg's table metadata instead of deep-copying it (``iceberg/pyiceberg_patches/metadata_copies.py``)
changes no result: against a real SQLite catalog, on a tested pyiceberg release."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table.update import SetPropertiesUpdate, update_table_metadata
from pyiceberg.types import LongType, NestedField, StringType

from frazil.iceberg import pyiceberg_patches
from frazil.iceberg.pyiceberg_patches import metadata_copies


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    pyiceberg_patches.install_all()
    assert metadata_copies.installed()
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    return catalog


def test_the_pyiceberg_version_is_the_one_whose_copies_were_checked() -> None:
    """An upgrade fails here: check again that metadata models are frozen, that updates build new
    containers, and that update_table_metadata is the only deep copy; then add the release to
    pyiceberg_patches.TESTED."""
    assert pyiceberg.__version__ in pyiceberg_patches.TESTED


def test_update_table_metadata_is_pyicebergs_only_deep_copy_of_metadata() -> None:
    root = Path(pyiceberg.__file__).parent
    sites = sorted(f"{p.relative_to(root)}" for p in root.rglob("*.py")
                   if re.search(r"model_copy\(deep=True\)", p.read_text()))
    assert sites == ["table/update/__init__.py"]


def test_shared_metadata_leaves_the_loaded_table_as_it_was_through_commits(catalog: Catalog) -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))
    table = catalog.create_table("db.t", schema)
    for i in range(3):
        table.append(pa.table({"id": [i], "s": [str(i)]}))
    base = catalog.load_table("db.t")
    before = base.metadata.model_dump_json()
    changed = update_table_metadata(base.metadata, (SetPropertiesUpdate(updates={"k": "v"}),))
    assert changed.properties["k"] == "v" and "k" not in base.metadata.properties
    tx = base.transaction()
    tx.set_properties({"a": "1"})
    with tx.update_schema() as update:
        update.add_column("extra", LongType())
    with tx.update_snapshot().fast_append():
        pass
    staged = tx.table_metadata
    assert staged.properties["a"] == "1" and len(staged.snapshots) == 4 and staged.schema().find_field("extra")
    assert base.metadata.model_dump_json() == before   # nothing shared was changed in place
    tx.commit_transaction()
    assert base.metadata.model_dump_json() != before   # the table object moved on to the new metadata...
    again = catalog.load_table("db.t")
    assert again.metadata.model_dump_json() == base.metadata.model_dump_json()   # ...the same as the catalog's
    assert again.scan().to_arrow().num_rows == 3 and again.properties["a"] == "1"
    with pytest.raises(Exception, match="frozen"):
        again.metadata.location = "elsewhere"   # type: ignore[misc]
