"""A process's recoverable commit state and how each journal record changes it (pure).

One journal per process holds both roles' records: the worker's (files it wrote, replies it sent,
how they settled) and the coordinator's (commit intents and outcomes). In single mode both roles
are in the process; in distributed mode the coordinator's records are in the log of whichever
process held the role.

Records:
- ``files`` (worker): data files written for a table and the offset ranges they cover, not yet committed;
- ``reply`` (worker): those files were reported to the coordinator under a commit id;
- ``settled`` (worker): what became of them: ``landed`` (the table holds their offsets) or
  ``abandoned`` (their records are read again from the table's offsets); either way they leave
  ``pending``;
- ``intent``: a commit about to be attempted (commit id, table, ranges, the files it carries);
- ``outcome``: what became of an intent (commit id and table): ``committed`` (with a snapshot id), ``failed`` (its files
  go back to pending for another attempt) or ``abandoned`` (its records are read again from the
  table's offsets; the files are orphans for maintenance);
- ``offsets``: the offsets a table holds after a commit;
- ``dead_lettered`` (coordinator): the bad records an intent carried (``dead_letters``) are in the
  dead-letter topic. A ``committed`` outcome of an intent with bad records leaves them in
  ``dead_letters`` until then: the coordinator sends them when it starts (the dead-letter topic's
  own positions make that send exactly once).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


def intent_key(commit_id: str, table: str) -> str:
    return f"{commit_id} {table}"


@dataclass
class TxState:
    lsn: int = 0
    # table -> list of {"files": [...], "ranges": {...}} reported and not yet part of a commit
    pending: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # intent_key(commit id, table) -> {"commit_id", "table", "ranges", "files"} attempted, outcome
    # not yet known (one cycle commits several tables under one commit id)
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    # table -> {"topic/partition": next offset}
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    # the last few outcomes, for operators
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    # intent_key(commit id, table) -> {"commit_id", "table", "files"}: worker replies not yet settled
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)
    # intent_key(commit id, table) -> {"commit_id", "table", "dead_letters", "letters_from"?}: landed, not yet sent
    dead_letters: dict[str, dict[str, Any]] = field(default_factory=dict)

    KEEP_OUTCOMES = 100

    def copy(self) -> TxState:
        """A copy to apply records to: each of its maps copied, what they hold shared (``apply``
        replaces a table's entries, never changes them in place), so it costs the number of tables,
        not the size of the state."""
        return TxState(self.lsn, dict(self.pending), dict(self.intents), dict(self.offsets), list(self.outcomes),
                       dict(self.replies), dict(self.dead_letters))

    def apply(self, record: dict[str, Any]) -> None:
        """Apply one record: raises, changing nothing, on one that does not follow or is unknown.
        The entries it replaces are new objects, so a :meth:`copy` taken before is left as it was."""
        lsn = record["lsn"]
        if lsn != self.lsn + 1:
            raise ValueError(f"record lsn {lsn} does not follow {self.lsn}")
        kind = record["type"]
        if kind == "files":
            table = record["table"]
            self.pending[table] = [*self.pending.get(table, []), {"files": record["files"], "ranges": record["ranges"]}]
        elif kind == "intent":
            table = record["table"]
            self.intents[intent_key(record["commit_id"], table)] = {
                "commit_id": record["commit_id"], "table": table, "ranges": record["ranges"], "files": record["files"],
                **{k: record[k] for k in ("dead_letters", "letters_from", "topic_ids") if record.get(k)}}
            carried = set(record["files"])
            self.pending[table] = [p for p in self.pending.get(table, []) if not carried.issuperset(p["files"])]
            if not self.pending[table]:
                del self.pending[table]
        elif kind == "outcome":
            intent = self.intents.pop(self._intent_of(record), None)
            if intent is None:
                raise ValueError(f"outcome for unknown commit {record['commit_id']} of {record.get('table', '?')}")
            if record["status"] not in ("committed", "failed", "abandoned"):
                raise ValueError(f"unknown outcome status {record['status']!r}")
            if record["status"] == "failed":  # the files go back to pending for the next cycle
                self.pending[intent["table"]] = [*self.pending.get(intent["table"], []),
                                                 {"files": intent["files"], "ranges": intent["ranges"]}]
            if record["status"] == "committed" and intent.get("dead_letters"):
                self.dead_letters[intent_key(intent["commit_id"], intent["table"])] = {
                    "commit_id": intent["commit_id"], "table": intent["table"], "dead_letters": intent["dead_letters"],
                    **({"letters_from": intent["letters_from"]} if intent.get("letters_from") else {})}
            self.outcomes = (self.outcomes + [{"commit_id": record["commit_id"], "table": intent["table"],
                                               "status": record["status"],
                                               "snapshot_id": record.get("snapshot_id")}])[-self.KEEP_OUTCOMES:]
        elif kind == "reply":
            # one per table of a reply (a reply of several tables logs a record for each)
            self.replies[intent_key(record["commit_id"], record["table"])] = {
                "commit_id": record["commit_id"], "table": record["table"], "files": record["files"]}
        elif kind == "settled":
            if record["status"] not in ("landed", "abandoned"):
                raise ValueError(f"unknown settled status {record['status']!r}")
            gone = set(record["files"])
            table = record["table"]
            left = [p for p in self.pending.get(table, []) if not gone.issuperset(p["files"])]
            if left:
                self.pending[table] = left
            else:
                self.pending.pop(table, None)
            self.replies = {c: r for c, r in self.replies.items() if not gone.issuperset(r["files"])}
        elif kind == "dead_lettered":
            self.dead_letters.pop(intent_key(record["commit_id"], record["table"]), None)
        elif kind == "offsets":
            self.offsets[record["table"]] = {**self.offsets.get(record["table"], {}), **record["offsets"]}
        else:
            raise ValueError(f"unknown record type {kind!r}")
        self.lsn = lsn

    def _intent_of(self, outcome: dict[str, Any]) -> str:
        """The intent an outcome settles: by commit id and table; an outcome written before
        outcomes named their table settles the one intent of its commit id."""
        if "table" in outcome:
            return intent_key(outcome["commit_id"], outcome["table"])
        return next((k for k, i in self.intents.items() if i["commit_id"] == outcome["commit_id"]), "")

    def unresolved(self) -> dict[str, dict[str, Any]]:
        """Intents with no outcome, by :func:`intent_key`: resolve each against the catalog by its
        commit id (rule 5)."""
        return copy.deepcopy(self.intents)

    def to_json(self) -> dict[str, Any]:
        return {"lsn": self.lsn, "pending": self.pending, "intents": self.intents, "offsets": self.offsets,
                "outcomes": self.outcomes, "replies": self.replies, "dead_letters": self.dead_letters}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TxState:
        # checkpoints written before intents were keyed by table keep the commit id as the key
        intents = {intent_key(i.get("commit_id", k), i["table"]): {**i, "commit_id": i.get("commit_id", k)}
                   for k, i in data["intents"].items()}
        return cls(lsn=data["lsn"], pending=data["pending"], intents=intents, offsets=data["offsets"],
                   outcomes=data["outcomes"], replies=data.get("replies", {}),
                   dead_letters=data.get("dead_letters", {}))
