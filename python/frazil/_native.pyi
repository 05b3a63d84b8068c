"""frazil's native core (Rust, pyo3 + arrow-rs). Heavy calls release the GIL."""

from typing import final

import pyarrow as pa

__all__ = ["DecodeError", "JsonBuffer", "NativeError", "__version__"]

__version__: str

class NativeError(Exception):
    """An error raised by frazil's native core."""

@final
class DecodeError:
    """A record that could not be decoded; the batch it came in was kept without it."""

    @property
    def index(self) -> int: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def field(self) -> str: ...
    @property
    def reason(self) -> str: ...

@final
class JsonBuffer:
    """Decodes Kafka record values (JSON objects) into Arrow record batches of one schema.

    With ``metadata_columns`` the schema must hold ``_kafka_topic``, ``_kafka_partition``,
    ``_kafka_offset``, ``_kafka_timestamp`` and ``_kafka_key``; they are filled from the record
    metadata, the other columns from the value.
    """

    def __new__(cls, *, schema: pa.Schema, metadata_columns: bool = False) -> JsonBuffer: ...
    def append(
        self,
        *,
        topic: str,
        partition: int,
        offsets: list[int],
        timestamps_ms: list[int],
        keys: list[bytes | None],
        values: list[bytes],
    ) -> list[DecodeError]:
        """Decode one batch of one topic-partition; returns the records that could not be decoded."""
    def drain(self) -> pa.RecordBatch | None:
        """Everything buffered as one record batch; the buffer is empty afterwards."""
    def clear(self) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def schema(self) -> pa.Schema: ...
