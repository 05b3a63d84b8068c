"""Puts ``dev/`` on the path, so that a benchmark run as ``python benches/<name>.py`` (or started by
one, with ``benches/`` on its ``PYTHONPATH``) can import the development package ``frazil_dev``:
the local broker, Kafka's tools, the demo's sample events and producer. Every bench module that
imports ``frazil_dev`` imports this first; the product itself never needs it."""

from __future__ import annotations

import sys
from pathlib import Path

DEV = Path(__file__).resolve().parents[1] / "dev"
if str(DEV) not in sys.path:
    sys.path.append(str(DEV))
