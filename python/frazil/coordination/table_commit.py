"""One table's commit of a cycle, as the coordinator makes it: the files and ranges every worker
reported for it, checked (table UUID, one owner per partition, one topic id per topic) and
committed through frazil's exactly-once committer, between its intent and its outcome in the
transaction log when the process keeps one (rule 5)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from frazil.coordination.commit_state import TableCommit, TopicPartition
from frazil.errors import CommitFailed, FrazilError, OffsetGapError, OffsetOverlapError, TopicMismatchError
from frazil.events.payloads import DeadLetter
from frazil.iceberg import offsets
from frazil.iceberg.committer import CommitResult, Committer
from frazil.iceberg.datafiles import from_ref
from frazil.iceberg.index_store import IndexStore
from frazil.iceberg.mutations import KeyIndex
from frazil.iceberg.offsets import Range
from frazil.txlog import Journal
from frazil.txlog import records as txrecords

log = logging.getLogger(__name__)

CommitTable = Callable[[TableCommit, str, int | None], CommitResult]


def table_committer(catalog: Catalog, pipeline: str, *, max_attempts: int, journal: Journal | None = None,
                    log_dead_letters: bool = False, fence: bool = True, indexes: dict[str, KeyIndex] | None = None,
                    store: IndexStore | None = None) -> CommitTable:
    """Commits a cycle's files and ranges for one table through frazil's exactly-once committer.
    With a ``journal``: the commit's intent is logged before the catalog commit and its outcome
    after, so a process that dies in between settles it by commit id on restart (rule 5); with
    ``log_dead_letters`` (single mode) the intent carries the commit's bad records, sent at the
    next start if the process dies before sending them. ``fence=False`` only for the fault-injection
    test that shows what the contiguity check prevents. ``indexes``: keyed tables' key indexes,
    kept from commit to commit (the caller's, to checkpoint them into ``store`` when the role
    ends; read back from it when missing)."""

    kept: dict[str, KeyIndex] = {} if indexes is None else indexes

    def commit(table: TableCommit, commit_id: str, valid_through_ms: int | None) -> CommitResult:
        committer = Committer(catalog, table.table, pipeline, max_attempts=max_attempts, indexes=kept, fence=fence,
                              store=store)
        if table.seal:
            return committer.seal(commit_id, reason=table.seal)
        try:
            loaded = committer.load()
        except Exception as exc:  # catalog unreachable: nothing was attempted
            raise CommitFailed(f"commit {commit_id}: cannot load {table.table} ({type(exc).__name__}: "
                                       f"{exc}); nothing was committed") from exc
        foreign = table.table_uuids - {"", str(loaded.metadata.table_uuid)}
        if foreign:
            raise FrazilError(f"commit {commit_id} to {table.table}: files were written for table UUID(s) "
                              f"{', '.join(sorted(foreign))}, but {table.table} is {loaded.metadata.table_uuid}. "
                              "The table was dropped and recreated, or another deployment uses pipeline name "
                              f"{pipeline!r} on this Kafka cluster (give each its own); nothing was committed")
        specs, schema = loaded.specs(), loaded.schema()
        ranges: dict[TopicPartition, Range] = {}
        topic_ids: dict[str, str] = {}
        for r in table.ranges:
            tp = (r.topic, r.partition)
            if tp in ranges:
                raise FrazilError(f"commit {commit_id} to {table.table}: two ranges for {r.topic}[{r.partition}] "
                                  "in one cycle (two owners of one partition in one generation); this is a bug")
            ranges[tp] = Range(r.start, r.end)
            if r.topic_id and topic_ids.setdefault(r.topic, r.topic_id) != r.topic_id:
                raise TopicMismatchError(
                    f"commit {commit_id} to {table.table}: records of topic {r.topic} were read from two topics of "
                    f"that name (ids {topic_ids[r.topic]} and {r.topic_id}): it was deleted and created again while "
                    "the pipeline ran; nothing was committed. " + offsets.RECREATED_FIX.format(pipeline=pipeline))
        files = [from_ref(f, specs[f.spec_id], schema) for f in table.files]
        progress = {(t, p): o for t, p, o in table.progress}
        if journal is None:
            return committer.commit_files(files, ranges, commit_id, valid_through_ms=valid_through_ms, loaded=loaded,
                                          progress=progress, topic_ids=topic_ids, letters_from=table.letters_from)
        return logged_commit(journal, committer, table.table, files, ranges, commit_id, valid_through_ms, loaded,
                             progress, table.dead_letters if log_dead_letters else (), topic_ids, table.letters_from)

    return commit


def logged_commit(journal: Journal, committer: Committer, table: str, files: list[DataFile],
                  ranges: dict[TopicPartition, Range], commit_id: str, valid_through_ms: int | None = None,
                  loaded: Table | None = None, progress: dict[TopicPartition, int] | None = None,
                  dead_letters: Sequence[DeadLetter] = (), topic_ids: dict[str, str] | None = None,
                  letters_from: str = "") -> CommitResult:
    """One table commit between its intent and its outcome in the transaction log (blocking).
    Refused for its content (an overlap, a gap): ``abandoned``. Known not to have landed:
    ``failed`` (the files go back to pending). Outcome unknown: no outcome yet; the intent is
    settled by commit id when the process starts again. The intent carries the commit's bad
    records, so a landed commit's are sent even if the process dies before sending them."""
    paths = [f.file_path for f in files]
    journal.append([txrecords.intent(commit_id, table, paths, ranges, dead_letters, topic_ids, letters_from)])
    try:
        result = committer.commit_files(files, ranges, commit_id, valid_through_ms=valid_through_ms, loaded=loaded,
                                        progress=progress, topic_ids=topic_ids, letters_from=letters_from)
    except CommitFailed:
        journal.append([txrecords.outcome(commit_id, table, "failed")])
        raise
    except (OffsetOverlapError, OffsetGapError, TopicMismatchError):
        journal.append([txrecords.outcome(commit_id, table, "abandoned")])
        raise
    journal.append([txrecords.outcome(commit_id, table, "abandoned" if result.already_committed else "committed",
                                      result.snapshot_id),
                    txrecords.offsets(table, result.offsets)])
    return result
