"""The wheel holds the product and nothing else: the ``frazil`` package as ``python/frazil`` has it,
the native module, and the dist-info. No test server, demo or workload (``dev/frazil_dev``), no
tests or benches.

The wheel is built here by maturin, the build backend itself, rather than predicted from its
include rules: what maturin adds or leaves out (``__pycache__``, the editable install's own
``_native*.so`` in the source tree, a future ``include``) is then what is checked. With the release
build that ``make build`` leaves in ``target/`` the Rust crate is not compiled again and the build
takes about 1.5 s; after a Rust change that was not built yet, it compiles it once, as ``make
build`` would."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "python" / "frazil"


@pytest.fixture(scope="session")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The names in a wheel built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    maturin = Path(sys.executable).parent / "maturin"   # from the dev extra, beside this interpreter
    done = subprocess.run([str(maturin), "build", "--release", "--quiet", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"maturin build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    wheels = list(out.glob("frazil-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as z:
        return z.namelist()


def product_files() -> set[str]:
    """What the wheel should carry of the source tree: every file of ``python/frazil`` but compiled
    bytecode and the native module built in place (the wheel brings its own)."""
    return {f"frazil/{path.relative_to(SOURCE).as_posix()}" for path in SOURCE.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".so")}


def test_the_wheel_carries_the_product_package_and_nothing_else(wheel_files: list[str]) -> None:
    dist_info = [n for n in wheel_files if n.split("/")[0].endswith(".dist-info")]
    package = {n for n in wheel_files if n.startswith("frazil/")}
    stray = set(wheel_files) - set(dist_info) - package
    assert not stray, f"outside the frazil package and its dist-info: {sorted(stray)}"
    native = {n for n in package if n.startswith("frazil/_native") and n.endswith(".so")}
    assert len(native) == 1, native
    assert package - native == product_files(), (
        f"in the wheel only: {sorted(package - native - product_files())}; "
        f"in python/frazil only: {sorted(product_files() - (package - native))}")


def test_no_development_file_reaches_the_wheel(wheel_files: list[str]) -> None:
    dev = [n for n in wheel_files
           if n.startswith(("frazil_dev/", "frazil/local/", "dev/", "tests/", "benches/"))
           or n in ("frazil/demo.py",) or "__pycache__" in n or n.endswith((".pyc", ".pth"))]
    assert not dev, dev


def test_the_typed_face_and_the_command_are_in_the_wheel(wheel_files: list[str]) -> None:
    wanted = {"frazil/py.typed", "frazil/_native.pyi", "frazil/cli/__init__.py", "frazil/cli/__main__.py",
              "frazil/spark/maven.py"}
    assert wanted <= set(wheel_files)
    assert any(n.endswith(".dist-info/entry_points.txt") for n in wheel_files)
