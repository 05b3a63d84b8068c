"""The coordinator service's topic refresh (distributed mode, topic pattern): an outage after the
first list keeps the last list; one before any list is known is loud."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from frazil import config
from frazil.coordination import service as service_mod
from frazil.errors import KafkaUnavailable, NotFound
from frazil.flow import retry

CFG = config.parse({
    "pipeline": {"name": "p"},
    "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic_pattern": "shop\\..*", "metadata_max_age_ms": 1},
    "table": {"name": "ns.t", "columns": [{"name": "id", "type": "long", "required": True}]},
    "coordination": {"mode": "distributed"},
})


def _service() -> service_mod.CoordinatorService:
    return service_mod.CoordinatorService(CFG, catalog=None, assignment=set)  # type: ignore[arg-type]


@pytest.mark.parametrize("error", [KafkaUnavailable("broker down"), NotFound("topic 'shop.b' does not exist")])
def test_a_listing_that_fails_after_the_first_keeps_the_last_list(monkeypatch: pytest.MonkeyPatch,
                                                                   error: Exception) -> None:
    calls = {"n": 0}

    async def source_topics(cfg: Any) -> list[str]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise error
        return ["shop.a"]

    async def partitions(cfg: Any, topics: Any) -> list[tuple[str, int]]:
        return [("shop.a", 0)]

    monkeypatch.setattr(service_mod, "source_topics", source_topics)
    monkeypatch.setattr(service_mod, "partitions", partitions)
    svc = _service()

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(svc._refresh(stop))
        while calls["n"] < 5:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.005)
        stop.set()
        await task

    asyncio.run(run())
    assert svc._topics == ["shop.a"] and svc._partitions == frozenset({("shop.a", 0)})


def test_a_listing_that_fails_before_any_list_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    async def source_topics(cfg: Any) -> list[str]:
        raise KafkaUnavailable("broker down")

    monkeypatch.setattr(service_mod, "source_topics", source_topics)
    with pytest.raises(KafkaUnavailable):
        asyncio.run(_service()._refresh(asyncio.Event()))


def _leading_service(outage_timeout_s: float = 900) -> service_mod.CoordinatorService:
    cfg = config.parse({
        "pipeline": {"name": "p", "outage_timeout_s": outage_timeout_s},
        "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["t"]},
        "table": {"name": "ns.t", "columns": [{"name": "id", "type": "long", "required": True}]},
        "coordination": {"mode": "distributed"},
    })
    svc = service_mod.CoordinatorService(cfg, catalog=None, assignment=lambda: {("t", 0)})  # type: ignore[arg-type]
    return svc


def _lost_connection() -> Exception:
    """What aiokafka's transactional producer raises when the broker goes away while it looks up
    the transaction coordinator: a plain KafkaError whose causes are the lost connection."""
    from aiokafka.errors import KafkaConnectionError, KafkaError

    lookup = KafkaError("KafkaConnectionError('Connection at 127.0.0.1:9092 closed')")
    lookup.__cause__ = KafkaConnectionError("Connection at 127.0.0.1:9092 closed")
    outer = KafkaError("Unexpected error during batch delivery")
    outer.__cause__ = lookup
    return outer


def _unknown_server_error() -> Exception:
    """A broker just restarted answering a transaction's end with UNKNOWN_SERVER_ERROR: aiokafka's
    sender stops with a plain KafkaError whose cause is UnknownError (not retriable to aiokafka)."""
    from aiokafka.errors import KafkaError, UnknownError

    outer = KafkaError("Unexpected error during batch delivery")
    outer.__cause__ = UnknownError()
    return outer


@pytest.mark.parametrize("error", [KafkaUnavailable("cannot read the dead-letter position"), "lost-connection",
                                   "unknown-server-error"])
def test_a_coordinator_role_that_loses_kafka_starts_again_while_the_process_leads(
        monkeypatch: pytest.MonkeyPatch, error: Any) -> None:
    """A broker restart under the coordinator role (its control-topic producer or dead-letter sink
    failing) stops the role, not the process: it starts again after a pause, as a new coordinator."""
    monkeypatch.setattr(service_mod, "ROLE_BACKOFF", retry.Backoff(0.01))
    svc = _leading_service()
    starts = {"n": 0}
    stop = asyncio.Event()

    async def lead() -> None:
        starts["n"] += 1
        if starts["n"] <= 3:
            raise {"lost-connection": _lost_connection, "unknown-server-error": _unknown_server_error}.get(
                error, lambda: error)()
        stop.set()

    monkeypatch.setattr(svc, "_lead", lead)
    asyncio.run(asyncio.wait_for(svc.run(stop), 10))
    assert starts["n"] == 4


def test_a_coordinator_role_failing_for_its_own_reasons_or_past_the_outage_timeout_stops_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_mod, "ROLE_BACKOFF", retry.Backoff(0.01))

    async def broken() -> None:
        raise ValueError("a bug")

    svc = _leading_service()
    monkeypatch.setattr(svc, "_lead", broken)
    with pytest.raises(ValueError):
        asyncio.run(asyncio.wait_for(svc.run(asyncio.Event()), 10))

    async def away() -> None:
        raise KafkaUnavailable("broker down")

    svc = _leading_service(outage_timeout_s=0.05)
    monkeypatch.setattr(svc, "_lead", away)
    with pytest.raises(KafkaUnavailable):
        asyncio.run(asyncio.wait_for(svc.run(asyncio.Event()), 10))
