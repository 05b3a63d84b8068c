"""One error hierarchy for frazil. Each class says whether retrying can help (``retriable``)."""

from __future__ import annotations


class FrazilError(Exception):
    """Base of every error frazil raises on purpose. ``exit_code`` is the CLI's exit status for it
    (docs/operations.md lists them)."""

    retriable: bool = False
    exit_code: int = 1


class ConfigError(FrazilError):
    """The configuration is invalid; the message names the key and the fix."""

    exit_code = 2


class KafkaUnavailable(FrazilError):
    """No broker could be reached, or the brokers refused the connection (TLS, SASL credentials)."""

    retriable = True
    exit_code = 3


class CatalogUnavailable(FrazilError):
    """The Iceberg catalog could not be reached or answered with an error (down, locked, refused)."""

    retriable = True
    exit_code = 4


class NotFound(FrazilError):
    """A table or topic the command needs does not exist."""

    exit_code = 5


class RecordDecodeError(FrazilError):
    """A record value could not be turned into a row of the target table."""

    def __init__(self, *, topic: str, partition: int, offset: int, field: str, reason: str) -> None:
        self.topic, self.partition, self.offset, self.field, self.reason = topic, partition, offset, field, reason
        where = f"field {field!r}: " if field else ""
        super().__init__(
            f"record topic={topic} partition={partition} offset={offset} could not be decoded: {where}{reason}. "
            "The pipeline stopped before committing it, so it is not lost: fix the producer or the table "
            "schema, or set pipeline.on_bad_record = \"dead_letter\" to send such records to the dead-letter "
            "topic and go on, then restart."
        )


class CorruptBatchError(FrazilError):
    """A fetched record batch cannot be read: its CRC-32C does not match, it is not a well-formed
    batch, or it is in a message format older than v2. Nothing of the fetch was taken."""

    def __init__(self, *, topic: str, partition: int, offset: int, detail: str) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        super().__init__(
            f"{topic}[{partition}]: {detail}. The pipeline stopped; nothing past what the tables hold was taken, so "
            "nothing is lost. Restart to fetch it again (damage on the way heals); if it fails again at the same "
            "offset, the broker's copy is damaged: check the partition's log segments on the broker "
            "(kafka-dump-log.sh --deep-iteration) and recover it from a replica."
        )


class OffsetOverlapError(FrazilError):
    """Some of the records in a commit are already in the table (rule 3: overlap).

    The owner of the partition must re-read it from the stored offset.
    """

    retriable = True


class OffsetGapError(FrazilError):
    """A commit would leave records out of the table (rule 3: gap). Never committed."""


class CommitOutcomeUnknown(FrazilError):
    """A catalog commit did not land, or failed in a way that leaves its outcome unknown.
    ``unresolved`` is True only when the outcome could not be checked (the table could not be
    reloaded): then the commit id must be looked for again before its files count as not landed."""

    retriable = True

    def __init__(self, message: str, *, unresolved: bool = False) -> None:
        super().__init__(message)
        self.unresolved = unresolved


class TopicMismatchError(FrazilError):
    """The table's stored offsets do not fit the topic as it is now (deleted and recreated?)."""


class CorruptJournalError(FrazilError):
    """The transaction log is damaged somewhere other than its last write; the message names
    the file and byte position."""


class SchemaRegistryError(FrazilError):
    """The schema registry could not be asked (unreachable, refused the credentials, answered
    nonsense) after the bounded retries. Nothing was taken past the records that need it."""

    retriable = True
