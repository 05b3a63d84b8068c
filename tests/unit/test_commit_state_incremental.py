"""``CommitState`` keeps what it decides from as replies come (generations, coverage, tables):
whatever the replies, it decides as checking every complete reply after each one would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from frazil.coordination.commit_state import CommitState, Readiness
from frazil.events import Assignment, DataComplete, DataFileRef, DataWritten, DeadLetter, OffsetRange

P = frozenset(("t", p) for p in range(4))


class EveryReply(CommitState):
    """The definition: after a complete reply, every complete reply is checked again, with its
    generations read from its reply anew."""

    def _drop_stale(self, sender: str, payload: DataComplete) -> None:
        for other in list(self._complete):
            assert self._generations[other] == self._generation_of(other)
            self._drop_if_stale(other)


partition = st.integers(0, 5)   # 4 and 5: not among the cycle's partitions
generation = st.integers(1, 3)
written = st.builds(lambda table, tps, gen, bad: DataWritten(
    "c", table, (DataFileRef(f"{table}-{tps}-{gen}", "PARQUET", 1, 1, 0),),
    tuple(OffsetRange("t", p, 0, 5, gen) for p in tps), dead_letters=(DeadLetter("t", tps[0], 1, "", "bad"),) if bad
    and tps else ()), st.sampled_from(["db.a", "db.b"]), st.lists(partition, max_size=3), generation, st.booleans())
mark = st.none() | st.integers(0, 9)
complete = st.builds(lambda tps, gen, progress, landed: DataComplete(
    "c", tuple(Assignment("t", p, gen, progress, landed) for p in tps), progress), st.lists(partition, max_size=4),
    generation, mark, mark)
reply = st.tuples(st.sampled_from(["w1", "w2", "w3", "w4"]), written | complete | complete.map(
    lambda c: DataComplete("other", c.assignments)))


@settings(max_examples=400, deadline=None)
@given(st.lists(reply, max_size=24), st.booleans())
def test_every_decision_is_the_one_checking_every_reply_again_gives(
        replies: list[tuple[str, DataWritten | DataComplete]], taken_over: bool) -> None:
    kept = CommitState("c", P, 0, 1000, taken_over=taken_over)
    every = EveryReply("c", P, 0, 1000, taken_over=taken_over)
    for sender, payload in replies:
        assert kept.add(sender, payload) == every.add(sender, payload)
        assert kept.dropped == every.dropped
        assert kept.covered() == every.covered() == frozenset(
            (a.topic, a.partition) for c in every._complete.values() for a in c.assignments)
        for now in (1, 1000):
            assert kept.readiness(now) is every.readiness(now)
        assert (kept.readiness(1) is Readiness.FULL) == (P <= kept.covered())
        assert kept.tables() == every._table_commits() and kept.seals() == every.seals()
        assert kept.valid_through_ms() == every.valid_through_ms()
        for landed in (False, True):
            assert kept.progress(landed=landed) == watermark(every, landed=landed)


def watermark(state: CommitState, *, landed: bool) -> dict[tuple[str, int], int]:
    """``progress()`` by its definition: per partition, the highest mark of an accepted reply."""
    out: dict[tuple[str, int], int] = {}
    for complete in state._complete.values():
        for a in complete.assignments:
            mark = a.landed if landed and a.landed is not None else a.progress
            if mark is not None:
                out[(a.topic, a.partition)] = max(out.get((a.topic, a.partition), mark), mark)
    return out
