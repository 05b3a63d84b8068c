"""Retries, one way: bounded, with exponential backoff, each failure logged by the caller or here.

- :func:`attempts` (:func:`attempts_async` on the event loop) yields attempt numbers ``1..limit``
  and sleeps the backoff between them (never after the last): for work that tries a fixed number
  of times (a catalog commit, a registry request, a Spark job, a producer's start), its loop body
  deciding what a failure means.
- :func:`wait_out` runs an operation until it succeeds, waiting out retriable failures with backoff
  for up to an outage's timeout, then raises what the caller says: for the event loop's waits on a
  catalog or a broker that is down for now (reading the tables' offsets, a partition's log end,
  sealing a commit). Nothing here retries forever (rule 8).
- :func:`catalog_wait` is :func:`wait_out` for the ingest path's own catalog calls (a schema
  change, a table opened on its first records): an outage of the catalog or its storage is waited
  out for a while (the loop does not poll meanwhile), then the process stops with
  ``CatalogUnavailable``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from frazil.errors import CatalogUnavailable, first_line

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """``first_s`` after the first failure, doubled after each, at most ``max_s``."""

    first_s: float
    max_s: float = 30.0

    def delay(self, failures: int) -> float:
        """The pause after ``failures`` failures in a row (1: the first)."""
        return float(min(self.max_s, self.first_s * 2 ** max(0, failures - 1)))


def attempts(limit: int, backoff: Backoff, sleep: Callable[[float], object] = time.sleep) -> Iterator[int]:
    """``1..limit``, sleeping ``backoff`` before each attempt but the first. A loop over it that
    finishes without returning has failed ``limit`` times: the caller raises, naming the last error."""
    for attempt in range(1, limit + 1):
        if attempt > 1:
            sleep(backoff.delay(attempt - 1))
        yield attempt


async def attempts_async(limit: int, backoff: Backoff,
                         sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> AsyncIterator[int]:
    """:func:`attempts` for the event loop: the backoff is awaited."""
    for attempt in range(1, limit + 1):
        if attempt > 1:
            await sleep(backoff.delay(attempt - 1))
        yield attempt


async def wait_out(op: Callable[[], Awaitable[T]], *, what: str, timeout_s: float, backoff: Backoff,
                   retriable: Callable[[BaseException], bool], expired: Callable[[BaseException, float], BaseException],
                   clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> T:
    """``op()``, again after each retriable failure (logged: ``what`` failed, why, when next), for
    up to ``timeout_s`` from the first failure; then ``expired(last error, seconds failing)`` is
    raised. A failure that is not ``retriable`` is raised at once."""
    started: float | None = None
    failures = 0
    while True:
        try:
            result = await op()
        except Exception as exc:
            if not retriable(exc):
                raise
            now = clock()
            started = now if started is None else started
            failing = now - started
            if failing >= timeout_s:
                stop = expired(exc, failing)
                if stop is exc:
                    raise
                raise stop from exc
            failures += 1
            pause = backoff.delay(failures)
            log.warning("%s (%s: %s); trying again in %.1fs (failing for %.0fs of outage_timeout_s=%g)", what,
                        type(exc).__name__, first_line(exc), pause, failing, timeout_s)
            await sleep(pause)
            continue
        if failures:
            log.warning("that is over, after %d failure(s) in %.0fs: %s", failures, clock() - (started or clock()),
                        what)
        return result


CATALOG_BACKOFF = Backoff(0.5, 10.0)
# the longest the ingest path waits for the catalog: the loop polls no records meanwhile, and a
# consumer that does not poll for max.poll.interval.ms (300 s by default) leaves its group
INGEST_CATALOG_WAIT_S = 120.0


async def catalog_wait(op: Callable[[], Awaitable[T]], *, what: str, timeout_s: float,
                       outage: Callable[[BaseException], bool], clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> T:
    """``op()`` (a catalog call of the ingest path, off the loop), a failure that ``outage`` says
    may be the catalog or its storage down for now waited out with backoff for up to
    ``timeout_s`` (``outage_timeout_s``, at most ``INGEST_CATALOG_WAIT_S``), each logged with
    ``what`` failed; then ``CatalogUnavailable`` (exit status 4: a service manager starts the
    process again, which reads the records again from the tables' offsets). Any other failure is
    raised at once."""
    limit = min(timeout_s, INGEST_CATALOG_WAIT_S)

    def expired(exc: BaseException, failing: float) -> BaseException:
        return CatalogUnavailable(f"{what} for {failing:.0f}s (the ingest path waits {limit:g}s at most): "
                                  f"{type(exc).__name__}: {first_line(exc)}. Nothing is lost: a restart reads the "
                                  "records again from the tables' offsets")

    return await wait_out(op, what=what, timeout_s=limit, backoff=CATALOG_BACKOFF, retriable=outage,
                          expired=expired, clock=clock, sleep=sleep)
