"""Bad records: records that cannot become a row of a table they go to. With ``on_bad_record =
"fail"`` the first one stops the pipeline, naming the record, the field and the fix; with
``"dead_letter"`` each is held with its table's rows (its range counts it as consumed) and the
coordinator sends it to the dead-letter topic once that commit lands. Never a silent drop.

Records that routing itself finds bad (a template field naming no table, a value that is not a
JSON object where a route field must be read, a table named by the records that cannot be opened)
go with the commits of the pipeline's first declared table, its *carrier*: always the same one,
so across restarts its offsets say which were counted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from frazil.buffers.record_buffer import RecordProblem
from frazil.buffers.state import Buffers
from frazil.buffers.targets import Target
from frazil.config import Config
from frazil.errors import RecordDecodeError
from frazil.events.payloads import DeadLetter
from frazil.iceberg.offsets import TopicPartition
from frazil.kafka.copies import SourceCopies
from frazil.kafka.fetch import Record
from frazil.metrics import Metrics, Stats

log = logging.getLogger(__name__)

# Bad records held for the dead-letter topic before a cycle is asked for: a reply names each one
# (as runs, payloads.letter_runs), and a reply must stay well inside the broker's message limit
# (1 MiB by default, after compression) whatever the records' reasons.
MAX_DEAD_LETTERS = 50_000
MAX_LETTER_BYTES = 512 * 1024   # their estimated size in a reply, before compression


class LetterSize:
    """What held bad records cost in a reply, estimated from those found lately (pure): a record
    that continues a run (same partition, field and reason as the one before) costs its offset
    step, a few bytes; one that starts a run costs its strings. The bytes per record are decayed
    over the last few thousand records, and the last batch's own figure is used when higher, so a
    change of cause shows at once."""

    STEP = 3    # bytes of an offset step in a run, and of the array's count
    RUN = 16    # bytes of a run besides its strings: partition, union tags, counts, first offset
    HALF_LIFE = 2_000   # records

    def __init__(self) -> None:
        self._bytes = self._records = self._last = 0.0

    def found(self, topic: str, problems: Iterable[tuple[str, str, str | None]]) -> None:
        """``problems``: (field, reason, meant_for) of bad records of one partition, in order."""
        size, count, run = 0, 0, None
        for problem in problems:
            size += self.STEP if problem == run else self.RUN + len(topic) + sum(len(p or "") for p in problem)
            count, run = count + 1, problem
        if count:
            keep = 0.5 ** (count / self.HALF_LIFE)
            self._bytes, self._records = self._bytes * keep + size, self._records * keep + count
            self._last = size / count

    def of(self, held: int) -> float:
        """The estimated bytes of ``held`` bad records in a reply."""
        return held * max(self._last, self._bytes / self._records) if self._records else 0.0


def too_many(held: int, size: LetterSize) -> bool:
    """Whether bad records held for the dead-letter topic are enough to ask for a cycle."""
    return held >= MAX_DEAD_LETTERS or size.of(held) >= MAX_LETTER_BYTES


class BadRecords:
    def __init__(self, cfg: Config, buffers: Buffers, metrics: Metrics, stats: Stats, *,
                 copies: SourceCopies | None = None) -> None:
        """``copies``: where the bad records' own bytes are kept for this process's dead-letter sink."""
        self._cfg, self._buffers, self._metrics, self._stats = cfg, buffers, metrics, stats
        self._copies = copies
        self.dead_letter = cfg.on_bad_record == "dead_letter"
        self._several = not buffers.targets.single   # messages name the table when there may be several
        self.size = LetterSize()

    def found(self, name: str, tp: TopicPartition, errors: Sequence[RecordProblem], *, what: str = "",
              lookup: Callable[[list[int]], list[Record]] | None = None) -> None:
        """``errors``: records of ``tp`` that table ``name`` could not take (``what``: "tombstone"
        when they were tombstones). Stops the pipeline, or holds them for the dead-letter topic
        (``lookup``: the records at some offsets, whose copies the sink then need not read back)."""
        if not errors:
            return
        first = errors[0]
        self._metrics.records_bad.inc(len(errors))
        if not self.dead_letter:
            for_table = f" ({what} for table {name})" if what else (f" (for table {name})" if self._several else "")
            raise decode_error(tp, first, len(errors) - 1, for_table)
        # not in the buffer: held with its rows, and sent once the range they share has landed
        self._buffers.targets[name].dead.extend(DeadLetter(tp[0], tp[1], e.offset, e.field, e.reason) for e in errors)
        self.size.found(tp[0], ((e.field, e.reason, None) for e in errors))
        if self._copies is not None and lookup is not None:
            self._copies.keep(lookup([e.offset for e in errors]))
        self._stats.records_bad += len(errors)
        log.debug("%s[%d]: %d bad record(s) for %s, first at offset %d (field %r: %s); held for the dead-letter "
                  "topic", tp[0], tp[1], len(errors), name, first.offset, first.field, first.reason)

    def carrier(self) -> Target | None:
        """The table whose commits count the records routing finds bad: the first declared one."""
        first = self._cfg.tables[0].name if self._cfg.tables else None
        targets = self._buffers.targets
        return targets[first] if first is not None and first in targets else None

    def for_routing(self, tp: TopicPartition, records: Sequence[Record], members: Sequence[int], field: str,
                    reason: str, *, meant_for: str) -> list[DeadLetter]:
        """``records`` at ``members`` are bad records for routing itself (``meant_for``: the table
        they name, which cannot be opened; "" for none). With ``on_bad_record = "fail"`` the
        pipeline stops on the first. With ``"dead_letter"`` they are returned for
        :meth:`hold_for_routing`, less those below the carrier's offsets (counted before); without
        a carrier open, the pipeline stops, saying so."""
        first = records[members[0]]
        carrier = self.carrier()
        if not self.dead_letter or carrier is None:
            why = "" if not self.dead_letter else (
                "; on_bad_record = \"dead_letter\" counts records that routing finds bad in the commits of the "
                "pipeline's first declared table, and "
                + (f"{self._cfg.tables[0].name} is not open yet" if self._cfg.tables else "there is none: declare one "
                   "([table] or [[tables]], with its columns)"))
            more = f" ({len(members) - 1} more such record(s) in the same batch)" if len(members) > 1 else ""
            raise RecordDecodeError(topic=tp[0], partition=tp[1], offset=first.offset, field=field,
                                    reason=reason + more + why)
        floor = carrier.floors.get(tp)
        kept = [i for i in members if floor is None or records[i].offset >= floor]
        if self._copies is not None:
            self._copies.keep(records[i] for i in kept)
        return [DeadLetter(tp[0], tp[1], records[i].offset, field, reason, meant_for) for i in kept]

    def hold_for_routing(self, tp: TopicPartition, letters: list[DeadLetter]) -> None:
        """Records routing found bad go with the carrier's commits: its range of ``tp`` covers them."""
        carrier = self.carrier()
        assert carrier is not None   # for_routing checked
        letters.sort(key=lambda d: d.offset)
        carrier.dead.extend(letters)
        self.size.found(tp[0], ((d.field, d.reason, d.meant_for) for d in letters))
        self._buffers.positions.table_took(carrier.name, tp)   # its commit counts them
        self._metrics.records_bad.inc(len(letters))
        self._stats.records_bad += len(letters)
        log.debug("%s[%d]: %d bad record(s) for routing, first at offset %d (%s: %s); held with %s for the dead-letter "
                  "topic", tp[0], tp[1], len(letters), letters[0].offset, letters[0].meant_for or "no table",
                  letters[0].reason, carrier.name)

    @property
    def held(self) -> int:
        """Bad records buffered for the dead-letter topic (none to count unless they go there)."""
        return self._buffers.targets.dead_letters if self.dead_letter else 0


def decode_error(tp: TopicPartition, first: RecordProblem, more: int, suffix: str = "") -> RecordDecodeError:
    """The error that stops the pipeline at ``first`` (``more`` bad records followed it)."""
    return RecordDecodeError(topic=tp[0], partition=tp[1], offset=first.offset, field=first.field,
                             reason=first.reason + (f" ({more} more bad record(s) in the same batch)" if more else "")
                             + suffix)
