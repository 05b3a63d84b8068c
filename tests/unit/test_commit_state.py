"""The coordinator's commit-cycle decisions (pure): what counts, when to commit, zombies dropped."""

from __future__ import annotations

from frazil.coordination.commit_state import CommitState, Readiness
from frazil.events import Assignment, DataComplete, DataFileRef, DataWritten, OffsetRange

P = frozenset({("t", 0), ("t", 1), ("t", 2)})


def state() -> CommitState:
    return CommitState("c1", P, started_ms=1000, timeout_ms=5000)


def written(table: str, tps: list[int], gen: int, commit: str = "c1") -> DataWritten:
    return DataWritten(commit, table, (DataFileRef(f"f-{table}-{tps}-{gen}", "PARQUET", 10, 100, 0),),
                       tuple(OffsetRange("t", p, 0, 10, gen) for p in tps))


def complete(tps: list[int], gen: int, last: int | None = 50, commit: str = "c1") -> DataComplete:
    return DataComplete(commit, tuple(Assignment("t", p, gen) for p in tps), last)


def test_every_partition_answered_is_a_full_commit_per_table_with_vtts() -> None:
    s = state()
    s.add("w1", written("db.a", [0, 1], 3))
    s.add("w1", written("db.b", [0], 3))
    s.add("w1", complete([0, 1], 3, last=70))
    assert s.readiness(1001) is Readiness.WAIT
    s.add("w2", written("db.a", [2], 3))
    s.add("w2", complete([2], 3, last=40))
    assert s.readiness(1001) is Readiness.FULL
    tables = {t.table: t for t in s.tables()}
    assert sorted(tables) == ["db.a", "db.b"]  # one commit per table, however many workers
    assert len(tables["db.a"].files) == 2 and {r.partition for r in tables["db.a"].ranges} == {0, 1, 2}
    assert s.valid_through_ms() == 40


def test_after_the_timeout_what_arrived_is_a_partial_commit_without_vtts() -> None:
    s = state()
    s.add("w1", written("db.a", [0], 3))
    s.add("w1", complete([0, 1], 3))
    assert s.readiness(5999) is Readiness.WAIT
    assert s.readiness(6000) is Readiness.PARTIAL
    assert s.valid_through_ms() is None and len(s.tables()) == 1


def test_an_idle_cycle_ends_empty_after_the_timeout() -> None:
    s = state()
    s.add("w1", complete([0], 3))
    assert s.readiness(6000) is Readiness.EMPTY


def test_files_count_only_with_their_workers_data_complete() -> None:
    s = state()
    s.add("w1", written("db.a", [0], 3))
    assert s.tables() == []


def test_a_zombie_reply_with_an_older_generation_is_dropped_whole() -> None:
    s = state()
    s.add("zombie", written("db.a", [0, 1], 3))
    s.add("zombie", complete([0, 1], 3))
    # a rebalance: the new owner of partition 1 answers with generation 4
    s.add("w2", written("db.a", [1, 2], 4))
    assert s.add("w2", complete([1, 2], 4))
    assert [f.path for t in s.tables() for f in t.files] == ["f-db.a-[1, 2]-4"]
    assert any("zombie: generation 3 is older than 4" in d for d in s.dropped)
    # and a late zombie reply after the newer one is refused too
    s2 = state()
    s2.add("w2", complete([1, 2], 4))
    s2.add("zombie", written("db.a", [0, 1], 3))
    assert not s2.add("zombie", complete([0, 1], 3))
    assert s2.tables() == []


def test_replies_to_another_commit_and_redeliveries_do_not_count() -> None:
    s = state()
    assert not s.add("w1", complete([0], 3, commit="c0"))
    assert s.add("w1", complete([0], 3))
    assert not s.add("w1", complete([0], 3))
    assert s.covered() == {("t", 0)} and len(s.dropped) == 2


def test_a_worker_that_has_taken_no_record_does_not_hold_vtts_back() -> None:
    s = state()
    s.add("w1", complete([0, 1], 3, last=None))
    s.add("w2", complete([2], 3, last=10))
    assert s.readiness(1001) is Readiness.FULL and s.valid_through_ms() == 10
    idle = state()
    idle.add("w1", complete([0, 1, 2], 3, last=None))
    assert idle.valid_through_ms() is None


