"""Read-only views of a pipeline's progress (used by the CLI, the demo and tests)."""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from frazil.config import KafkaConfig


async def source_topics(cfg: KafkaConfig) -> list[str]:
    """The pipeline's source topics now: the list, or every existing topic the pattern matches."""
    if not cfg.topic_pattern:
        return list(cfg.topics)
    admin = AIOKafkaAdminClient(bootstrap_servers=cfg.bootstrap_servers)
    await admin.start()
    try:
        return sorted(t for t in await admin.list_topics() if not t.startswith("__") and cfg.takes(t))
    finally:
        await admin.close()


async def partitions(bootstrap: str, topics: Iterable[str]) -> list[tuple[str, int]]:
    """Every partition of ``topics``; a missing topic is an error naming it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        out = []
        for desc in await admin.describe_topics(list(topics)):
            if desc["error_code"]:
                raise LookupError(f"topic {desc['topic']!r} cannot be described (Kafka error code {desc['error_code']})")
            out += [(desc["topic"], p["partition"]) for p in desc["partitions"]]
        return sorted(out)
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """The offset after the last committed record of each partition of ``topics``."""
    tps = [TopicPartition(t, p) for t, p in await partitions(bootstrap, topics)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps) if tps else {}
        return {(tp.topic, tp.partition): off for tp, off in ends.items()}
    finally:
        await consumer.stop()
