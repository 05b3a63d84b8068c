"""Read-only views of a pipeline's progress (used by the CLI, the demo and tests)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import UnknownTopicOrPartitionError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from frazil.config import KafkaConfig
from frazil.errors import FrazilError, KafkaUnavailable, NotFound
from frazil.iceberg.offsets import COMMIT_ID_KEY, PIPELINE_KEY, SEALED_KEY, VTTS_KEY, Held
from frazil.kafka_clients import connect, options


async def source_topics(cfg: KafkaConfig) -> list[str]:
    """The pipeline's source topics now: the list, or every existing topic the pattern matches."""
    if not cfg.topic_pattern:
        return list(cfg.topics)
    admin = AIOKafkaAdminClient(**options(cfg))
    await connect(admin, cfg)
    try:
        return sorted(t for t in await admin.list_topics() if not t.startswith("__") and cfg.takes(t))
    finally:
        await admin.close()


async def partitions(kafka: KafkaConfig | str, topics: Iterable[str]) -> list[tuple[str, int]]:
    """Every partition of ``topics``; a missing topic is an error naming it."""
    admin = AIOKafkaAdminClient(**options(kafka))
    await connect(admin, kafka)
    try:
        # names first: describing a topic that does not exist creates it on a broker with
        # auto.create.topics.enable (Kafka's default), and a mistyped topic must stay an error
        topics = list(topics)
        existing = set(await admin.list_topics())
        for topic in topics:
            if topic not in existing:
                raise NotFound(f"topic {topic!r} does not exist on {options(kafka)['bootstrap_servers']}; "
                               "check kafka.topics (frazil does not create source topics)")
        out = []
        for desc in await admin.describe_topics(topics):
            if desc["error_code"]:
                if desc["error_code"] == UnknownTopicOrPartitionError.errno:
                    raise NotFound(f"topic {desc['topic']!r} does not exist on {options(kafka)['bootstrap_servers']}; "
                                   "check kafka.topics (frazil does not create source topics)")
                raise KafkaUnavailable(f"topic {desc['topic']!r} cannot be described "
                                       f"(Kafka error code {desc['error_code']})")
            out += [(desc["topic"], p["partition"]) for p in desc["partitions"]]
        return sorted(out)
    finally:
        await admin.close()


async def end_offsets(kafka: KafkaConfig | str, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """The offset after the last committed record of each partition of ``topics``."""
    tps = [TopicPartition(t, p) for t, p in await partitions(kafka, topics)]
    consumer = AIOKafkaConsumer(**options(kafka), isolation_level="read_committed", enable_auto_commit=False)
    await connect(consumer, kafka)
    try:
        ends = await consumer.end_offsets(tps) if tps else {}
        return {(tp.topic, tp.partition): off for tp, off in ends.items()}
    finally:
        await consumer.stop()


@dataclass(frozen=True)
class Member:
    """A process in the pipeline's consumer group and the partitions it owns now."""

    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


async def group_members(kafka: KafkaConfig, group: str) -> list[Member]:
    """The members of consumer group ``group`` and their assignments (empty when none is running)."""
    admin = AIOKafkaAdminClient(**options(kafka))
    await connect(admin, kafka)
    try:
        described = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    members = []
    for response in described:
        for g in response.groups:
            for _member_id, client_id, host, _metadata, assignment in g[5]:
                owned: list[tuple[str, int]] = []
                if assignment:
                    decoded = ConsumerProtocolMemberAssignment.decode(assignment)
                    owned = [(topic, p) for topic, parts in decoded.assignment for p in parts]
                members.append(Member(client_id, host.lstrip("/"), tuple(sorted(owned))))
    return members


@dataclass(frozen=True)
class TableProgress:
    """What a table says about the pipeline: its last frazil commit and its offsets."""

    name: str
    exists: bool
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    snapshot_id: int | None = None      # the table's current snapshot (maybe maintenance's)
    commit_id: str = ""                 # the pipeline's last commit in the table's history
    committed_ms: int | None = None     # when it landed
    valid_through_ms: int | None = None   # its VTTS (full distributed commits only)
    rows: int | None = None             # the table's rows now (snapshot summary)
    rolled_back: str | None = None


def table_progress(table: Table, pipeline: str, held: Held) -> TableProgress:
    current = table.current_snapshot()
    commit_id, committed_ms, vtts = "", None, None
    if current is not None:
        for snapshot in ancestors_of(current, table.metadata):
            extra = snapshot.summary.additional_properties if snapshot.summary is not None else {}
            if extra.get(PIPELINE_KEY) == pipeline and SEALED_KEY not in extra:   # a seal landed nothing
                commit_id, committed_ms = extra.get(COMMIT_ID_KEY, ""), snapshot.timestamp_ms
                vtts = int(extra[VTTS_KEY]) if VTTS_KEY in extra else None
                break
    rows = None
    if current is not None and current.summary is not None and "total-records" in current.summary.additional_properties:
        rows = int(current.summary.additional_properties["total-records"])
    return TableProgress(".".join(table.name()), True, held.offsets,
                         current.snapshot_id if current else None, commit_id, committed_ms, vtts, rows,
                         held.rolled_back)


async def group_offsets(kafka: KafkaConfig, group: str, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """The offsets consumer group ``group`` committed for ``topics`` (e.g. a Kafka Connect sink's
    ``connect-<name>``), as the next offset it would read per partition. A group that still has
    members is refused: its offsets are still moving."""
    if await group_members(kafka, group):
        raise FrazilError(f"consumer group {group!r} still has members; stop what consumes with it (the connector) "
                       "before taking its offsets")
    wanted = set(topics)
    admin = AIOKafkaAdminClient(**options(kafka))
    await connect(admin, kafka)
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in committed.items()
            if tp.topic in wanted and meta.offset >= 0}
