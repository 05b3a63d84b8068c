"""Reading the transaction log back after a crash: latest checkpoint plus replay.

- A checkpoint's temporary file (a crash before the rename) is ignored and removed.
- The newest checkpoint must be intact: it was renamed into place only after an fsync, so a bad
  one is damage, reported with its name.
- Segments are replayed in order, skipping records the checkpoint already holds. The end of the
  last segment may be torn (a write cut short by the crash, or a final frame that never reached
  the disk intact): it is cut off and reported. A bad frame anywhere else is damage: an error
  naming the file and byte position, never a silent skip.
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frazil.errors import CorruptJournalError
from frazil.txlog import framing
from frazil.txlog.journal import Journal, JournalPolicy, _lsn_of
from frazil.txlog.state import TxState

log = logging.getLogger(__name__)


@dataclass
class Recovered:
    state: TxState
    checkpoint: Path | None
    replayed: int = 0
    truncated: list[tuple[str, int, str]] = field(default_factory=list)  # (file, position, why)
    records: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)  # replayed (file, position, record)


def _files(directory: Path, prefix: str) -> list[Path]:
    found = [(lsn, p) for p in directory.iterdir() if p.name.startswith(prefix) and (lsn := _lsn_of(p)) is not None]
    return [p for _, p in sorted(found)]


def load_checkpoint(path: Path) -> TxState:
    try:
        wrapper = json.loads(path.read_text())
        body = wrapper["state"]
        if zlib.crc32(body.encode()) != wrapper["crc"]:
            raise ValueError("checksum mismatch")
        return TxState.from_json(json.loads(body))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptJournalError(f"checkpoint {path} is damaged ({exc}); restore it or move the log aside and "
                                  "let frazil recover from the table's offsets") from None


def recover(directory: Path, *, read_only: bool = False) -> Recovered:
    """Rebuild the state. ``read_only`` (for operators) reports a torn tail instead of cutting
    it and leaves unfinished checkpoints in place."""
    if read_only and not directory.is_dir():
        raise CorruptJournalError(f"{directory} is not a transaction log directory")
    directory.mkdir(parents=True, exist_ok=True)
    for tmp in directory.glob("checkpoint-*.json.tmp"):
        if read_only:
            continue
        log.warning("txlog: removing %s, a checkpoint the crash left unfinished", tmp.name)
        tmp.unlink()
    checkpoints = _files(directory, "checkpoint-")
    state = load_checkpoint(checkpoints[-1]) if checkpoints else TxState()
    result = Recovered(state, checkpoints[-1] if checkpoints else None)
    segments = _files(directory, "segment-")
    for n, segment in enumerate(segments):
        last = n == len(segments) - 1
        data = segment.read_bytes()
        position = 0
        while position < len(data):
            try:
                frame, after = framing.decode_at(data, position)
            except (framing.TornTail, framing.BadFrame) as exc:
                torn = isinstance(exc, framing.TornTail) or _reaches_end(data, position)
                if last and torn:
                    if not read_only:
                        with open(segment, "r+b") as f:
                            f.truncate(position)
                    result.truncated.append((segment.name, position, str(exc)))
                    log.warning("txlog: cut a torn tail off %s at byte %d (%s)", segment.name, position, exc)
                    break
                raise CorruptJournalError(
                    f"transaction log {segment} is damaged at byte {position} ({exc}) with more data after it; "
                    "this is not a torn last write. Keep the directory for inspection; frazil can recover "
                    "from the table's offsets if the log is moved aside") from None
            lsn = frame.payload["lsn"]
            if lsn > result.state.lsn:
                try:
                    result.state.apply(frame.payload)
                except ValueError as exc:
                    raise CorruptJournalError(f"transaction log {segment} at byte {position}: {exc}") from None
                result.replayed += 1
                if read_only:
                    result.records.append((segment.name, position, frame.payload))
            position = after
    return result


def _reaches_end(data: bytes, position: int) -> bool:
    """A bad frame whose declared length runs exactly to (or past) the end of the data is the
    last write, not damage in the middle."""
    if len(data) - position < framing.HEADER.size:
        return True
    length: int = framing.HEADER.unpack_from(data, position)[0]
    return position + framing.HEADER.size + length >= len(data)


def open_journal(directory: Path, policy: JournalPolicy | None = None) -> tuple[Journal, Recovered]:
    """Recover the log in ``directory`` and open it for appending."""
    recovered = recover(directory)
    return Journal(directory, recovered.state, policy or JournalPolicy()), recovered
