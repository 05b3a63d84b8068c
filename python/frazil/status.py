"""Read-only views of a pipeline and its sources: the topics and partitions, end offsets, the
group's members, each table's last commit, and where a restart resumes (the CLI, the daemon's
start-up checks, the coordinator's topic list, backfill)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import UnknownTopicOrPartitionError
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from frazil.buffers.positions import resume_at
from frazil.config import Config, KafkaConfig
from frazil.errors import FrazilError, KafkaUnavailable, NotFound
from frazil.iceberg.offsets import COMMIT_ID_KEY, PIPELINE_KEY, SEALED_KEY, VTTS_KEY, Held, merge_progress
from frazil.kafka.clients import connect, options

if TYPE_CHECKING:
    from frazil.ingest.routing import Router

TP = tuple[str, int]


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
    offsets: dict[TP, int] = field(default_factory=dict)
    snapshot_id: int | None = None      # the table's current snapshot (maybe maintenance's)
    commit_id: str = ""                 # the pipeline's last commit in the table's history
    committed_ms: int | None = None     # when it landed
    valid_through_ms: int | None = None   # its VTTS (full distributed commits only)
    rows: int | None = None             # the rows a reader sees now (``live_rows``)
    rolled_back: str | None = None
    rows_exact: bool = True             # False: ``rows`` is an upper bound (``live_rows``)


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
    rows, exact = live_rows(current.summary.additional_properties if current is not None and current.summary is not None
                            else {})
    return TableProgress(".".join(table.name()), True, held.offsets,
                         current.snapshot_id if current else None, commit_id, committed_ms, vtts, rows,
                         held.rolled_back, exact)


def live_rows(summary: Mapping[str, str]) -> tuple[int | None, bool]:
    """The rows a reader sees in a snapshot, from its summary, and whether that is exact.

    ``total-records`` counts every row of the data files, also the rows a keyed table's later
    changes replaced or deleted: those are position deletes (one row each, ``total-position-deletes``),
    so the live rows are the difference. frazil never writes equality deletes; when another writer
    did (``total-equality-deletes``), one of them may delete any number of rows, and the count is an
    upper bound. A compaction alone (``frazil compact``) leaves the position deletes of the files it
    rewrote behind, still counted though they delete nothing, until ``rewrite_position_delete_files``
    (the next full maintenance run) drops them: the count is low meanwhile."""
    if "total-records" not in summary:
        return None, True
    deleted = int(summary.get("total-position-deletes", "0"))
    return int(summary["total-records"]) - deleted, int(summary.get("total-equality-deletes", "0")) == 0


def table_names(catalog: Catalog, cfg: Config, *, merge_targets: bool = False) -> list[str]:
    """The pipeline's tables: the configured ones in config order (with ``merge_targets``, each
    followed by the table its changes are merged into, which holds no offsets), then the tables
    ``[dynamic]`` created that exist now."""
    from frazil.iceberg.catalog import dynamic_tables

    names = []
    for t in cfg.tables:
        names.append(t.name)
        if merge_targets and t.changes is not None and t.changes.target:
            names.append(t.changes.target)
    if cfg.dynamic is not None:
        names += dynamic_tables(catalog, cfg.dynamic, cfg.pipeline)
    return list(dict.fromkeys(names))


def load_tables(catalog: Catalog, names: Iterable[str]) -> dict[str, Table | None]:
    """Each of ``names`` loaded, or None when it does not exist (not created yet)."""
    return {name: catalog.load_table(name) if catalog.table_exists(name) else None for name in names}


Takes = Literal["every record", "some records", "no record"]


def takes(router: Router, topic: str, table: str) -> Takes:
    """What ``table`` takes of ``topic``, as routing decides: every record (the topic alone
    decides), some (a route field, or the ``[dynamic]`` template's field, decides per record) or
    none."""
    if not router.takes(topic, table):
        return "no record"
    return "every record" if table in router.for_topic(topic).always else "some records"


@dataclass(frozen=True)
class PartitionRow:
    """A source partition under one table: the table's offset, the log end, and what the table
    takes of the topic (``no record``: offsets kept from a config that routed the topic there)."""

    topic: str
    partition: int
    table_offset: int | None
    end: int | None
    takes: Takes

    @property
    def lag(self) -> int | None:
        """Records from the table's offset to the log end: to land, when the table takes every
        record; when it takes some, also the records it never takes (its offset moves only with a
        record it takes), so at most that many; none for a topic it does not take."""
        if self.end is None or self.takes == "no record":
            return None
        return self.end - (self.table_offset or 0)


def table_partitions(table: str, stored: Mapping[TP, int], ends: Mapping[TP, int],
                     router: Router) -> list[PartitionRow]:
    """The partitions of the topics ``table`` may take (``ends``: every source partition and its
    log end), and those it holds offsets for, each with what it takes of its topic."""
    tps = set(stored) | {tp for tp in ends if router.takes(tp[0], table)}
    return [PartitionRow(t, p, stored.get((t, p)), ends.get((t, p)), takes(router, t, table)) for t, p in sorted(tps)]


@dataclass(frozen=True)
class Restart:
    """Per source partition: the pipeline's watermark (every record below it is in every table
    that takes it), and where a restart reads it from, as the worker decides it
    (``buffers.positions.resume_at``); a partition missing from ``resume`` is new to every table
    and starts at ``kafka.auto_offset_reset``."""

    watermark: dict[TP, int]
    resume: dict[TP, int]


def restart(tps: Iterable[TP], held: Mapping[str, Held], router: Router) -> Restart:
    """:class:`Restart` from what each existing table holds (``Committer.held``): the same inputs
    the worker reads when it is assigned ``tps``."""
    watermark = merge_progress(*(h.progress for h in held.values()))
    return Restart(watermark, resume_at(tps, {name: h.offsets for name, h in held.items()}, watermark, router.takers))


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
