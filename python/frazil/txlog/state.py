"""The coordinator's recoverable state and how each journal record changes it (pure).

Records:
- ``files``: data files written for a table and the offset ranges they cover, not yet committed;
- ``intent``: a commit about to be attempted (commit id, table, ranges, the files it carries);
- ``outcome``: what became of an intent: ``committed`` (with a snapshot id), ``failed`` (its files
  go back to pending for another attempt) or ``abandoned`` (its records are read again from the
  table's offsets; the files are orphans for maintenance);
- ``offsets``: the offsets a table holds after a commit.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TxState:
    lsn: int = 0
    # table -> list of {"files": [...], "ranges": {...}} reported and not yet part of a commit
    pending: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # commit id -> {"table", "ranges", "files"} attempted, outcome not yet known
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    # table -> {"topic/partition": next offset}
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    # the last few outcomes, for operators
    outcomes: list[dict[str, Any]] = field(default_factory=list)

    KEEP_OUTCOMES = 100

    def apply(self, record: dict[str, Any]) -> None:
        lsn = record["lsn"]
        if lsn != self.lsn + 1:
            raise ValueError(f"record lsn {lsn} does not follow {self.lsn}")
        kind = record["type"]
        if kind == "files":
            self.pending.setdefault(record["table"], []).append({"files": record["files"], "ranges": record["ranges"]})
        elif kind == "intent":
            table = record["table"]
            self.intents[record["commit_id"]] = {"table": table, "ranges": record["ranges"], "files": record["files"]}
            carried = set(record["files"])
            self.pending[table] = [p for p in self.pending.get(table, []) if not carried.issuperset(p["files"])]
            if not self.pending[table]:
                del self.pending[table]
        elif kind == "outcome":
            intent = self.intents.pop(record["commit_id"], None)
            if intent is None:
                raise ValueError(f"outcome for unknown commit {record['commit_id']}")
            if record["status"] not in ("committed", "failed", "abandoned"):
                raise ValueError(f"unknown outcome status {record['status']!r}")
            if record["status"] == "failed":  # the files go back to pending for the next cycle
                self.pending.setdefault(intent["table"], []).append({"files": intent["files"], "ranges": intent["ranges"]})
            self.outcomes = (self.outcomes + [{"commit_id": record["commit_id"], "status": record["status"],
                                               "snapshot_id": record.get("snapshot_id")}])[-self.KEEP_OUTCOMES:]
        elif kind == "offsets":
            self.offsets.setdefault(record["table"], {}).update(record["offsets"])
        else:
            raise ValueError(f"unknown record type {kind!r}")
        self.lsn = lsn

    def unresolved(self) -> dict[str, dict[str, Any]]:
        """Intents with no outcome: resolve each against the catalog by commit id (rule 5)."""
        return copy.deepcopy(self.intents)

    def to_json(self) -> dict[str, Any]:
        return {"lsn": self.lsn, "pending": self.pending, "intents": self.intents, "offsets": self.offsets,
                "outcomes": self.outcomes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TxState:
        return cls(lsn=data["lsn"], pending=data["pending"], intents=data["intents"], offsets=data["offsets"],
                   outcomes=data["outcomes"])
