"""Where benchmark figures go: ``benches/results/<name>.json`` as ``{"rows": [...], ...}``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def write(name: str, rows: list[dict[str, Any]], **extra: Any) -> Path:
    path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows, **extra}, indent=2) + "\n")
    print(f"wrote {path}")
    return path
