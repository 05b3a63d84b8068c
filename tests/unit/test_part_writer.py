"""The worker's part writer: the parts of several tables written at once, each failure kept to its
table, and the files logged together once they are all written."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from frazil.coordination import writing
from frazil.coordination.batch import Batch, Part


class _Journal:
    def __init__(self) -> None:
        self.appends: list[list[dict[str, Any]]] = []

    def append(self, records: list[dict[str, Any]]) -> None:
        self.appends.append(records)


class _Metrics:
    def flushed(self, table: str, seconds: float, sizes: list[int]) -> None:
        pass


def _writer(monkeypatch: pytest.MonkeyPatch, tables: list[str], files: Any) -> tuple[writing.PartWriter, _Journal]:
    monkeypatch.setattr(writing.PartWriter, "_files", files)
    targets = {n: SimpleNamespace(load=lambda n=n: SimpleNamespace(name=n)) for n in tables}
    journal = _Journal()
    return writing.PartWriter(None, targets, journal, _Metrics()), journal  # type: ignore[arg-type]


def _batch(tables: list[str]) -> Batch:
    return Batch(ranges={}, parts={n: Part(table=n, data=SimpleNamespace(), ranges={}, rows=10)  # type: ignore[arg-type]
                                   for n in tables})


def test_the_parts_of_several_tables_are_written_at_once_and_a_failure_stays_with_its_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writing, "WRITE_THREADS", 3)
    # each good table's write waits for the other's: written one after the other, neither would pass
    both = threading.Barrier(2, timeout=10)

    def files(self: writing.PartWriter, target: Any, table: Any, part: Part, commit_id: str) -> list[Any]:
        if part.table == "c_bad":
            raise OSError("disk full")
        both.wait()
        return [SimpleNamespace(file_path=f"{part.table}-{commit_id}.parquet", file_size_in_bytes=100)]

    writer, journal = _writer(monkeypatch, ["a", "b", "c_bad"], files)
    batch, tables, _, _, failures = writer.write(_batch(["a", "b", "c_bad"]), "commit-1")
    assert set(tables) == {"a", "b", "c_bad"}
    assert {n: str(e) for n, e in failures.items()} == {"c_bad": "disk full"}
    assert [p.paths for p in (batch.parts["a"], batch.parts["b"])] == [["a-commit-1.parquet"], ["b-commit-1.parquet"]]
    assert batch.parts["c_bad"].files == () and batch.parts["c_bad"].data is not None   # kept for the next cycle
    # one log append, after every write, naming exactly the files written
    assert [[(r["table"], r["files"]) for r in records] for records in journal.appends] == [
        [("a", ["a-commit-1.parquet"]), ("b", ["b-commit-1.parquet"])]]


def test_an_error_that_is_not_an_outage_still_stops_the_write(monkeypatch: pytest.MonkeyPatch) -> None:
    def files(self: writing.PartWriter, target: Any, table: Any, part: Part, commit_id: str) -> list[Any]:
        if part.table == "b":
            raise ValueError("a bug, not an outage")
        return [SimpleNamespace(file_path=f"{part.table}.parquet", file_size_in_bytes=100)]

    writer, journal = _writer(monkeypatch, ["a", "b"], files)
    with pytest.raises(ValueError, match="a bug"):
        writer.write(_batch(["a", "b"]), "commit-1")
    assert journal.appends == []   # nothing logged: the cycle did not happen
