"""The test session's servers, each started once, early: while the tests that need no server run
first (unit and native ones, a few minutes), the servers the collected tests need start in two
background lanes. A fixture then waits for its server. A server that cannot start fails every test
that needs it, with the reason (never a skip); one no collected test needs is never started.

Most of them are JVMs that take 10-45 s each to start (Keycloak, then the broker that checks its
tokens, the longest); started one after another at first use, they held the session up for about
two minutes of the 2-core machine's time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from frazil_dev.hive_metastore import HiveMetastore
from frazil_dev.kafka_broker import KafkaBroker, OAuthValidation
from frazil_dev.kafka_connect import KafkaConnect
from frazil_dev.oauth_server import AUDIENCE, OAuthServer
from frazil_dev.postgres import PostgresServer
from frazil_dev.rest_catalog import RestCatalogServer
from frazil_dev.s3 import S3Server
from frazil_dev.schema_registry import SchemaRegistry
from support import CATALOG_SCOPE, OAUTH_REAUTH_MS, OAUTH_TOKEN_S

# Each lane starts its servers one after the other (a server after those it needs); the two lanes
# run side by side, one core each.
LANES = (("oauth_server", "kafka", "kafka_connect"),
         ("postgres", "s3", "rest_catalog", "schema_registry", "hive_metastore"))
NAMES = frozenset(name for lane in LANES for name in lane)

Get = Callable[[str], Any]


def _oauth(workdir: Path, get: Get) -> OAuthServer:
    server = OAuthServer.start(workdir, token_lifetime_s=OAUTH_TOKEN_S)
    try:
        server.add_scope(CATALOG_SCOPE)   # what the REST catalog's tokens must grant (rest_catalog_oauth)
    except BaseException:
        server.stop()
        raise
    return server


def _kafka(workdir: Path, get: Get) -> KafkaBroker:
    oauth_server: OAuthServer = get("oauth_server")
    oauth = OAuthValidation(oauth_server.jwks_url, oauth_server.issuer, AUDIENCE, reauth_ms=OAUTH_REAUTH_MS)
    return KafkaBroker.start(workdir, secure=True, oauth=oauth)


STARTERS: dict[str, Callable[[Path, Get], Any]] = {
    "oauth_server": _oauth,
    "kafka": _kafka,
    "kafka_connect": lambda workdir, get: KafkaConnect.start(workdir, get("kafka").bootstrap),
    "postgres": lambda workdir, get: PostgresServer.start(),
    "s3": lambda workdir, get: S3Server.start(workdir),
    "rest_catalog": lambda workdir, get: RestCatalogServer.start(workdir),
    "schema_registry": lambda workdir, get: SchemaRegistry.start(workdir),
    "hive_metastore": lambda workdir, get: HiveMetastore.start(workdir),
}
assert set(STARTERS) == NAMES


class SessionServers:
    """The session's servers by fixture name: started early in lanes, or at first use."""

    def __init__(self, mktemp: Callable[[str], Path]) -> None:
        self._mktemp = mktemp
        self._futures: dict[str, Future[Any]] = {}
        self._started: list[Any] = []   # in start order: stopped in reverse (a server before those it needs)
        self._lock = threading.Lock()

    def start_early(self, needed: set[str]) -> None:
        """Start, in the background, each server of ``needed`` and each one they need."""
        for lane in LANES:
            # a lane's servers need only servers before them in the lane: take the prefix up to the last needed
            wanted = [i for i, name in enumerate(lane) if name in needed]
            if not wanted:
                continue
            names = lane[:wanted[-1] + 1]
            jobs = [(name, self._mktemp(name), self._future(name)) for name in names]
            threading.Thread(target=self._run_lane, args=(jobs,), name=f"start-{names[0]}", daemon=True).start()

    def get(self, name: str) -> Any:
        """The running server (started now if it was not started early); raises why it could not start."""
        with self._lock:
            now = name not in self._futures
            future = self._futures.setdefault(name, Future())
        if now:
            self._start(name, self._mktemp(name), future)
        return future.result()

    def stop_all(self) -> None:
        """Stop every server started (waiting for one still starting)."""
        for future in list(self._futures.values()):
            try:
                future.result(timeout=600)
            except BaseException:  # noqa: BLE001 - it failed to start: nothing to stop
                pass
        with self._lock:
            started, self._started = self._started, []
        for server in reversed(started):
            server.stop()

    def _future(self, name: str) -> Future[Any]:
        with self._lock:
            return self._futures.setdefault(name, Future())

    def _run_lane(self, jobs: list[tuple[str, Path, Future[Any]]]) -> None:
        for name, workdir, future in jobs:
            self._start(name, workdir, future)

    def _start(self, name: str, workdir: Path, future: Future[Any]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            server = STARTERS[name](workdir, self.get)
        except BaseException as exc:  # noqa: BLE001 - handed to every test that needs this server
            future.set_exception(exc)
            return
        with self._lock:
            self._started.append(server)
        future.set_result(server)
