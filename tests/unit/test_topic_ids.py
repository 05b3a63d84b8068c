"""Metadata v12 as frazil encodes and decodes it to read topic ids (the broker's side is the
integration test's)."""

from __future__ import annotations

import uuid
from io import BytesIO

import pytest
from aiokafka.errors import TopicAuthorizationFailedError

from frazil.kafka import topic_ids
from frazil.kafka.topic_ids import MetadataRequest_v12, MetadataResponse_v12, TopicIdsRequest, Uuid


def test_the_request_names_each_topic_once_with_a_zero_id_and_creates_nothing() -> None:
    request = TopicIdsRequest(["t", "t"]).build(MetadataRequest_v12)
    # topics: 1 (+1), zero uuid, name "t" (length + 1), no tags; no auto-creation; no acl operations; no tags
    assert request.encode() == b"\x02" + bytes(16) + b"\x02t" + b"\x00" + b"\x00" + b"\x00" + b"\x00"
    assert MetadataRequest_v12.FLEXIBLE_VERSION


def _response(*topics: tuple[int, str, uuid.UUID]) -> MetadataResponse_v12:
    encoded = MetadataResponse_v12(
        0, [(1, "127.0.0.1", 9092, None, {})], "cluster", 1,
        [(code, name, tid, False, [(0, 0, 1, 0, [1], [1], [], {})], 0, {}) for code, name, tid in topics], {},
    ).encode()
    return MetadataResponse_v12.decode(BytesIO(encoded))


def test_ids_are_read_as_kafka_prints_them_and_a_missing_topic_is_left_out() -> None:
    tid = uuid.UUID("6c1c2f8e-1f0e-4b7a-9a43-2f8f0b1d2c3e")
    found = topic_ids.parse(_response((0, "orders", tid), (topic_ids.UNKNOWN_TOPIC, "gone", uuid.UUID(int=0))))
    assert found == {"orders": topic_ids.text(tid)}
    assert len(found["orders"]) == 22 and "=" not in found["orders"]


def test_an_all_zero_id_is_no_id() -> None:
    """A cluster mid-upgrade from a protocol before ids answers v12 with zeros: kept, it would read as
    a recreation once the real id is given."""
    assert topic_ids.parse(_response((0, "t", uuid.UUID(int=0)))) == {}


def test_any_other_topic_error_is_raised_naming_the_topic() -> None:
    with pytest.raises(TopicAuthorizationFailedError, match="secret"):
        topic_ids.parse(_response((29, "secret", uuid.UUID(int=0))))


def test_a_short_uuid_is_a_decoding_error() -> None:
    with pytest.raises(ValueError, match="underrun"):
        Uuid.decode(BytesIO(bytes(15)))


class _Client:
    """What ``fetch`` uses of an AIOKafkaClient: a node to ask, and the send."""

    def __init__(self, nodes: list[int | None], answer: object) -> None:
        self.nodes, self.answer, self.updates = nodes, answer, 0

    def get_random_node(self) -> int | None:
        return self.nodes.pop(0)

    async def force_metadata_update(self) -> None:
        self.updates += 1

    async def send(self, node: int, request: TopicIdsRequest) -> object:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.asyncio
async def test_fetch_asks_one_broker_says_none_for_brokers_without_ids_and_waits_for_a_known_broker() -> None:
    from aiokafka.errors import NodeNotReadyError

    tid = uuid.UUID(int=7)
    assert await topic_ids.fetch(_Client([1], _response((0, "t", tid))), ["t"]) == {"t": topic_ids.text(tid)}
    assert await topic_ids.fetch(_Client([], None), []) == {}   # nothing asked
    # Kafka before 3.1: no Metadata v12 (aiokafka finds no version both sides speak)
    assert await topic_ids.fetch(_Client([1], NotImplementedError("v12")), ["t"]) is None
    # no broker known yet, even after a metadata update: retriable, never "no ids"
    client = _Client([None, None], None)
    with pytest.raises(NodeNotReadyError):
        await topic_ids.fetch(client, ["t"])
    assert client.updates == 1
