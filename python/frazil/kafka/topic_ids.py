"""Topic ids: the broker's name for one incarnation of a topic (Kafka 2.8+, KIP-516).

A topic deleted and created again under the same name gets a new id. frazil keeps, with each
table's offsets, the id of the topic they were read from, and compares it with the broker's before
reading on: offsets of a topic that no longer exists must not be applied to its successor.

aiokafka 0.14 speaks Metadata up to v5, which has no ids; this module adds v12 (the first version
that names topics by name and returns their ids in the flexible encoding) from aiokafka's own
protocol types. Ids are shown as Kafka shows them (``kafka-topics.sh --describe``): the 16 bytes in
URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Iterable
from io import BytesIO
from typing import Any, ClassVar

from aiokafka.errors import IncompatibleBrokerVersion, NodeNotReadyError, for_code
from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Boolean, CompactArray, CompactString, Int16, Int32, Schema, TaggedFields

log = logging.getLogger(__name__)

UNKNOWN_TOPIC = 3   # UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist (now)
_ZERO = uuid.UUID(int=0)


class Uuid(AbstractType[uuid.UUID]):  # type: ignore[misc]  # aiokafka is untyped here
    """Kafka's ``uuid``: 16 bytes, most significant first."""

    @classmethod
    def encode(cls, value: uuid.UUID | None) -> bytes:
        return (value or _ZERO).bytes

    @classmethod
    def decode(cls, data: BytesIO) -> uuid.UUID:
        raw = data.read(16)
        if len(raw) != 16:
            raise ValueError("Buffer underrun decoding a uuid")
        return uuid.UUID(bytes=raw)


def text(topic_id: uuid.UUID) -> str:
    """An id as Kafka prints it."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


class MetadataResponse_v12(Response):  # type: ignore[misc]  # aiokafka names versions so
    API_KEY = 3
    API_VERSION = 12
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("brokers", CompactArray(("node_id", Int32), ("host", CompactString("utf-8")), ("port", Int32),
                                 ("rack", CompactString("utf-8")), ("tags", TaggedFields))),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        ("topics", CompactArray(
            ("error_code", Int16), ("name", CompactString("utf-8")), ("topic_id", Uuid), ("is_internal", Boolean),
            ("partitions", CompactArray(
                ("error_code", Int16), ("partition_index", Int32), ("leader_id", Int32), ("leader_epoch", Int32),
                ("replica_nodes", CompactArray(Int32)), ("isr_nodes", CompactArray(Int32)),
                ("offline_replicas", CompactArray(Int32)), ("tags", TaggedFields))),
            ("topic_authorized_operations", Int32), ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


class MetadataRequest_v12(RequestStruct):  # type: ignore[misc]  # aiokafka names versions so
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 12
    RESPONSE_TYPE = MetadataResponse_v12
    SCHEMA = Schema(
        ("topics", CompactArray(("topic_id", Uuid), ("name", CompactString("utf-8")), ("tags", TaggedFields))),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class TopicIdsRequest(Request[MetadataRequest_v12]):  # type: ignore[misc]
    """Metadata for the named topics (never created by asking), to read their ids."""

    API_KEY: ClassVar[int] = 3

    def __init__(self, topics: Iterable[str]) -> None:
        self._topics = sorted(set(topics))

    def build(self, request_struct_class: type[MetadataRequest_v12]) -> MetadataRequest_v12:
        # tagged fields: always empty (aiokafka's encoder writes no field sizes)
        return request_struct_class([(_ZERO, name, {}) for name in self._topics], False, False, {})


def parse(response: Any) -> dict[str, str]:
    """``{topic: id}`` from a v12 response; a topic that does not exist, or has no id yet (all
    zeros), is left out; any other per-topic error raised as aiokafka's exception for its code."""
    out: dict[str, str] = {}
    for error_code, name, topic_id, *_ in response.topics:
        if error_code == UNKNOWN_TOPIC:
            continue
        if error_code:
            raise for_code(error_code)(f"reading the id of topic {name}")
        if topic_id != _ZERO:   # a cluster still on a protocol before ids (mid-upgrade) sends zeros: no id
            out[name] = text(topic_id)
    return out


async def fetch(client: Any, topics: Iterable[str]) -> dict[str, str] | None:
    """The ids of ``topics`` as the cluster knows them now (a topic that does not exist is left
    out), from any broker ``client`` (an ``AIOKafkaClient``) knows. None when the brokers answer no
    Metadata request with ids (older than Kafka 3.1). Raises aiokafka's errors (retriable ones
    among them) otherwise."""
    wanted = sorted(set(topics))
    if not wanted:
        return {}
    node = client.get_random_node()
    if node is None:
        await client.force_metadata_update()
        node = client.get_random_node()
        if node is None:   # retriable: the caller waits the brokers out
            raise NodeNotReadyError("no broker known to ask for topic ids")
    try:
        response = await client.send(node, TopicIdsRequest(wanted))
    except (NotImplementedError, IncompatibleBrokerVersion):
        return None
    return parse(response)
