"""An operator's moves of a table's offsets (``frazil offsets --reset`` / ``--skip``): records
skipped on purpose, each move one commit that says who and why. The pipeline's own commits are
``committer.py``'s."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping

from pyiceberg.exceptions import CommitFailedException

from frazil.errors import CommitFailed
from frazil.iceberg import offsets
from frazil.iceberg.commits import refuse_backward_reset, refuse_passed_skip, transaction
from frazil.iceberg.committer import CommitResult, Committer
from frazil.iceberg.offsets import TopicPartition

log = logging.getLogger(__name__)


def skip_to(committer: Committer, targets: Mapping[TopicPartition, int], *, reason: str, by: str) -> CommitResult:
    """An operator's reset: the table's offsets of ``targets`` move forward to the offsets given
    with no data (the records in between are skipped on purpose: a bad record when dead letters
    are off, a backlog, or what a Kafka Connect sink already landed). One commit: an empty
    snapshot whose summary carries the new offsets and why (``frazil.reset``), and the offsets
    property, so the two agree. Never backwards (that would land records twice); a table that
    changed meanwhile loses the compare-and-swap and nothing moves."""
    if not targets:
        raise ValueError("skip_to needs at least one partition")
    table = committer.load()
    found = committer.held(table)
    stored = dict(found.offsets)
    refuse_backward_reset(committer.table_name, stored, targets)
    moves = [{"topic": t, "partition": p, "from": stored.get((t, p)), "to": o}
             for (t, p), o in sorted(targets.items())]
    stored.update(targets)
    commit_id = f"reset-{uuid.uuid4().hex}"
    encoded = offsets.encode(stored)
    record: dict[str, object] = (dict(moves[0]) if len(moves) == 1 else {"moves": moves})
    record.update(reason=reason, by=by)
    summary = {offsets.COMMIT_ID_KEY: commit_id, offsets.PIPELINE_KEY: committer.pipeline,
               offsets.property_key(committer.pipeline): encoded,
               "frazil.reset": json.dumps(record, sort_keys=True)}
    if found.topic_ids:   # a rollback onto this snapshot still knows which topics its offsets are of
        summary[offsets.topic_ids_key(committer.pipeline)] = offsets.encode_topic_ids(found.topic_ids)
    started = time.monotonic()
    tx = transaction(table)
    with tx.update_snapshot(snapshot_properties=summary).fast_append():
        pass   # no data: the snapshot carries the offsets the property gets
    tx.set_properties({offsets.property_key(committer.pipeline): encoded})
    try:
        committed = tx.commit_transaction()
    except CommitFailedException as exc:
        raise CommitFailed(f"{committer.table_name} changed while resetting its offsets ({exc}); nothing moved. "
                                   "Stop `frazil run` for the pipeline and try again") from exc
    for move in moves:
        log.warning("commit %s table=%s: offsets of %s[%d] reset by %s from %s to %d (%s); records in between are "
                    "skipped", commit_id, committer.table_name, move["topic"], move["partition"], by, move["from"],
                    move["to"], reason)
    return committer.result_of(commit_id, None, 0, committed, 1, started)


def skip(committer: Committer, tp: TopicPartition, offset: int, *, reason: str, by: str, at: str) -> None:
    """An operator's decision that the record at ``offset`` of ``tp`` never lands in this table
    (a bad record, when dead letters are off). Kept in the table property ``frazil.skip.<pipeline>``
    with who and why; the pipeline leaves that record out when it reads it (and counts it), while
    the table's offsets still move with the data around it. Only records the table has not passed."""
    table = committer.load()
    stored = committer.held(table).offsets
    refuse_passed_skip(committer.table_name, stored, tp, offset)
    skips = offsets.stored_skips(table.properties, committer.pipeline)
    skips.setdefault(tp, {})[offset] = {"reason": reason, "by": by, "at": at}
    tx = transaction(table)
    tx.set_properties({offsets.skip_key(committer.pipeline): offsets.encode_skips(skips)})
    try:
        tx.commit_transaction()
    except CommitFailedException as exc:
        raise CommitFailed(f"{committer.table_name} changed while noting the skip ({exc}); nothing changed. "
                                   "Stop `frazil run` for the pipeline and try again") from exc
    log.warning("table %s: %s[%d]@%d will be skipped by pipeline %s, as %s said (%s)", committer.table_name, tp[0],
                tp[1], offset, committer.pipeline, by, reason)
