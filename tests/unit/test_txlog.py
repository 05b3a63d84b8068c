"""The transaction log on disk: round trips, checkpoints, torn tails, corruption, bounded size."""

from __future__ import annotations

from pathlib import Path

import pytest

from frazil.errors import CorruptJournalError
from frazil.txlog import JournalPolicy, TxState, framing, open_journal, recover


def files(i: int) -> dict:
    return {"type": "files", "table": "db.t", "files": [f"f{i}.parquet"], "ranges": {"t/0": [i, i + 1]}}


def pending_files(state: TxState) -> list[str]:
    return [f for p in state.pending.get("db.t", []) for f in p["files"]]


def segment(directory: Path) -> Path:
    return sorted(directory.glob("segment-*.log"))[-1]


def test_worker_records_leave_pending_when_settled_and_survive_a_checkpoint() -> None:
    s = TxState()
    s.apply({**files(0), "lsn": 1})
    s.apply({**files(1), "lsn": 2})
    s.apply({"type": "reply", "commit_id": "c1", "table": "db.t", "files": ["f0.parquet"], "lsn": 3})
    s.apply({"type": "reply", "commit_id": "c1", "table": "db.u", "files": ["u0.parquet"], "lsn": 4})
    assert s.replies == {"c1 db.t": {"commit_id": "c1", "table": "db.t", "files": ["f0.parquet"]},
                         "c1 db.u": {"commit_id": "c1", "table": "db.u", "files": ["u0.parquet"]}}   # one per table
    s.apply({"type": "settled", "table": "db.t", "files": ["f0.parquet"], "status": "landed", "lsn": 5})
    assert pending_files(s) == ["f1.parquet"] and list(s.replies) == ["c1 db.u"]
    again = TxState.from_json(s.to_json())
    assert again == s
    s.apply({"type": "settled", "table": "db.t", "files": ["f1.parquet"], "status": "abandoned", "lsn": 6})
    assert s.pending == {}
    with pytest.raises(ValueError, match="settled status"):
        s.apply({"type": "settled", "table": "db.t", "files": [], "status": "maybe", "lsn": 7})


def test_state_transitions() -> None:
    s = TxState()
    s.apply({**files(0), "lsn": 1})
    s.apply({**files(1), "lsn": 2})
    s.apply({"type": "intent", "commit_id": "c1", "table": "db.t", "ranges": {}, "files": ["f0.parquet"], "lsn": 3})
    assert pending_files(s) == ["f1.parquet"] and s.unresolved() == {
        "c1 db.t": {"commit_id": "c1", "table": "db.t", "ranges": {}, "files": ["f0.parquet"]}}
    s.apply({"type": "outcome", "commit_id": "c1", "status": "failed", "lsn": 4})
    assert pending_files(s) == ["f1.parquet", "f0.parquet"] and s.unresolved() == {}
    s.apply({"type": "offsets", "table": "db.t", "offsets": {"t/0": 7}, "lsn": 5})
    assert s.offsets == {"db.t": {"t/0": 7}}
    with pytest.raises(ValueError, match="does not follow"):
        s.apply({**files(9), "lsn": 9})
    with pytest.raises(ValueError, match="unknown commit"):
        s.apply({"type": "outcome", "commit_id": "nope", "status": "committed", "lsn": 6})


def test_round_trip_through_checkpoints(tmp_path: Path) -> None:
    journal, recovered = open_journal(tmp_path, JournalPolicy(checkpoint_records=7))
    assert recovered.state.lsn == 0 and recovered.checkpoint is None
    for i in range(20):
        journal.append([files(i)])
    journal.close()
    again = recover(tmp_path)
    assert again.checkpoint is not None and again.checkpoint.name.endswith(f"{14:020d}.json")
    assert again.replayed == 6 and again.state.lsn == 20
    assert pending_files(again.state) == [f"f{i}.parquet" for i in range(20)]


