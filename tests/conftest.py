"""Test session: uvloop for every asyncio test; the tests that need no server first, while the
servers the collected tests need start in the background (tests/session_servers.py): a real Kafka
broker (with SASL and TLS listeners, and a SASL OAUTHBEARER listener checking the tokens of a real
OAuth server, Keycloak, started before it), a real schema registry (Apicurio, Confluent-compatible
API), a real PostgreSQL server (the shared SQL catalog, and the source of change data capture
through a real Kafka Connect worker running Debezium), a real Iceberg REST catalog server (Apache
Iceberg's REST fixture), a Hive Metastore and a local S3-compatible object store (moto's server).
Each is started once; none is ever skipped."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import uvloop

from frazil_dev.hive_metastore import HiveMetastore
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.kafka_connect import KafkaConnect
from frazil_dev.oauth_server import OAuthServer
from frazil_dev.postgres import PostgresServer
from frazil_dev.rest_auth import RestAuthProxy
from frazil_dev.rest_catalog import RestCatalogServer
from frazil_dev.s3 import S3Server
from frazil_dev.schema_registry import SchemaRegistry
from session_servers import NAMES, SessionServers
from support import CATALOG_SCOPE, SIGV4_REGION

_SERVERS: SessionServers | None = None


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, object]:
    return {"uvloop": uvloop.new_event_loop}


def _servers_of(item: pytest.Item) -> set[str]:
    """The session servers a test uses (a parametrized argument that shares a server's name is not one)."""
    callspec = getattr(item, "callspec", None)
    params = set(callspec.params) if callspec is not None else set()
    return NAMES.intersection(getattr(item, "fixturenames", ())) - params


def _order(item: pytest.Item) -> tuple[bool, bool]:
    """The tests that need no server first, while the servers start; the tests on the shared Spark
    session last: a test that runs frazil in-process with Spark stops the process's session when it
    ends, which must not be the shared one."""
    return "spark" in getattr(item, "fixturenames", ()), bool(_servers_of(item))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_order)   # stable: the collected order within each group


def pytest_collection_finish(session: pytest.Session) -> None:
    global _SERVERS
    if session.config.option.collectonly:
        return
    factory = session.config._tmp_path_factory  # type: ignore[attr-defined]  # pytest's own, as tmp_path_factory
    _SERVERS = SessionServers(lambda name: Path(factory.mktemp(name)))
    needed: set[str] = set()
    for item in session.items:
        needed.update(_servers_of(item))
    _SERVERS.start_early(needed)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _SERVERS is not None:
        _SERVERS.stop_all()


def _server(name: str) -> Any:
    assert _SERVERS is not None, "the session's servers are set up after collection"
    return _SERVERS.get(name)


@pytest.fixture(scope="session")
def oauth_server() -> OAuthServer:
    """A real OAuth 2.0 server (Keycloak, from Maven Central) for the session: the broker's
    OAUTHBEARER listener checks its tokens. Never skipped."""
    return _server("oauth_server")


@pytest.fixture(scope="session")
def kafka() -> KafkaBroker:
    """A real single-node KRaft broker for the whole session. Never skipped: if it cannot
    start, every test that needs it fails with the reason."""
    return _server("kafka")


@pytest.fixture(scope="session")
def postgres() -> PostgresServer:
    """A real PostgreSQL server for the session (Debian's package), for the SQL catalog that
    several hosts share. Never skipped: if it cannot start, the tests that need it fail."""
    return _server("postgres")


@pytest.fixture(scope="session")
def kafka_connect(kafka: KafkaBroker) -> KafkaConnect:
    """A real Kafka Connect worker (the broker's own runtime) with Debezium's PostgreSQL connector
    and Apicurio's converters, for the session. Never skipped: if it cannot start, the tests that
    need it fail with the reason."""
    return _server("kafka_connect")


@pytest.fixture(scope="session")
def schema_registry() -> SchemaRegistry:
    """A real schema registry for the session. Never skipped: if it cannot start, the tests that
    need it fail with the reason."""
    return _server("schema_registry")


@pytest.fixture(scope="session")
def rest_catalog() -> RestCatalogServer:
    """A real Iceberg REST catalog server for the session (Apache Iceberg's REST fixture from Maven
    Central). Never skipped: if it cannot start, the tests that need it fail with the reason."""
    return _server("rest_catalog")


@pytest.fixture(scope="session")
def rest_catalog_oauth(rest_catalog: RestCatalogServer, oauth_server: OAuthServer,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestAuthProxy]:
    """The session's REST catalog behind an OAuth 2.0 resource server: every request needs an
    active token from the session's Keycloak granting the scope "catalog" (an in-test server of
    the documented protocols; see frazil_dev.rest_auth). Never skipped."""
    with RestAuthProxy.start(Path(tmp_path_factory.mktemp("rest-auth")), upstream=rest_catalog.uri,
                             jwks=oauth_server.jwks_url, issuer=oauth_server.issuer, scope=CATALOG_SCOPE) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def rest_catalog_sigv4(rest_catalog: RestCatalogServer, s3: S3Server,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestAuthProxy]:
    """The session's REST catalog behind AWS Signature Version 4 (the test S3 server's keys, region
    ``SIGV4_REGION``, service ``execute-api``), as AWS's API gateway fronts one: an in-test
    server of the documented protocol (frazil_dev.rest_auth). Never skipped."""
    key, secret = S3Server.credentials_env()["AWS_ACCESS_KEY_ID"], S3Server.credentials_env()["AWS_SECRET_ACCESS_KEY"]
    with RestAuthProxy.start_sigv4(Path(tmp_path_factory.mktemp("rest-sigv4")), upstream=rest_catalog.uri,
                                   region=SIGV4_REGION, service="execute-api", access_key=key,
                                   secret_key=secret) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def hive_metastore() -> HiveMetastore:
    """A real Hive Metastore for the session (Apache Hive's standalone metastore from Maven Central,
    on Derby). Never skipped: if it cannot start, the tests that need it fail with the reason."""
    return _server("hive_metastore")


@pytest.fixture(scope="session")
def s3() -> S3Server:
    """A local S3-compatible server for the session (moto's, from PyPI), for warehouses in object
    storage. Never skipped: if it cannot start, the tests that need it fail with the reason."""
    return _server("s3")
