"""Logging set-up: the only place that installs handlers. Modules use ``getLogger(__name__)``.

The Kafka client (aiokafka) logs every failed retry: a broker down for 20 s is thousands of
ERROR lines. ``Folds`` (pure, clock passed in) decides which of them to show: the first of each
kind, then one summary line with the count and duration when the state changes and every
``every_s`` while it goes on. ``KafkaNoise`` is the filter on the handler that applies it."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

KAFKA_LOGGERS = ("aiokafka", "kafka")
# What frazil's worker and coordinator say when failing commits land again (flow/outage.py):
# whatever the Kafka client was repeating is summed up then.
RECOVERED = "the outage is over"
_NUMBERISH = re.compile(r"\S*\d\S*")   # node ids, ports, addresses, error codes, counts


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if isinstance(record, SummaryRecord):
            entry["repeated"], entry["over_s"] = record.repeated, record.over_s
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


@dataclass(frozen=True)
class Summary:
    """One line for ``count`` folded repeats of ``text`` (the latest of them), the state having
    lasted ``span_s`` so far; ``total``: every repeat folded since it began."""

    logger: str
    level: int
    text: str
    count: int
    total: int
    span_s: float
    going_on: bool

    def message(self) -> str:
        times = "time" if self.count == 1 else "times"
        head = (f"repeated {self.count:,} {times} over {self.span_s:.1f} s" if self.count == self.total else
                f"repeated {self.count:,} more {times} ({self.total:,} over {self.span_s:.1f} s)")
        return f"{head}{', going on' if self.going_on else ''}: {self.text}"


class SummaryRecord(logging.LogRecord):
    """A ``Summary`` as a log record, at the logger and level of the lines it folds."""

    def __init__(self, s: Summary) -> None:
        super().__init__(s.logger, s.level, __file__, 0, "%s", (s.message(),), None)
        self.repeated, self.over_s = s.count, round(s.span_s, 1)


@dataclass
class _Fold:
    logger: str
    level: int
    text: str       # the latest occurrence
    first: float    # when the state began (its first line)
    last: float     # its latest occurrence
    said: float     # when its latest line (the first, or a summary) was written
    count: int = 0  # repeats folded since that line
    total: int = 0  # repeats folded since the state began


class Folds:
    """Which lines to show, and the summaries of those not shown. Pure: the caller passes the
    clock (``now``, seconds). A kind is a key the caller chooses; while lines of a kind keep coming
    (no gap of ``quiet_s``) they are one state: its first line is shown, the rest folded. What was
    folded is said, with its count, when the state changes: a new kind arrives (the others' counts
    so far are said before it, unless they were said less than ``settle_s`` ago: an outage starts
    with several kinds at once), the state ends (``quiet_s`` without a repeat), or ``recovered``
    says so; and at most every ``every_s`` while it goes on. Never more lines out than in: a
    summary is one line for at least one folded line."""

    def __init__(self, *, quiet_s: float = 10.0, every_s: float = 60.0, settle_s: float = 1.0,
                 max_kinds: int = 1000) -> None:
        self.quiet_s, self.every_s, self.settle_s, self.max_kinds = quiet_s, every_s, settle_s, max_kinds
        self._open: dict[object, _Fold] = {}

    @property
    def open(self) -> int:
        return len(self._open)

    def offer(self, key: object, logger: str, level: int, text: str, now: float) -> tuple[bool, list[Summary]]:
        """A line of kind ``key``: whether to show it, and the summaries to write before it."""
        said = self.expire(now)
        fold = self._open.get(key)
        if fold is None:   # a new state: what the others folded so far is said first
            said += [self._say(f, now) for f in self._open.values() if f.count and now - f.said >= self.settle_s]
            if len(self._open) < self.max_kinds:   # beyond: shown, not folded
                self._open[key] = _Fold(logger, level, text, now, now, now)
            return True, said
        fold.text, fold.last, fold.count, fold.total = text, now, fold.count + 1, fold.total + 1
        if now - fold.said >= self.every_s:
            said.append(self._say(fold, now, going_on=True))
        return False, said

    def expire(self, now: float) -> list[Summary]:
        """The states that ended: no repeat for ``quiet_s``."""
        return self._end([k for k, f in self._open.items() if now - f.last >= self.quiet_s], now)

    def recovered(self, now: float) -> list[Summary]:
        """Every state ends (frazil says it recovered; the log closes)."""
        return self._end(list(self._open), now)

    def _end(self, keys: list[object], now: float) -> list[Summary]:
        ended = [self._open.pop(k) for k in keys]
        return [self._say(f, now) for f in ended if f.count]

    @staticmethod
    def _say(fold: _Fold, now: float, going_on: bool = False) -> Summary:
        s = Summary(fold.logger, fold.level, fold.text, fold.count, fold.total, fold.last - fold.first, going_on)
        fold.count, fold.said = 0, now
        return s


def _text(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format string is the handler's to report, not this filter's
        return str(record.msg)


def is_kafka_client(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in KAFKA_LOGGERS)


class KafkaNoise(logging.Filter):
    """On the handler: folds the Kafka client's WARNING and ERROR lines with ``Folds``, keyed by
    logger, level and the message with every token that holds a digit masked (node ids, ports,
    addresses, error codes): "Unable connect to node with id 1: [Errno 111] Connection refused"
    and the same for node 2 are one kind; "Group Coordinator Request failed: NodeNotReadyError"
    and "...: GroupAuthorizationFailedError" are two. Summaries are written through ``emit`` (the
    handler's ``handle``) at the logger and level of what they fold, while ``attached`` (the
    handler is still installed). Every other record passes, and is the clock that ends quiet
    states; ``sweep_s`` (None: off) also checks from a thread, so an outage's summary is written
    soon after it ends even if nothing else is logged. Frazil's own lines are never folded; its
    ``RECOVERED`` line ends every state."""

    def __init__(self, emit: Callable[[logging.LogRecord], object], *, folds: Folds | None = None,
                 sweep_s: float | None = 1.0, clock: Callable[[], float] = time.time,
                 attached: Callable[[], bool] = lambda: True) -> None:
        super().__init__()
        self._emit, self._folds, self._sweep_s, self._clock = emit, folds or Folds(), sweep_s, clock
        self._attached = attached
        self._lock = threading.Lock()
        self._sweeper: threading.Thread | None = None
        self._closed = threading.Event()

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record, SummaryRecord):   # written by this filter
            return True
        show = True
        with self._lock:
            if record.levelno >= logging.WARNING and is_kafka_client(record.name):
                text = _text(record)
                key = (record.name, record.levelno, _NUMBERISH.sub("#", text))
                show, said = self._folds.offer(key, record.name, record.levelno, text, record.created)
                self._start_sweeper()
            elif record.name.startswith("frazil") and self._folds.open and RECOVERED in _text(record):
                said = self._folds.recovered(record.created)
            else:
                said = self._folds.expire(record.created)
        self._write(said)
        return show

    def close(self) -> None:
        """Say what is folded (the handler closes: at exit, or a new ``setup``)."""
        self._closed.set()
        with self._lock:
            said = self._folds.recovered(self._clock())
        self._write(said)

    def _write(self, said: list[Summary]) -> None:
        if said and self._attached():   # a handler taken off without close() says nothing more
            for s in said:
                self._emit(SummaryRecord(s))

    def _start_sweeper(self) -> None:   # under the lock
        if self._sweep_s is not None and self._sweeper is None and self._folds.open and not self._closed.is_set():
            self._sweeper = threading.Thread(target=self._sweep, name="frazil-log-folds", daemon=True)
            self._sweeper.start()

    def _sweep(self) -> None:
        assert self._sweep_s is not None
        while not self._closed.wait(self._sweep_s):
            with self._lock:
                said = self._folds.expire(self._clock())
                done = not self._folds.open or not self._attached()
                if done:
                    self._sweeper = None
            self._write(said)
            if done:
                return


class _Handler(logging.StreamHandler[TextIO]):
    """stderr, through ``KafkaNoise``; what it folded is said before it closes."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.noise = KafkaNoise(self.handle, attached=lambda: self in logging.getLogger().handlers)
        self.addFilter(self.noise)

    def close(self) -> None:
        self.noise.close()
        super().close()


def setup(level: str = "INFO", fmt: str = "text") -> None:
    """Send logs to stderr as text (default) or one JSON object per line (``fmt="json"``)."""
    handler = _Handler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in root.handlers:
        if isinstance(old, _Handler):
            old.noise.close()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The libraries are chatty at INFO; their warnings still show (repeats folded by KafkaNoise).
    for noisy in ("aiokafka", "kafka", "pyiceberg", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    coordinator_lookup = logging.getLogger("aiokafka.consumer.group_coordinator")
    coordinator_lookup.filters[:] = [f for f in coordinator_lookup.filters if not isinstance(f, StartupNoise)]
    coordinator_lookup.addFilter(StartupNoise())
