"""The gate of frazil's changes to pyiceberg internals (``iceberg/pyiceberg_patches``): one install
call, one set of tested releases, and a refusal to start on any other release. Every private
pyiceberg name frazil uses is inside the package."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

import pyiceberg
import pytest
from packaging.requirements import Requirement
from pyiceberg import serializers
from pyiceberg.manifest import ManifestListWriter, ManifestWriter
from pyiceberg.table import snapshots as pyiceberg_snapshots
from pyiceberg.table.metadata import TableMetadataV1, TableMetadataV2, TableMetadataV3

from frazil.config import CatalogConfig
from frazil.errors import FrazilError, UntestedPyiceberg
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import pyiceberg_patches
from frazil.iceberg.pyiceberg_patches import manifest_lists

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "python" / "frazil"
PACKAGE = PRODUCT / "iceberg" / "pyiceberg_patches"


def patched() -> tuple[Any, ...]:
    """The nine pyiceberg attributes the package reassigns, as they are now."""
    return (*(cls.__dict__.get("__deepcopy__") for cls in (TableMetadataV1, TableMetadataV2, TableMetadataV3)),
            serializers.FromInputFile.__dict__["table_metadata"].__func__,
            serializers.ToOutputFile.__dict__["table_metadata"].__func__,
            pyiceberg_snapshots._manifests,   # type: ignore[attr-defined]
            ManifestListWriter.__dict__["add_manifests"], ManifestListWriter.__dict__["__exit__"],
            ManifestWriter.__dict__["new_writer"])


def test_an_untested_pyiceberg_is_refused_with_the_release_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyiceberg, "__version__", "0.12.1")
    with pytest.raises(UntestedPyiceberg) as refused:
        pyiceberg_patches.install_all()
    message = str(refused.value)
    assert "pyiceberg 0.12.1 is installed" in message
    assert "tested those changes with pyiceberg 0.12.0 only" in message and "install pyiceberg==0.12.0" in message
    assert isinstance(refused.value, FrazilError) and not refused.value.retriable


def test_the_catalog_is_not_opened_on_an_untested_pyiceberg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The refusal comes before anything else ``catalog.load`` does: no folder is made."""
    monkeypatch.setattr(pyiceberg, "__version__", "0.13.0")
    cfg = CatalogConfig("t", {"type": "sql", "uri": f"sqlite:///{tmp_path}/c/c.db", "warehouse": f"file://{tmp_path}/wh"})
    with pytest.raises(UntestedPyiceberg, match="pyiceberg 0.13.0 is installed"):
        iceberg_catalog.load(cfg)
    assert list(tmp_path.iterdir()) == []


def test_install_all_is_idempotent() -> None:
    pyiceberg_patches.install_all()
    assert pyiceberg_patches.installed()
    first = patched()
    pyiceberg_patches.install_all()
    assert pyiceberg_patches.installed()
    assert all(a is b for a, b in zip(patched(), first, strict=True))
    assert manifest_lists._exit_original is not manifest_lists._exit   # never wraps itself


def test_the_tested_releases_are_inside_the_pin() -> None:
    """``TESTED`` names releases that ``pyproject.toml`` lets a user install."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(Requirement(d) for d in dependencies if Requirement(d).name == "pyiceberg")
    assert pyiceberg_patches.TESTED and all(pin.specifier.contains(release) for release in pyiceberg_patches.TESTED)


def private_pyiceberg_imports(source: str) -> list[int]:
    """The lines of ``source`` that import a private pyiceberg name or module."""
    def private(dotted: str) -> bool:
        return any(part.startswith("_") for part in dotted.split("."))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "pyiceberg":
            if private(node.module or "") or any(private(alias.name) for alias in node.names):
                found.append(node.lineno)
        elif isinstance(node, ast.Import):
            if any(alias.name.split(".")[0] == "pyiceberg" and private(alias.name) for alias in node.names):
                found.append(node.lineno)
    return found


def test_every_private_pyiceberg_import_is_inside_the_package() -> None:
    outside = {f"{path.relative_to(PRODUCT)}:{line}" for path in sorted(PRODUCT.rglob("*.py"))
               if PACKAGE not in path.parents for line in private_pyiceberg_imports(path.read_text())}
    assert outside == set()
    assert private_pyiceberg_imports("from pyiceberg.io.pyarrow import _dataframe_to_data_files, write_file") == [1]
    assert private_pyiceberg_imports("import pyiceberg.table._private\nfrom pyiceberg import schema") == [1]


def test_importing_the_patches_on_an_untested_release_is_the_refusal_not_an_import_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch modules import pyiceberg's private names when they load: the package checks the
    release before it imports them, so another release gets the refusal, not a traceback."""
    import importlib

    from frazil.iceberg import pyiceberg_patches

    monkeypatch.setattr(pyiceberg, "__version__", "0.13.0")
    with pytest.raises(UntestedPyiceberg, match="pyiceberg 0.13.0 is installed"):
        importlib.reload(pyiceberg_patches)
    monkeypatch.undo()
    importlib.reload(pyiceberg_patches)   # as it was, for the tests after this one
