"""The coordinator's view of one commit cycle: which replies count, and when to commit. Pure.

Rules (exactly-once.md, rules 4 and 6):
- Replies to another commit id are not this cycle's (a late answer to an earlier StartCommit).
- Each worker answers once per cycle; a redelivered reply changes nothing.
- Generations fence zombies: a reply whose assignment generation is older than the newest
  generation any reply of this cycle carries for one of its partitions is dropped whole
  (``DataWritten`` and ``DataComplete`` of that worker), because its owner has been replaced.
  Its files are never committed; the partitions' new owner re-reads them from the table.
- The cycle is complete when every source partition is covered by a current ``DataComplete``;
  then every table is committed once, with a valid-through timestamp (VTTS: the oldest of the
  workers' newest record timestamps). After ``timeout_ms`` whatever arrived is committed, without
  VTTS (a partial commit).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from frazil.events.payloads import DataComplete, DataFileRef, DataWritten, DeadLetter, OffsetRange

TopicPartition = tuple[str, int]


class Readiness(enum.Enum):
    WAIT = "wait"
    FULL = "full"          # every partition answered: commit with VTTS
    PARTIAL = "partial"    # the timeout passed: commit what arrived, no VTTS
    EMPTY = "empty"        # the timeout passed and nothing arrived with data: end the cycle


@dataclass(frozen=True)
class TableCommit:
    """What one table gets in this cycle: every accepted file and range, from every worker."""

    table: str
    files: tuple[DataFileRef, ...]
    ranges: tuple[OffsetRange, ...]
    table_uuids: frozenset[str] = frozenset()   # what the workers wrote for ("" : not said)
    # the cycle's watermark, from every accepted DataComplete: kept with each table's offsets
    progress: tuple[tuple[str, int, int], ...] = ()
    # the watermark once every table of the cycle has landed: kept instead by the cycle's last
    # table commit when every commit before it landed (``Coordinator``)
    landed: tuple[tuple[str, int, int], ...] = ()
    # the bad records of ``ranges``: to the dead-letter topic once this commit lands
    dead_letters: tuple[DeadLetter, ...] = ()
    # the bad records named by replies of this cycle dropped as an older generation: sent only when
    # this commit id is found already landed (a coordinator that stopped or died after its catalog
    # commit may have taken those replies), and only below the offsets the table then holds
    stale_letters: tuple[DeadLetter, ...] = ()
    # where the dead-letter topic stood before this commit (``dead_letters.anchor``), kept with it
    letters_from: str = ""
    # not a commit: the commit id is sealed in the table (``Committer.seal``), and this says why
    seal: str = ""


@dataclass
class CommitState:
    commit_id: str
    partitions: frozenset[TopicPartition]    # every source partition of the pipeline
    started_ms: int
    timeout_ms: int
    fence: bool = True      # False only for the test that shows what the generation check prevents
    # single mode: the one in-process worker; once it has answered nobody else will, so its answer
    # ends the cycle (partial, without VTTS, if a rebalance took partitions away meanwhile)
    senders: int | None = None
    # a cycle an earlier coordinator started (a takeover): that coordinator may be a zombie still
    # able to land it in a table, with the replies this one dropped (see ``seals``)
    taken_over: bool = False
    _written: dict[str, list[DataWritten]] = field(default_factory=dict)    # by sender
    _complete: dict[str, DataComplete] = field(default_factory=dict)        # by sender
    _newest: dict[TopicPartition, int] = field(default_factory=dict)        # newest generation per partition
    dropped: list[str] = field(default_factory=list)                        # why replies were not taken
    _stale_letters: dict[str, list[DeadLetter]] = field(default_factory=dict)   # by table, from dropped replies
    # Kept as replies come, so that taking one costs what it carries, not what came before it (a
    # cycle of 100,000 partitions from 1,000 workers): per complete sender, the generation of each
    # partition its reply names (``_generation_of``) and its place in ``_complete``; per partition,
    # the complete senders naming it with that generation, and how many complete replies assign
    # it; how many of ``partitions`` none assigns; ``tables()`` and the watermarks (``progress()``,
    # then with ``landed``) until the next reply taken.
    _generations: dict[str, dict[TopicPartition, int]] = field(default_factory=dict, init=False, repr=False)
    _order: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _taken: int = field(default=0, init=False, repr=False)     # complete replies taken so far
    _holders: dict[TopicPartition, dict[str, int]] = field(default_factory=dict, init=False, repr=False)
    _assigned: dict[TopicPartition, int] = field(default_factory=dict, init=False, repr=False)
    _missing: int = field(default=0, init=False, repr=False)
    _tables: list[TableCommit] | None = field(default=None, init=False, repr=False)
    _marks: tuple[dict[TopicPartition, int], dict[TopicPartition, int]] | None = field(default=None, init=False,
                                                                                      repr=False)

    def __post_init__(self) -> None:
        self._missing = len(self.partitions)

    def add(self, sender: str, payload: DataWritten | DataComplete) -> bool:
        """Take one reply; ``False`` (with the reason in ``dropped``) when it does not count."""
        if payload.commit_id != self.commit_id:
            self.dropped.append(f"{sender}: reply to commit {payload.commit_id}, not {self.commit_id}")
            return False
        if sender in self._complete:
            self.dropped.append(f"{sender}: a second reply to {self.commit_id} (redelivered?)")
            return False
        self._tables = self._marks = None
        if isinstance(payload, DataWritten):
            self._written.setdefault(sender, []).append(payload)
            return True
        for a in payload.assignments:
            tp = (a.topic, a.partition)
            self._newest[tp] = max(self._newest.get(tp, a.generation), a.generation)
        self._complete[sender] = payload
        self._order[sender], self._taken = self._taken, self._taken + 1
        generations = self._generations[sender] = self._generation_of(sender)
        for tp, g in generations.items():
            self._holders.setdefault(tp, {})[sender] = g
        for a in payload.assignments:
            self._assign((a.topic, a.partition), 1)
        if self.fence:
            self._drop_stale(sender, payload)
        return sender in self._complete

    def _generation_of(self, sender: str) -> dict[TopicPartition, int]:
        out = {(a.topic, a.partition): a.generation for a in self._complete[sender].assignments}
        for written in self._written.get(sender, []):
            for r in written.ranges:
                out[(r.topic, r.partition)] = min(out.get((r.topic, r.partition), r.generation), r.generation)
        return out

    def _assign(self, tp: TopicPartition, n: int) -> None:
        """One more (``n=1``) or one fewer (``-1``) complete reply assigns ``tp``."""
        before = self._assigned.get(tp, 0)
        if before + n:
            self._assigned[tp] = before + n
        else:
            del self._assigned[tp]
        if (not before or not before + n) and tp in self.partitions:
            self._missing += -1 if not before else 1

    def _drop_stale(self, sender: str, payload: DataComplete) -> None:
        """Drop every complete reply with a generation older than the newest for one of its
        partitions. Only ``payload`` (``sender``'s, just taken) moved the newest generations, and
        only for the partitions it assigns: the replies that can have turned stale are its own
        and those naming one of those partitions with an older generation; every other one was
        checked against the same newest generations when it or a later reply came. They are
        dropped in the order they came, as a check of every complete reply would."""
        suspects = {sender}
        for a in payload.assignments:
            newest = self._newest[(a.topic, a.partition)]
            suspects.update(s for s, g in self._holders[(a.topic, a.partition)].items() if g < newest)
        for suspect in sorted(suspects, key=self._order.__getitem__):
            self._drop_if_stale(suspect)

    def _drop_if_stale(self, sender: str) -> None:
        stale = {tp: g for tp, g in self._generations[sender].items() if g < self._newest.get(tp, g)}
        if stale:
            self.dropped.append(f"{sender}: generation {min(stale.values())} is older than "
                                f"{max(self._newest[tp] for tp in stale)} for {sorted(stale)[:3]}; "
                                "its reply is dropped whole (a zombie)")
            self._drop(sender)

    def _drop(self, sender: str) -> None:
        for a in self._complete.pop(sender).assignments:
            self._assign((a.topic, a.partition), -1)
        del self._order[sender]
        for tp in self._generations.pop(sender):
            holders = self._holders[tp]
            del holders[sender]
            if not holders:
                del self._holders[tp]
        for written in self._written.pop(sender, []):
            self._stale_letters.setdefault(written.table, []).extend(written.dead_letters)

    def covered(self) -> frozenset[TopicPartition]:
        return frozenset(self._assigned)

    def readiness(self, now_ms: int) -> Readiness:
        if not self._missing:
            return Readiness.FULL
        if self.senders is not None and len(self._complete) >= self.senders:
            return Readiness.PARTIAL if self.tables() else Readiness.EMPTY
        if now_ms - self.started_ms < self.timeout_ms:
            return Readiness.WAIT
        return Readiness.PARTIAL if self.tables() else Readiness.EMPTY

    def tables(self) -> list[TableCommit]:
        """One entry per table, from the complete replies only (a worker's files count once its
        DataComplete, sent in the same transaction, has arrived)."""
        if self._tables is None:
            self._tables = self._table_commits()
        return list(self._tables)

    def _table_commits(self) -> list[TableCommit]:
        by_table: dict[str, tuple[list[DataFileRef], list[OffsetRange], set[str], list[DeadLetter]]] = {}
        for sender in sorted(self._complete):
            for written in self._written.get(sender, []):
                files, ranges, uuids, dead = by_table.setdefault(written.table, ([], [], set(), []))
                files.extend(written.files)
                ranges.extend(written.ranges)
                uuids.add(written.table_uuid)
                dead.extend(written.dead_letters)
        progress, landed = (tuple(sorted((t, p, o) for (t, p), o in marks.items())) for marks in self._watermarks())
        return [TableCommit(t, tuple(f), tuple(r), frozenset(u), progress, landed, _ordered(d),
                            _ordered(self._stale_letters.get(t, [])))
                for t, (f, r, u, d) in sorted(by_table.items()) if f or r]

    def seals(self) -> list[TableCommit]:
        """A taken-over cycle: the tables that dropped replies carried bad records for and no
        accepted reply names. This coordinator commits nothing there, but the one it took over from
        may be a paused zombie that accepted those replies and lands the commit after this cycle
        is closed, when nobody would send their bad records any more. Sealing the commit id there
        first decides it: either that commit has landed (its bad records are sent, those the
        table's offsets passed) or it never will."""
        if not self.taken_over:
            return []
        data = {t.table for t in self.tables()}
        return [TableCommit(t, (), (), stale_letters=_ordered(letters),
                            seal=f"taken over; {len(letters)} bad record(s) of dropped replies")
                for t, letters in sorted(self._stale_letters.items()) if letters and t not in data]

    def progress(self, *, landed: bool = False) -> dict[TopicPartition, int]:
        """Per partition, the highest watermark an accepted reply reported (stale replies were
        dropped with their generation; a watermark is never ahead of the truth, only behind);
        ``landed``: the one each reported for once its reply has landed, where it said."""
        return dict(self._watermarks()[landed])

    def _watermarks(self) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """``progress()`` and ``progress(landed=True)``, from one pass over the replies."""
        if self._marks is None:
            out: dict[TopicPartition, int] = {}
            landed: dict[TopicPartition, int] = {}
            for complete in self._complete.values():
                for a in complete.assignments:
                    tp = (a.topic, a.partition)
                    if a.progress is not None:
                        out[tp] = max(out.get(tp, a.progress), a.progress)
                    mark = a.progress if a.landed is None else a.landed
                    if mark is not None:
                        landed[tp] = max(landed.get(tp, mark), mark)
            self._marks = out, landed
        return self._marks

    def valid_through_ms(self) -> int | None:
        """VTTS for a full cycle: the oldest newest-record timestamp among the workers that have
        taken records (a worker that has taken none has nothing to hold it back; like the Iceberg
        sink, records not yet fetched are not known). None for a partial cycle, or when no worker
        has taken a record."""
        if self._missing:
            return None
        stamps = [c.last_record_ms for c in self._complete.values() if c.last_record_ms is not None]
        return min(stamps) if stamps else None


def _ordered(letters: list[DeadLetter]) -> tuple[DeadLetter, ...]:
    return tuple(sorted(letters, key=lambda x: (x.topic, x.partition, x.offset)))
