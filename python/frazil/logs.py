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


class StartupNoise(logging.Filter):
    """aiokafka logs ``GroupCoordinatorNotAvailableError`` at ERROR while a broker is still
    electing the group's coordinator (every first start against a fresh cluster) and retries by
    itself. The first ``grace`` of them become one INFO line each; if it goes on, they stay ERROR."""

    def __init__(self, grace: int = 20) -> None:
        super().__init__()
        self.grace, self.seen = grace, 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and "GroupCoordinatorNotAvailable" in record.getMessage():
            self.seen += 1
            if self.seen <= self.grace:
                record.levelno, record.levelname = logging.INFO, "INFO"
                record.msg, record.args = ("the group coordinator is not available yet (the broker is still electing "
                                           "it); aiokafka retries (%d of %d said at INFO)", (self.seen, self.grace))
                return logging.getLogger().isEnabledFor(logging.INFO)
        return True


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
    coordinator_lookup = logging.getLogger("aiokafka.consumer.group_coordinator")
    coordinator_lookup.filters[:] = [f for f in coordinator_lookup.filters if not isinstance(f, StartupNoise)]
    coordinator_lookup.addFilter(StartupNoise())