def test_a_rejected_record_writes_nothing(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path)
    journal.append([files(0)])
    size = segment(tmp_path).stat().st_size
    with pytest.raises(ValueError):
        journal.append([files(1), {"type": "outcome", "commit_id": "ghost", "status": "committed"}])
    assert segment(tmp_path).stat().st_size == size and journal.state.lsn == 1
    assert pending_files(journal.state) == ["f0.parquet"]   # the group's first record was not applied either
    journal.close()


def test_an_append_changes_no_state_taken_before_it_and_keeps_no_callers_object(tmp_path: Path) -> None:
    """Appends apply to a copy of the state's maps (their cost is the number of tables, not the
    state's size): what a record replaces is new, so a failed group leaves every entry as it was,
    and the state holds what the log holds, not the caller's lists."""
    journal, _ = open_journal(tmp_path)
    journal.append([files(0), {"type": "offsets", "table": "db.t", "offsets": {"t/0": 1}},
                    {"type": "intent", "commit_id": "c1", "table": "db.t", "ranges": {}, "files": ["f9.parquet"]}])
    before = journal.state
    record = files(1)
    journal.append([record, {"type": "offsets", "table": "db.t", "offsets": {"t/0": 2, "t/1": 5}},
                    {"type": "outcome", "commit_id": "c1", "table": "db.t", "status": "failed"}])
    assert pending_files(before) == ["f0.parquet"] and before.offsets == {"db.t": {"t/0": 1}}
    assert pending_files(journal.state) == ["f0.parquet", "f1.parquet", "f9.parquet"]
    assert journal.state.offsets == {"db.t": {"t/0": 2, "t/1": 5}}
    record["files"].append("later.parquet")
    assert pending_files(journal.state) == ["f0.parquet", "f1.parquet", "f9.parquet"]
    journal.close()
    assert recover(tmp_path).state.to_json() == journal.state.to_json()


@pytest.mark.parametrize("cut", [1, 4, 8, 9, -1])
def test_a_torn_tail_is_cut_and_appending_goes_on(tmp_path: Path, cut: int) -> None:
    journal, _ = open_journal(tmp_path)
    for i in range(3):
        journal.append([files(i)])
    journal.close()
    seg = segment(tmp_path)
    data = seg.read_bytes()
    last_frame = len(framing.encode({**files(2), "lsn": 3}))
    keep = len(data) - last_frame + (cut if cut > 0 else last_frame + cut)
    seg.write_bytes(data[:keep])
    journal, recovered = open_journal(tmp_path)
    assert recovered.state.lsn == 2 and recovered.truncated and recovered.truncated[0][1] == len(data) - last_frame
    assert seg.stat().st_size == len(data) - last_frame
    assert journal.append([files(2)]) == 3
    journal.close()
    assert pending_files(recover(tmp_path).state) == ["f0.parquet", "f1.parquet", "f2.parquet"]


def test_a_last_frame_of_zeros_is_a_torn_tail(tmp_path: Path) -> None:
    """The file grew but the data never reached the disk: a frame-length run of zeros."""
    journal, _ = open_journal(tmp_path)
    journal.append([files(0)])
    journal.close()
    seg = segment(tmp_path)
    frame = framing.encode({**files(1), "lsn": 2})
    seg.write_bytes(seg.read_bytes() + frame[:8] + b"\0" * (len(frame) - 8))
    assert recover(tmp_path).state.lsn == 1


def test_a_corrupt_record_in_the_middle_is_an_error_naming_file_and_position(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path)
    for i in range(3):
        journal.append([files(i)])
    journal.close()
    seg = segment(tmp_path)
    data = bytearray(seg.read_bytes())
    first = len(framing.encode({**files(0), "lsn": 1}))
    data[first + 12] ^= 0xFF  # inside the second frame's payload
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError, match=rf"{seg.name} is damaged at byte {first} \(checksum mismatch"):
        recover(tmp_path)


