"""SIGKILL a process writing the transaction log at each journal fault point, at varying depths,
and by timer from outside; every time, recovery must hold every record the writer was told was
durable, in order, and appending must go on from there."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frazil.txlog import recover

pytestmark = [pytest.mark.chaos]

WRITER = r"""
import sys
from pathlib import Path
from frazil.txlog import JournalPolicy, open_journal
journal, rec = open_journal(Path(sys.argv[1]), JournalPolicy(checkpoint_records=int(sys.argv[2])))
start = rec.state.lsn
for i in range(start, start + 100000):
    lsn = journal.append([{"type": "files", "table": "db.t", "files": [f"f{i}"], "ranges": {}}])
    print(lsn, flush=True)   # acknowledged: append returned, so it must survive
"""


def run_writer(directory: Path, faults: str | None, checkpoint_records: int = 25,
               kill_after: float | None = None) -> int:
    """Run the writer until it dies; return the last lsn it acknowledged."""
    env = {**os.environ, "FRAZIL_FAULTS": faults or ""}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(checkpoint_records)],
                            stdout=subprocess.PIPE, env=env)
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, f"writer ended with {proc.returncode}, not by SIGKILL"
    lines = out.decode().split()
    return int(lines[-1]) if lines else 0


def check(directory: Path, acknowledged: int) -> int:
    state = recover(directory).state
    assert state.lsn >= acknowledged, f"lost acknowledged records: recovered {state.lsn} < acknowledged {acknowledged}"
    names = [f for p in state.pending["db.t"] for f in p["files"]]
    assert names == [f"f{i}" for i in range(state.lsn)], "records out of order, duplicated or missing"
    return state.lsn


@pytest.mark.parametrize("point", ["txlog.before_fsync", "txlog.checkpoint.before_rename",
                                   "txlog.checkpoint.before_cleanup"])
def test_kill_at_each_journal_fault_point(tmp_path: Path, point: str) -> None:
    rng = random.Random(point)
    for _ in range(8):
        depth = rng.randint(1, 60)
        acknowledged = run_writer(tmp_path, f"{point}=kill@{depth}")
        check(tmp_path, acknowledged)
    assert len(list(tmp_path.glob("checkpoint-*.json"))) <= 2


def test_kill_at_random_moments(tmp_path: Path) -> None:
    seed = int(os.environ.get("FRAZIL_CHAOS_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"txlog chaos seed {seed}")
    lsn = 0
    for _ in range(15):
        acknowledged = run_writer(tmp_path, None, checkpoint_records=rng.choice([5, 50, 500]),
                                  kill_after=rng.uniform(0.3, 1.2))
        lsn = check(tmp_path, acknowledged)
    assert lsn > 100, "the writer hardly wrote anything between kills"
