"""The product never imports the development package: ``dev/frazil_dev`` (test servers, the demo,
the sample workload) is not in the wheel, so an import of it from ``python/frazil`` would work in
this checkout and fail for every user."""

from __future__ import annotations

import ast
from pathlib import Path

PRODUCT = Path(__file__).resolve().parents[2] / "python" / "frazil"
DEV = "frazil_dev"


def dev_imports(source: str) -> list[int]:
    """The lines of ``source`` that import ``frazil_dev``: ``import``, ``from ... import`` (at any
    depth, lazy ones included) and ``importlib.import_module``/``__import__`` with a literal name."""
    def is_dev(name: str | None) -> bool:
        return name is not None and (name == DEV or name.startswith(DEV + "."))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            hit = any(is_dev(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            hit = node.level == 0 and is_dev(node.module)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            hit = (name in ("import_module", "__import__") and bool(node.args)
                   and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                   and is_dev(node.args[0].value))
        else:
            continue
        if hit:
            found.append(node.lineno)
    return found


def test_no_module_of_the_product_imports_the_development_package() -> None:
    sources = sorted([*PRODUCT.rglob("*.py"), *PRODUCT.rglob("*.pyi")])
    assert len(sources) > 50, f"found only {len(sources)} sources under {PRODUCT}"
    offending = [f"{path.relative_to(PRODUCT.parent)}:{line}"
                 for path in sources for line in dev_imports(path.read_text())]
    assert not offending, f"the product imports {DEV}, which is not in the wheel: {offending}"


def test_the_scan_finds_every_form_of_import_and_nothing_else() -> None:
    source = '''
"""Mentions frazil_dev in a docstring."""
import frazil_dev
import os, frazil_dev.kafka_broker as broker
from frazil_dev import demo
from frazil_dev.workload import produce
import frazil_development
from frazil import frazil_dev_like
from .frazil_dev import relative

def lazy():
    from frazil_dev.kafka_broker import KafkaBroker
    importlib.import_module("frazil_dev.demo")
    __import__("frazil_dev")
    importlib.import_module("frazil.config")
'''
    assert dev_imports(source) == [3, 4, 5, 6, 12, 13, 14]
