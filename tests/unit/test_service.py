"""The coordinator service's topic refresh (distributed mode, topic pattern): an outage after the
first list keeps the last list; one before any list is known is loud."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from frazil import config
from frazil.coordination import service as service_mod
from frazil.errors import KafkaUnavailable, NotFound

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
