"""Test session: uvloop for every asyncio test, a real Kafka broker started once (with SASL and TLS
listeners, and a SASL OAUTHBEARER listener checking the tokens of a real OAuth server, Keycloak,
started before it), and, started once by the tests that need them, a real schema registry (Apicurio,
Confluent-compatible API), a real PostgreSQL server (the shared SQL catalog, and the source of
change data capture through a real Kafka Connect worker running Debezium) and a real Iceberg REST
catalog server (Apache Iceberg's REST fixture) and a local S3-compatible object store (moto's server)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import uvloop

from frazil_dev.hive_metastore import HiveMetastore
from frazil_dev.kafka_broker import KafkaBroker, OAuthValidation
from frazil_dev.kafka_connect import KafkaConnect
from frazil_dev.oauth_server import AUDIENCE, OAuthServer
from frazil_dev.postgres import PostgresServer
from frazil_dev.rest_auth import RestAuthProxy
from frazil_dev.rest_catalog import RestCatalogServer
from frazil_dev.s3 import S3Server
from frazil_dev.schema_registry import SchemaRegistry
from support import CATALOG_SCOPE, OAUTH_REAUTH_MS, OAUTH_TOKEN_S, SIGV4_REGION


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, object]:
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session")
def oauth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthServer]:
    """A real OAuth 2.0 server (Keycloak, from Maven Central) for the session: the broker's
    OAUTHBEARER listener checks its tokens. Never skipped."""
    with OAuthServer.start(Path(tmp_path_factory.mktemp("oauth")), token_lifetime_s=OAUTH_TOKEN_S) as server:
        server.add_scope(CATALOG_SCOPE)   # what the REST catalog's tokens must grant (rest_catalog_oauth)
        yield server


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory, oauth_server: OAuthServer) -> Iterator[KafkaBroker]:
    """A real single-node KRaft broker for the whole session. Never skipped: if it cannot
    start, every test that needs it fails with the reason."""
    oauth = OAuthValidation(oauth_server.jwks_url, oauth_server.issuer, AUDIENCE, reauth_ms=OAUTH_REAUTH_MS)
    with KafkaBroker.start(Path(tmp_path_factory.mktemp("kafka")), secure=True, oauth=oauth) as broker:
        yield broker


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session (Debian's package), for the SQL catalog that
    several hosts share. Never skipped: if it cannot start, the tests that need it fail."""
    with PostgresServer.start() as server:
        yield server


@pytest.fixture(scope="session")
def kafka_connect(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaConnect]:
    """A real Kafka Connect worker (the broker's own runtime) with Debezium's PostgreSQL connector
    and Apicurio's converters, for the session. Never skipped: if it cannot start, the tests that
    need it fail with the reason."""
    with KafkaConnect.start(Path(tmp_path_factory.mktemp("connect")), kafka.bootstrap) as worker:
        yield worker


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    """A real schema registry for the session. Never skipped: if it cannot start, the tests that
    need it fail with the reason."""
    with SchemaRegistry.start(Path(tmp_path_factory.mktemp("registry"))) as registry:
        yield registry


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalogServer]:
    """A real Iceberg REST catalog server for the session (Apache Iceberg's REST fixture from Maven
    Central). Never skipped: if it cannot start, the tests that need it fail with the reason."""
    with RestCatalogServer.start(Path(tmp_path_factory.mktemp("rest-catalog"))) as server:
        yield server


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
def hive_metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HiveMetastore]:
    """A real Hive Metastore for the session (Apache Hive's standalone metastore from Maven Central,
    on Derby). Never skipped: if it cannot start, the tests that need it fail with the reason."""
    with HiveMetastore.start(Path(tmp_path_factory.mktemp("hive-metastore"))) as server:
        yield server


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A local S3-compatible server for the session (moto's, from PyPI), for warehouses in object
    storage. Never skipped: if it cannot start, the tests that need it fail with the reason."""
    with S3Server.start(Path(tmp_path_factory.mktemp("s3"))) as server:
        yield server