def test_a_damaged_checkpoint_is_named_and_an_unfinished_one_ignored(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path, JournalPolicy(checkpoint_records=2))
    for i in range(3):
        journal.append([files(i)])
    journal.close()
    (tmp_path / "checkpoint-00000000000000000099.json.tmp").write_text('{"crc": 1, "sta')
    assert recover(tmp_path).state.lsn == 3
    assert not list(tmp_path.glob("*.tmp"))
    checkpoint = sorted(tmp_path.glob("checkpoint-*.json"))[-1]
    checkpoint.write_text(checkpoint.read_text().replace("f0", "fX"))
    with pytest.raises(CorruptJournalError, match=checkpoint.name):
        recover(tmp_path)


def test_disk_use_stays_bounded_over_a_long_run(tmp_path: Path) -> None:
    policy = JournalPolicy(fsync="never", checkpoint_records=500)
    journal, _ = open_journal(tmp_path, policy)
    peak_bytes = peak_files = 0
    for i in range(20_000):
        lsn = journal.append([files(i)])
        if i % 3 == 0:  # keep the state small: commit what was reported
            journal.append([{"type": "intent", "commit_id": f"c{i}", "table": "db.t", "ranges": {},
                             "files": pending_files(journal.state)},
                            {"type": "outcome", "commit_id": f"c{i}", "status": "committed", "snapshot_id": i}])
        peak_bytes = max(peak_bytes, journal.disk_bytes())
        peak_files = max(peak_files, len(list(tmp_path.iterdir())))
    journal.close()
    assert lsn > 20_000 and peak_files <= 3
    assert peak_bytes < 400_000, peak_bytes
    assert recover(tmp_path).state.lsn == journal.state.lsn


