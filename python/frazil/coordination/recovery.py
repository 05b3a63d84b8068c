"""Settling the transaction log when a process starts, in both coordination modes (blocking).

- A commit intent without an outcome (the coordinator role died between logging it and learning
  the catalog's answer) is settled by its commit id (rule 5): if a snapshot carries it, it landed;
  otherwise its logged data files are committed now, under the same commit id, through the same
  contiguity check as any commit, so their records are not read again from Kafka. If the table's
  offsets have moved past them (another coordinator finished the cycle, or the records were read
  again), nothing is committed.
- Data files the worker role wrote that never reached an intent of this log, or were reported and
  never settled, are released: their records are read again from the table's offsets, unless the
  coordinator of the cycle they were reported in commits them (distributed mode), in which case
  the table's offsets already say so. Unused files are orphans for maintenance.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from frazil.errors import OffsetGapError, OffsetOverlapError, TopicMismatchError
from frazil.iceberg.committer import Committer
from frazil.txlog import Journal, JournalPolicy, open_journal
from frazil.txlog import records as txrecords

log = logging.getLogger(__name__)


def open_and_settle(directory: Path, policy: JournalPolicy, committer_for: Callable[[str], Committer]) -> Journal:
    """Open the log in ``directory`` and settle what it left open; ``committer_for(table)``."""
    journal, recovered = open_journal(directory, policy)
    for name, position, why in recovered.truncated:
        log.warning("txlog: cut a torn tail off %s at byte %d (%s)", name, position, why)
    for _, intent in sorted(recovered.state.unresolved().items()):
        _settle_intent(journal, committer_for(intent["table"]), intent["commit_id"], intent)
    for table, batches in sorted(journal.state.pending.items()):
        paths = [f for batch in batches for f in batch["files"]]
        replied = sorted({r.get("commit_id", k) for k, r in journal.state.replies.items()
                          if set(r["files"]) & set(paths)})
        log.warning("txlog: %d data file(s) of %s written before this start never landed through this process%s; "
                    "their records are read again from the table's offsets unless that cycle lands them",
                    len(paths), table, f" (reported in commit {', '.join(replied)})" if replied else "")
        journal.append([txrecords.settled(table, paths, "abandoned")])
    return journal


def _settle_intent(journal: Journal, committer: Committer, commit_id: str, intent: dict[str, Any]) -> None:
    outcome = txrecords.outcome(commit_id, intent["table"], "abandoned")
    try:
        files = committer.files_at(intent["files"])
        result = committer.commit_files(files, txrecords.decode_ranges(intent["ranges"]), commit_id,
                                        topic_ids=intent.get("topic_ids"), letters_from=intent.get("letters_from", ""))
    except (OffsetOverlapError, OffsetGapError, TopicMismatchError, FileNotFoundError) as exc:
        log.warning("txlog: commit %s from the log cannot land (%s); its records are read again from the table's "
                    "offsets", commit_id, exc)
        journal.append([outcome])
        return
    if result.already_committed:
        log.info("txlog: commit %s: its records are already in the table", commit_id)
        journal.append([outcome])
        return
    log.info("txlog: commit %s recovered: %d rows from %d logged data file(s) are in snapshot %s; they are not "
             "read again from Kafka", commit_id, result.rows, len(files), result.snapshot_id)
    journal.append([txrecords.outcome(commit_id, intent["table"], "committed", result.snapshot_id),
                    txrecords.offsets(intent["table"], result.offsets)])