def test_in_single_mode_the_one_workers_answer_ends_the_cycle_even_without_every_partition() -> None:
    """A rebalance took the worker's partitions while it wrote its reply: it answers for none.
    Nobody else can answer in single mode, so the cycle ends at once (partial, no VTTS) instead of
    waiting out the timeout (an hour for backfill)."""
    state = CommitState("c1", frozenset({("t", 0), ("t", 1)}), 0, 3_600_000, senders=1)
    state.add("w", DataWritten("c1", "db.t", (DataFileRef("f", "PARQUET", 1, 1, 0),), (OffsetRange("t", 0, 0, 5, 3),)))
    assert state.readiness(1) is Readiness.WAIT
    state.add("w", DataComplete("c1", (), 100))
    assert state.readiness(1) is Readiness.PARTIAL and state.valid_through_ms() is None
    empty = CommitState("c2", frozenset({("t", 0)}), 0, 3_600_000, senders=1)
    empty.add("w", DataComplete("c2", (), None))
    assert empty.readiness(1) is Readiness.EMPTY


def test_every_table_commit_carries_the_watermark_of_the_accepted_replies_only() -> None:
    s = state()
    s.add("old", written("db.a", [0], 2))
    s.add("old", DataComplete("c1", (Assignment("t", 0, 2, progress=900),), 50))   # a zombie's: dropped whole
    s.add("w1", written("db.a", [0], 3))
    s.add("w1", DataComplete("c1", (Assignment("t", 0, 3, progress=100), Assignment("t", 1, 3)), 50))
    s.add("w2", written("db.b", [2], 3))
    s.add("w2", DataComplete("c1", (Assignment("t", 2, 3, progress=7),), 50))
    assert s.progress() == {("t", 0): 100, ("t", 2): 7}
    assert {t.table: t.progress for t in s.tables()} == {"db.a": (("t", 0, 100), ("t", 2, 7)),
                                                          "db.b": (("t", 0, 100), ("t", 2, 7))}


def test_the_bad_records_of_a_dropped_zombie_reply_are_kept_apart() -> None:
    """Not committed, not sent with this cycle's commit; kept for a commit found already landed
    (coordinator.py sends those below the table's offsets)."""
    from dataclasses import replace

    from frazil.events import DeadLetter

    s = state()
    s.add("zombie", replace(written("db.a", [0, 1], 3), dead_letters=(DeadLetter("t", 1, 7, "id", "bad"),)))
    s.add("zombie", complete([0, 1], 3))
    s.add("w2", replace(written("db.a", [1, 2], 4), dead_letters=(DeadLetter("t", 2, 3, "id", "bad"),)))
    s.add("w2", complete([1, 2], 4))
    (table,) = s.tables()
    assert [d.offset for d in table.dead_letters] == [3] and [d.offset for d in table.stale_letters] == [7]


def test_a_taken_over_cycle_seals_the_tables_only_its_dropped_replies_carried_bad_records_for() -> None:
    """The coordinator it took over from may be a zombie that accepted those replies; where this one
    commits nothing, the commit id is sealed so the zombie's commit cannot land after the cycle is
    closed. Only in a taken-over cycle: nobody else can land a cycle this coordinator started."""
    from dataclasses import replace

    from frazil.events import DeadLetter

    def replies(s: CommitState) -> CommitState:
        s.add("zombie", replace(written("db.a", [0], 3), dead_letters=(DeadLetter("t", 0, 7, "id", "bad"),)))
        s.add("zombie", replace(written("db.b", [0], 3), dead_letters=(DeadLetter("t", 0, 8, "id", "bad"),)))
        s.add("zombie", written("db.c", [0], 3))   # no bad record: its landing loses nothing
        s.add("zombie", complete([0], 3))
        s.add("w2", written("db.b", [0, 1, 2], 4))   # db.b is committed by this coordinator: no seal
        s.add("w2", complete([0, 1, 2], 4))
        return s

    taken = replies(CommitState("c1", P, started_ms=1000, timeout_ms=5000, taken_over=True))
    assert [t.table for t in taken.tables()] == ["db.b"]
    (seal,) = taken.seals()
    assert seal.table == "db.a" and seal.seal and not seal.files and not seal.ranges and not seal.dead_letters
    assert [d.offset for d in seal.stale_letters] == [7]
    assert replies(state()).seals() == []