def test_the_operator_command_prints_without_changing_anything(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from frazil.cli import main

    with open_journal(tmp_path, JournalPolicy(checkpoint_records=4))[0] as journal:
        for i in range(5):
            journal.append([files(i)])
        journal.append([{"type": "intent", "commit_id": "c9", "table": "db.t", "ranges": {}, "files": ["f0.parquet"]}])
    seg = segment(tmp_path)
    seg.write_bytes(seg.read_bytes() + b"\x05\x00")  # a torn tail
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(["txlog", "--dir", str(tmp_path), "--tail", "2"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint   checkpoint-00000000000000000004.json" in out and "last lsn     6 (2 record(s)" in out
    assert "torn tail" in out and "unresolved   c9 -> db.t" in out and "pending      db.t: 4 file(s)" in out
    assert '"commit_id": "c9"' in out
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_one_commit_id_carries_an_intent_per_table_and_each_outcome_settles_its_own() -> None:
    s = TxState()
    s.apply({"type": "intent", "commit_id": "c1", "table": "db.a", "ranges": {}, "files": ["a.parquet"], "lsn": 1})
    s.apply({"type": "intent", "commit_id": "c1", "table": "db.b", "ranges": {}, "files": ["b.parquet"], "lsn": 2})
    s.apply({"type": "outcome", "commit_id": "c1", "table": "db.b", "status": "failed", "lsn": 3})
    assert [i["table"] for i in s.unresolved().values()] == ["db.a"]
    assert s.pending == {"db.b": [{"files": ["b.parquet"], "ranges": {}}]}
    assert s.outcomes[-1] == {"commit_id": "c1", "table": "db.b", "status": "failed", "snapshot_id": None}


def test_records_and_checkpoints_from_before_per_table_intents_still_read() -> None:
    s = TxState.from_json({"lsn": 1, "pending": {}, "offsets": {}, "outcomes": [],
                           "intents": {"c0": {"table": "db.t", "ranges": {}, "files": ["f.parquet"]}}})
    assert s.unresolved() == {"c0 db.t": {"commit_id": "c0", "table": "db.t", "ranges": {}, "files": ["f.parquet"]}}
    s.apply({"type": "outcome", "commit_id": "c0", "status": "committed", "snapshot_id": 9, "lsn": 2})
    assert s.unresolved() == {}


def test_a_landed_commits_bad_records_wait_in_the_log_until_they_are_sent() -> None:
    """on_bad_record = "dead_letter": the intent carries the commit's bad records; once it is
    committed they wait (through a checkpoint) for the dead-letter topic; a commit that did not
    land (failed, abandoned) leaves none waiting: its records are reported again."""
    from frazil.events.payloads import DeadLetter
    from frazil.txlog import records

    letters = [DeadLetter("t", 0, 3, "id", "is required"), DeadLetter("t", 0, 4, "", "names no table", ""),
               DeadLetter("t", 0, 5, "", "cannot be opened", "db.gone")]
    s, lsn = TxState(), 0
    for record in (records.intent("c1", "db.t", ["f.parquet"], {}, letters, letters_from="anchor"),
                   records.outcome("c1", "db.t", "committed", 7),
                   records.intent("c2", "db.t", [], {}, letters), records.outcome("c2", "db.t", "failed"),
                   records.intent("c3", "db.t", [], {}, letters), records.outcome("c3", "db.t", "abandoned")):
        lsn += 1
        s.apply({**record, "lsn": lsn})
    assert list(s.dead_letters) == ["c1 db.t"]
    assert records.decode_dead_letters(s.dead_letters["c1 db.t"]["dead_letters"]) == letters
    # where the dead-letter topic stood before the commit: a restart looks for what went out past it
    assert s.dead_letters["c1 db.t"]["letters_from"] == "anchor"
    again = TxState.from_json(s.to_json())
    assert again == s
    again.apply({**records.dead_lettered("c1", "db.t"), "lsn": lsn + 1})
    assert again.dead_letters == {}


def test_an_intents_bad_records_are_kept_as_runs_and_a_log_of_single_letters_still_reads() -> None:
    """Ten thousand bad records with one cause are one entry of the intent; an intent written
    before runs (one entry per record) decodes to the same letters."""
    from frazil.events.payloads import DeadLetter
    from frazil.txlog import records

    letters = [DeadLetter("t", 1, o, "n", "not a number") for o in range(0, 100_000, 10)]
    letters += [DeadLetter("t", 1, 100_001, "", "names no table", ""), DeadLetter("t", 0, 2, "n", "not a number")]
    intent = records.intent("c1", "db.t", [], {}, letters)
    assert len(intent["dead_letters"]) == 3
    assert records.decode_dead_letters(intent["dead_letters"]) == letters
    one_by_one = [["t", 1, 7, "n", "not a number"], ["t", 1, 9, "", "names no table", ""]]
    assert records.decode_dead_letters(one_by_one) == [DeadLetter("t", 1, 7, "n", "not a number"),
                                                       DeadLetter("t", 1, 9, "", "names no table", "")]


def test_an_unsettled_intent_keeps_what_its_replay_needs() -> None:
    """An intent without an outcome is replayed at start (``recovery.open_and_settle``) with the
    topic ids its ranges were read from and where the dead-letter topic stood: both must survive
    the state (and a checkpoint of it), or the replay skips the recreated-topic check and loses
    the anchor."""
    from frazil.events.payloads import DeadLetter
    from frazil.txlog import records

    s = TxState()
    s.apply({**records.intent("c1", "db.t", ["f.parquet"], {}, [DeadLetter("t", 0, 3, "id", "bad")],
                              {"t": "AAAAAAAAAAAAAAAAAAAAAA"}, "anchor"), "lsn": 1})
    for state in (s, TxState.from_json(s.to_json())):
        (intent,) = state.unresolved().values()
        assert intent["topic_ids"] == {"t": "AAAAAAAAAAAAAAAAAAAAAA"} and intent["letters_from"] == "anchor"
