"""How ``KafkaSource`` builds its aiokafka consumer from the config (no broker: the consumer is
built, never started)."""

from __future__ import annotations

import asyncio

from frazil.config import KafkaConfig
from frazil.ingest.source import KafkaSource


def test_the_consumer_asks_for_at_most_the_configured_bytes_per_fetch_response() -> None:
    async def build() -> tuple[int, int]:
        cfg = KafkaConfig(bootstrap_servers="127.0.0.1:1", topics=("t",), group_id="g", client_id="c",
                          fetch_max_bytes=12 << 20)
        made = KafkaSource(cfg)
        sizes = made._consumer._fetch_max_bytes, made._consumer._max_partition_fetch_bytes
        await made._consumer.stop()   # never started: this closes it
        return sizes

    assert asyncio.run(build()) == (12 << 20, 4 << 20)   # aiokafka's own default is 50 MiB
