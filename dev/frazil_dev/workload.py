"""The sample workload and how it reaches Kafka, for the demo, the tests, the harnesses and the
benchmarks: seeded clickstream events (about 250 bytes of JSON each) with their table columns, a
topic created with the admin client, and a producer that round-robins values over its partitions,
waiting for every acknowledgement."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

# The sample events' table columns (TOML, a [table]'s ``columns``).
CLICKSTREAM_COLUMNS = """\
columns = [
  { name = "event_id", type = "string", required = true },
  { name = "user_id", type = "long" },
  { name = "session_id", type = "string" },
  { name = "event_type", type = "string" },
  { name = "page", type = "string" },
  { name = "referrer", type = "string" },
  { name = "country", type = "string" },
  { name = "device", type = "string" },
  { name = "price", type = "double" },
  { name = "event_time", type = "timestamptz" },
]"""

_TYPES = ["page_view"] * 12 + ["click"] * 6 + ["add_to_cart"] * 2 + ["purchase"]
COUNTRIES = ["DE", "US", "FR", "BR", "IN", "JP", "NG", "GB", "NL", "ES"]
_DEVICES = ["mobile", "desktop", "tablet"]
_REFERRERS = ["https://search.example/q?term=boots", "https://social.example/post/8812", "direct", "newsletter"]


def sample_events(n: int, seed: int = 7) -> list[bytes]:
    """``n`` clickstream events of about 250 bytes, over three days, reproducible by ``seed``."""
    rng = random.Random(seed)
    t0 = datetime(2026, 11, 19, tzinfo=UTC)
    out = []
    for i in range(n):
        event_type = rng.choice(_TYPES)
        at = t0 + timedelta(seconds=i * 259_200 / max(n, 1) + rng.random())
        out.append(json.dumps({
            "event_id": str(uuid.UUID(int=rng.getrandbits(128))),
            "user_id": rng.randrange(1, 50_000),
            "session_id": f"s-{rng.getrandbits(48):012x}",
            "event_type": event_type,
            "page": f"/products/{rng.randrange(1, 5000)}",
            "referrer": rng.choice(_REFERRERS),
            "country": rng.choice(COUNTRIES),
            "device": rng.choice(_DEVICES),
            "price": round(rng.uniform(2, 400), 2) if event_type in ("add_to_cart", "purchase") else None,
            "event_time": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }, separators=(",", ":")).encode())
    return out


_last_line = [0.0]


def progress(label: str, done: int, total: int, started: float) -> None:
    """One updating line on a terminal; a line every 2 s (and at the end) in a log."""
    rate = done / max(time.monotonic() - started, 1e-9)
    line = f"  {label}: {done:>9,}/{total:,} ({100 * done / max(total, 1):5.1f}%) {rate:>10,.0f}/s"
    if sys.stdout.isatty():
        print("\r" + line, end="" if done < total else "\n", flush=True)
    elif done >= total or time.monotonic() - _last_line[0] >= 2.0:
        _last_line[0] = time.monotonic()
        print(line, flush=True)


async def produce(bootstrap: str, topic: str, values: Iterable[bytes], *, partitions: int,
                  label: str | None = "produced") -> int:
    """Round-robin ``values`` over the partitions, waiting for every acknowledgement; with a
    ``label``, progress is shown as it goes. Returns how many were produced."""
    from aiokafka import AIOKafkaProducer

    values = list(values)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024,
                                acks="all", enable_idempotence=True)
    await producer.start()
    started = time.monotonic()
    try:
        chunk = 5000
        for i in range(0, len(values), chunk):
            futures = [await producer.send(topic, v, key=str(i + j).encode(), partition=(i + j) % partitions)
                       for j, v in enumerate(values[i:i + chunk])]
            await asyncio.gather(*futures)
            if label:
                progress(label, min(i + chunk, len(values)), len(values), started)
    finally:
        await producer.stop()
    return len(values)


async def create_topic(bootstrap: str, topic: str, partitions: int, replicas: int = 1) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, replicas)])
    finally:
        await admin.close()
