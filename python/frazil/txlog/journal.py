"""The append side of the transaction log: segments, group commit, checkpoints, cleanup.

Layout of a log directory::

    segment-00000000000000000001.log   records from lsn 1 on (framing.py)
    checkpoint-00000000000000000420.json   the whole state as of lsn 420, checksummed

One ``append`` call is one group commit: its records are written with one ``write`` and made
durable with one ``fsync`` (policy ``always``, the default, which loses nothing that ``append``
returned for). A checkpoint is written to a temporary file, synced, renamed into place and the
directory synced; then a new segment starts and every older segment and checkpoint is deleted,
so disk use stays bounded by the checkpoint thresholds.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frazil import faults
from frazil.txlog import framing
from frazil.txlog.state import TxState

log = logging.getLogger(__name__)

SEGMENT = "segment-{:020d}.log"
CHECKPOINT = "checkpoint-{:020d}.json"


@dataclass(frozen=True)
class JournalPolicy:
    fsync: str = "always"            # always | interval | never
    fsync_interval_s: float = 0.05   # with "interval": at most this long between syncs
    checkpoint_bytes: int = 8 * 1024 * 1024
    checkpoint_records: int = 10_000

    def __post_init__(self) -> None:
        if self.fsync not in ("always", "interval", "never"):
            raise ValueError(f"fsync policy {self.fsync!r} must be always, interval or never")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(directory: Path, state: TxState) -> Path:
    body = json.dumps(state.to_json(), separators=(",", ":"), sort_keys=True)
    final = directory / CHECKPOINT.format(state.lsn)
    tmp = final.with_suffix(".json.tmp")
    with open(tmp, "w") as f:
        json.dump({"crc": zlib.crc32(body.encode()), "state": body}, f)
        f.flush()
        os.fsync(f.fileno())
    faults.hit("txlog.checkpoint.before_rename")
    os.replace(tmp, final)
    _fsync_dir(directory)
    return final


class Journal:
    """Appends records to the log and checkpoints ``state``. Use :func:`open_journal`. Safe to
    call from several threads (the worker and coordinator roles of one process share it)."""

    def __init__(self, directory: Path, state: TxState, policy: JournalPolicy) -> None:
        self.directory, self.state, self.policy = directory, state, policy
        self._file = open(directory / SEGMENT.format(state.lsn + 1), "ab")
        self._bytes_since_checkpoint = 0
        self._records_since_checkpoint = 0
        self._last_sync = time.monotonic()
        self.fsyncs = 0
        self._lock = threading.RLock()

    def append(self, records: list[dict[str, Any]]) -> int:
        """Apply ``records`` to the state and make them durable (one group commit); returns the
        last lsn. A record the state rejects raises before anything is written."""
        with self._lock:
            return self._append(records)

    def _append(self, records: list[dict[str, Any]]) -> int:
        trial = self.state.copy()   # all of the records, or none
        frames = []
        for record in records:
            frame = framing.encode({**record, "lsn": trial.lsn + 1})
            trial.apply(framing.decode_at(frame, 0)[0].payload)   # what the log holds, not the caller's objects
            frames.append(frame)
        data = b"".join(frames)
        self._file.write(data)
        self._file.flush()
        faults.hit("txlog.before_fsync")
        if self.policy.fsync == "always" or (
                self.policy.fsync == "interval" and time.monotonic() - self._last_sync >= self.policy.fsync_interval_s):
            os.fsync(self._file.fileno())
            self._last_sync = time.monotonic()
            self.fsyncs += 1
        self.state = trial
        self._bytes_since_checkpoint += len(data)
        self._records_since_checkpoint += len(records)
        if (self._bytes_since_checkpoint >= self.policy.checkpoint_bytes
                or self._records_since_checkpoint >= self.policy.checkpoint_records):
            self._checkpoint()
        return self.state.lsn

    def checkpoint(self) -> Path:
        """Write the whole state, start a new segment, delete what the checkpoint replaces."""
        with self._lock:
            return self._checkpoint()

    def _checkpoint(self) -> Path:
        os.fsync(self._file.fileno())
        path = write_checkpoint(self.directory, self.state)
        self._file.close()
        self._file = open(self.directory / SEGMENT.format(self.state.lsn + 1), "ab")
        faults.hit("txlog.checkpoint.before_cleanup")
        removed = 0
        for old in self.directory.iterdir():
            lsn = _lsn_of(old)
            if lsn is None:
                continue
            if (old.name.startswith("segment-") and lsn <= self.state.lsn) or (
                    old.name.startswith("checkpoint-") and lsn < self.state.lsn):
                old.unlink()
                removed += 1
        _fsync_dir(self.directory)
        self._bytes_since_checkpoint = self._records_since_checkpoint = 0
        log.info("txlog checkpoint at lsn %d (%s), removed %d old file(s)", self.state.lsn, path.name, removed)
        return path

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.directory.iterdir() if p.is_file())

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if not self._file.closed:
            if self.policy.fsync != "never":
                os.fsync(self._file.fileno())
            self._file.close()


def _lsn_of(path: Path) -> int | None:
    for prefix, suffix in (("segment-", ".log"), ("checkpoint-", ".json")):
        if path.name.startswith(prefix) and path.name.endswith(suffix):
            digits = path.name[len(prefix):-len(suffix)]
            return int(digits) if digits.isdigit() else None
    return None
