"""Cost of the transaction log: appends per second by fsync policy and group size, side by side.

Each record is the size of a real ``files`` report (one Parquet path, a few offset ranges). The
same run measures ``always`` (the default: every append durable), ``interval`` (50 ms) and
``never``, for group commits of 1 and 100 records. Writes ``benches/results/txlog.json``.

    python benches/txlog.py [--seconds S]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _results
from frazil.txlog import JournalPolicy, open_journal


def record(i: int) -> dict[str, object]:
    return {"type": "files", "table": "db.events",
            "files": [f"file:///warehouse/db/events/data/00000-{i}-6b3c1a2e-8f4d-4d0a-9c1e-3f2b7a9d0c11.parquet"],
            "ranges": {f"events/{p}": [i * 100, i * 100 + 100] for p in range(4)}}


def measure(policy: str, group: int, seconds: float) -> dict[str, object]:
    directory = Path(tempfile.mkdtemp(prefix="frazil-txlog-bench-"))
    try:
        journal, _ = open_journal(directory, JournalPolicy(fsync=policy, checkpoint_records=5000))
        n = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            journal.append([record(n + k) for k in range(group)])
            # keep the state from growing: a commit takes the files out of pending
            journal.append([{"type": "intent", "commit_id": f"c{n}", "table": "db.events", "ranges": {},
                             "files": [f for p in journal.state.pending["db.events"] for f in p["files"]]},
                            {"type": "outcome", "commit_id": f"c{n}", "status": "committed", "snapshot_id": n}])
            n += group
        elapsed = time.perf_counter() - started
        journal.close()
        return {"fsync": policy, "group": group, "reports_per_s": round(n / elapsed),
                "fsyncs_per_s": round(journal.fsyncs / elapsed)}
    finally:
        shutil.rmtree(directory)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    rows = []
    print(f"{'fsync':<10}{'group':>6}{'reports/s':>12}{'fsyncs/s':>10}")
    for group in (1, 100):
        for policy in ("never", "interval", "always"):
            row = measure(policy, group, args.seconds)
            rows.append(row)
            print(f"{policy:<10}{group:>6}{row['reports_per_s']:>12,}{row['fsyncs_per_s']:>10,}", flush=True)
    _results.write("txlog", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
