"""Kafka record batches (v2) built in process by aiokafka's own builder, with the base offset a
broker would set: the bytes a fetch returns, for tests and benchmarks that read them without a
broker (``frazil._native.read_fetch``)."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.record.default_records import DefaultRecordBatchBuilder

# offset, timestamp (ms), key, value, headers
Record = tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


def record_batch(records: Sequence[Record], codec: int = 0) -> bytes:
    """``records`` (consecutive offsets from the first one's) as one batch compressed with
    ``codec`` (aiokafka's compression type: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    base = records[0][0]
    for offset, ts, key, value, headers in records:
        builder.append(offset - base, timestamp=ts, key=key, value=value, headers=list(headers))
    built = builder.build()
    built[0:8] = base.to_bytes(8, "big")   # the broker assigns the base offset (outside the CRC)
    return bytes(built)
