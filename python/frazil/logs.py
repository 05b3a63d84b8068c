"""Logging set-up: the only place that installs handlers. Modules use ``getLogger(__name__)``."""

from __future__ import annotations

import json
import logging
import sys
import time


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup(level: str = "INFO", fmt: str = "text") -> None:
    """Send logs to stderr as text (default) or one JSON object per line (``fmt="json"``)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The libraries are chatty at INFO; their warnings still show.
    for noisy in ("aiokafka", "kafka", "pyiceberg", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
