"""One error hierarchy for frazil. Each class says whether retrying can help (``retriable``)."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """An exception's message as one line of at most 300 characters (the class name if it has none)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


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


class CommitFailed(FrazilError):
    """A commit did not land, and that is known: nothing was committed (data files could not be
    written, the table could not be loaded, or every attempt lost the compare-and-swap or failed
    and was looked up afterwards). Trying again is safe: the files are kept and reported again."""

    retriable = True


class CommitOutcomeUnknown(FrazilError):
    """A catalog commit failed in a way that leaves its outcome unknown, and the table could not be
    reloaded to look for its commit id (rule 5). Its files do not count as not landed: the commit
    id is looked for again (the transaction log's intent, on restart), and a later commit of the
    same ranges is refused by the table's offsets inside its compare-and-swap if it did land."""

    retriable = True


class OutageTimeout(FrazilError):
    """Commits, or reading the tables' offsets, kept failing for ``pipeline.outage_timeout_s``: the
    process stops rather than retry while the lag grows (rule 8). Nothing is lost: a restart, or
    the partitions' next owner, resumes from the tables."""

    exit_code = 4


class BackfillIncomplete(FrazilError):
    """A backfill stopped before landing everything up to the end offsets it started with.
    Nothing is lost or doubled: running it again lands the rest."""


class TopicMismatchError(FrazilError):
    """The table's stored offsets do not fit the topic as it is now (deleted and recreated?)."""


class RetentionGapError(TopicMismatchError):
    """Records the table still needs were deleted by the topic's retention before they were read
    (``kafka.on_retention_gap = "stop"``)."""


class CorruptJournalError(FrazilError):
    """The transaction log is damaged somewhere other than its last write; the message names
    the file and byte position."""


class SchemaRegistryError(FrazilError):
    """The schema registry could not be asked (unreachable, refused the credentials, answered
    nonsense) after the bounded retries. Nothing was taken past the records that need it."""

    retriable = True


class EventDecodeError(FrazilError):
    """Bytes on the control topic that cannot be read as a frazil event."""


class InferenceError(FrazilError):
    """Records from which no table schema can be inferred; declare the table's columns instead."""


class EvolutionError(FrazilError):
    """The table's schema cannot take what the records ask (the records stay bad records)."""


class ConnectorConfigError(ConfigError, ValueError):
    """The file is not an Iceberg sink connector's configuration, or a setting in it is malformed
    (the message says why; ``frazil import-kc``)."""


class TableMissingError(ConfigError):
    """A table that does not exist and may not be created."""


class UntestedPyiceberg(FrazilError):
    """The installed pyiceberg is not a release frazil's changes to its internals were tested with."""


class MaintenanceError(FrazilError):
    """A maintenance job failed every attempt. Ingestion goes on; the job runs again at its next turn."""

    retriable = True


class BulkWriteError(FrazilError):
    """Spark could not write the batch. Nothing was committed; the cycle retries it."""

    retriable = True


class BufferFull(FrazilError):
    """A batch would pass the record buffer's byte cap: nothing of it was taken (it is fetched
    again once a commit frees room)."""

    retriable = True


class UnknownWriterSchemas(FrazilError):
    """Records name writer schemas the buffer has not decided yet (``ids``; ``of_keys``: the
    schemas of their keys): nothing was taken; each is fetched and registered (or refused) first."""

    def __init__(self, ids: list[int], *, of_keys: bool = False) -> None:
        super().__init__(f"{'key' if of_keys else 'writer'} schema id(s) {', '.join(map(str, ids))} not registered "
                         "yet")
        self.ids = ids
        self.of_keys = of_keys
