"""Test session: uvloop for every asyncio test, a real Kafka broker started once, and a real schema
registry (Apicurio, Confluent-compatible API) started once by the tests that need it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import uvloop

from frazil.local.kafka_broker import KafkaBroker
from frazil.local.schema_registry import SchemaRegistry


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, object]:
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real single-node KRaft broker for the whole session. Never skipped: if it cannot
    start, every test that needs it fails with the reason."""
    with KafkaBroker.start(Path(tmp_path_factory.mktemp("kafka"))) as broker:
        yield broker


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    """A real schema registry for the session. Never skipped: if it cannot start, the tests that
    need it fail with the reason."""
    with SchemaRegistry.start(Path(tmp_path_factory.mktemp("registry"))) as registry:
        yield registry
